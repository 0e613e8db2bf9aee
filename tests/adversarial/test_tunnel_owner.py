"""Tunnels are their job's owner's only: a hostile peer's tunnel and shell into someone
else's job are refused with a reason (the same one as for a job that does not exist), as are
headers signed by another key, undeclared ports, jobs that do not run and floods past the
per-job cap, each with nothing reaching the job; the honest owner's tunnel still works."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from engine.domain import tunnel_frames as t
from engine.domain import wire
from engine.identity import Identity
from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, open_job, seal_job
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, wait_for
from tests.tunnel_helpers import (
    Forwarding,
    free_port,
    http_get,
    pair,
    service_url,
    submit_service,
)

__all__ = ["service_url"]

PROCESS_JOBS = '[jobs]\nexecutors = ["process"]\ncheckpoint_interval_s = 0\nslots = 2\n'


def _ask(
    peer: HostilePeer, provider: str, request: t.TunnelOpen, key: Identity | None = None
) -> Any:
    frames = peer.request(provider, t.TUNNEL_PROTOCOL, [t.seal(key or peer.identity, request)])
    assert frames, "no answer at all"
    return t.decode_answer(frames[0], provider)


def _own_job(
    peer: HostilePeer, provider: str, url: str, port: int, extra_ports: tuple[int, ...] = ()
) -> str:
    """The hostile peer runs a service job of its own (raw offer and confirm)."""
    job_id = "a0a1a2a3a4a5"
    spec = {
        "framework": "scikit-learn",
        "script_url": url,
        "kind": "service",
        "ports": [port, *extra_ports],
        "env": {"PORT": str(port)},
        "expected_minutes": 5,
    }
    offer = {"t": "offer", "v": 1, "job_id": job_id, "spec": spec, "consumer": peer.peer_id}
    quote = open_job(peer.request(provider, JOB_PROTOCOL, [seal_job(peer.identity, offer)])[0])
    assert quote["t"] == "quote", quote
    confirm = {"t": "confirm", "v": 1, "job_id": job_id, "total_ntx": quote["total_ntx"]}
    accepted = open_job(peer.request(provider, JOB_PROTOCOL, [seal_job(peer.identity, confirm)])[0])
    assert accepted["t"] == "accepted", accepted
    return job_id


def test_only_the_owner_tunnels_into_a_job(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    service_url: str,
    tmp_path: Path,
) -> None:
    provider, consumer = pair(daemons, PROCESS_JOBS)
    port = free_port()
    job_id = submit_service(consumer, service_url, tmp_path, port)
    peer = hostile(seed=b"\x66" * 32, bootstrap=[provider.addrs()[0]])
    peer.wait_connected(provider.peer_id)
    pid = provider.peer_id
    try:
        # Someone else's job: refused, in the words used for a job that does not exist.
        for request in (
            t.TunnelOpen(job_id=job_id, kind="tcp", port=port),
            t.TunnelOpen(job_id=job_id, kind="shell", command=("sh", "-c", "cat ~/.ssh/*")),
            t.TunnelOpen(job_id="ffffffffffff", kind="tcp", port=port),
        ):
            answer = _ask(peer, pid, request)
            assert not answer.ok and answer.reason == "no such job of yours"
        # A header signed with another key than the stream's peer's.
        forged = _ask(
            peer,
            pid,
            t.TunnelOpen(job_id=job_id, kind="tcp", port=port),
            key=Identity(SigningKey(b"\x31" * 32)),
        )
        assert not forged.ok and "signed by another peer" in forged.reason
        # Garbage instead of a header: a refusal, then the end.
        junk = peer.request(pid, t.TUNNEL_PROTOCOL, [wire.frame(b"\x00" * 64)])
        assert not t.decode_answer(junk[0], pid).ok
        log = run_cli("job", "logs", job_id, home=provider.home).stdout
        assert "shell opened" not in log

        # Its own job: an undeclared port is refused; the declared one works, up to the cap.
        own_port = free_port()
        # It also declares the port of another service on the provider's 127.0.0.1 (here:
        # the test's script server): the process executor's tunnel must not reach it.
        host_port = int(service_url.split(":")[2].split("/")[0])
        own = _own_job(peer, pid, service_url, own_port, (host_port,))
        wait_for(lambda: provider.cli("job", "show", own)["state"] == "running", "never ran")
        wait_for(
            lambda: "serving on" in run_cli("job", "logs", own, home=provider.home).stdout,
            "its service never listened",
        )
        undeclared = _ask(peer, pid, t.TunnelOpen(job_id=own, kind="tcp", port=own_port + 1))
        assert not undeclared.ok and "not one the job declared" in undeclared.reason
        borrowed = _ask(peer, pid, t.TunnelOpen(job_id=own, kind="tcp", port=host_port))
        assert not borrowed.ok and "does not listen" in borrowed.reason
        held = []
        for _ in range(t.STREAMS_PER_JOB):
            stream = peer.open(pid, t.TUNNEL_PROTOCOL)
            stream.write(t.seal(peer.identity, t.TunnelOpen(job_id=own, kind="tcp", port=own_port)))
            body = peer.call(wire.read_frame, stream.stream, t.MAX_HEADER_BYTES)
            assert t.decode_answer(body, pid).ok
            held.append(stream)
        flood = _ask(peer, pid, t.TunnelOpen(job_id=own, kind="tcp", port=own_port))
        assert not flood.ok and f"{t.STREAMS_PER_JOB} tunnels open already" in flood.reason
        # One of them still carries HTTP (the cap refused only the extra one).
        held[0].write(b"GET / HTTP/1.0\r\n\r\n")
        assert b"200 OK" in held[0].read(4096)
        for stream in held:
            stream.reset()

        # A job that no longer runs: refused.
        cancel = {"t": "cancel", "v": 1, "job_id": own}
        peer.request(pid, JOB_PROTOCOL, [seal_job(peer.identity, cancel)])
        wait_for(lambda: provider.cli("job", "show", own)["state"] == "cancelled", "not ended")
        ended = _ask(peer, pid, t.TunnelOpen(job_id=own, kind="tcp", port=own_port))
        assert not ended.ok and "not running" in ended.reason

        # The owner's tunnel still works after all of that.
        forward = Forwarding(consumer, job_id, str(port))
        try:
            assert http_get(forward.port)[0] == 200
        finally:
            assert forward.stop() == 0
    finally:
        run_cli("job", "cancel", job_id, home=consumer.home)


def test_shells_can_be_turned_off(
    daemons: Callable[..., Daemon], service_url: str, tmp_path: Path
) -> None:
    _, consumer = pair(daemons, PROCESS_JOBS + "allow_shell = false\n")
    port = free_port()
    job_id = submit_service(consumer, service_url, tmp_path, port)
    try:
        done = run_cli("job", "shell", job_id, "--", "id", home=consumer.home)
        assert done.returncode == 1 and "shells are turned off" in done.stderr
        forward = Forwarding(consumer, job_id, str(port))  # tunnels still work
        try:
            assert http_get(forward.port)[0] == 200
        finally:
            forward.stop()
    finally:
        run_cli("job", "cancel", job_id, home=consumer.home)


# Listens on [::1]:PORT only, where PORT is a provider service's on 127.0.0.1, and says so.
V6_ONLY = """
import os, socket
server = socket.socket(socket.AF_INET6)
server.bind(("::1", int(os.environ["PORT"])))
server.listen()
print("serving on [::1]", flush=True)
while True:
    conn, _ = server.accept()
    conn.recv(4096)
    conn.sendall(b"HTTP/1.0 200 OK\\r\\n\\r\\nthe job's own")
    conn.close()
"""


def test_a_tunnel_reaches_the_jobs_listener_not_the_providers(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    service_url: str,
    tmp_path: Path,
) -> None:
    """The job's listener on [::1]:PORT passed the owner check, and the tunnel then connected
    to 127.0.0.1:PORT: a provider service there (here: the test's script server) answered."""
    provider, _ = pair(daemons, PROCESS_JOBS)
    (tmp_path / "www" / "v6.py").write_text(V6_ONLY)
    host_port = int(service_url.split(":")[2].split("/")[0])
    peer = hostile(seed=b"\x66" * 32, bootstrap=[provider.addrs()[0]])
    peer.wait_connected(provider.peer_id)
    pid = provider.peer_id
    own = _own_job(peer, pid, service_url.replace("serve.py", "v6.py"), host_port)
    try:
        wait_for(
            lambda: "serving on" in run_cli("job", "logs", own, home=provider.home).stdout,
            "its service never listened",
        )
        stream = peer.open(pid, t.TUNNEL_PROTOCOL)
        stream.write(t.seal(peer.identity, t.TunnelOpen(job_id=own, kind="tcp", port=host_port)))
        body = peer.call(wire.read_frame, stream.stream, t.MAX_HEADER_BYTES)
        assert t.decode_answer(body, pid).ok
        stream.write(b"GET /serve.py HTTP/1.0\r\n\r\n")
        answer = stream.read(4096)
        assert b"the job's own" in answer and b"Content-Type" not in answer, answer
        stream.reset()
    finally:
        peer.request(
            pid, JOB_PROTOCOL, [seal_job(peer.identity, {"t": "cancel", "v": 1, "job_id": own})]
        )
