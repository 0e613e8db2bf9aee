"""Tunnels into running jobs (engine/jobs/tunnel*.py): the header and shell framing, the relay,
the spec's new fields, the process executor's pipes, and a service job end to end with real
daemons and the real CLI (process executor: its service listens on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing

from engine import api
from engine.domain import tunnel_frames as t
from engine.domain.spec import JobSpec, offer_spec, validate_spec
from engine.identity import Identity
from engine.jobs import tunnel_relay
from nunet_tui.cli.job_tunnel import LEASE_S
from tests.conftest import FIXED_SEED, run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.tunnel_helpers import (
    Forwarding,
    free_port,
    http_get,
    http_post,
    pair,
    service_url,
    submit_service,
)

__all__ = ["daemons", "service_url"]

PROCESS_JOBS = (
    '[jobs]\nexecutors = ["process"]\ncheckpoint_interval_s = 0\nallow_process_shell = true\n'
)


# --- the spec ---------------------------------------------------------------------------------


def _spec(**extra: object) -> JobSpec:
    return msgspec.convert(
        {"framework": "scikit-learn", "script_url": "https://x.example/a.py", **extra}, JobSpec
    )


def test_ports_and_kind_are_validated() -> None:
    assert validate_spec(_spec(kind="service", ports=[8888, 7860])).ok
    fields = {p.field for p in validate_spec(_spec(kind="daemon")).problems}
    assert fields == {"kind"}
    for ports in ([0], [65536], [80, 80], list(range(1, 10))):
        report = validate_spec(_spec(ports=ports))
        assert [p.field for p in report.problems] == ["ports"], ports
    with pytest.raises(msgspec.ValidationError):
        _spec(ports=["8888"])


def test_an_offer_leaves_out_new_fields_at_their_defaults() -> None:
    # Older providers refuse unknown spec fields: a batch job must still reach them.
    assert "kind" not in offer_spec(_spec()) and "ports" not in offer_spec(_spec())
    shown = offer_spec(_spec(kind="service", ports=[8000]))
    assert shown["kind"] == "service" and list(shown["ports"]) == [8000]


# --- the wire -------------------------------------------------------------------------------


def _identity(seed: bytes = FIXED_SEED) -> Identity:
    from nacl.signing import SigningKey

    return Identity(SigningKey(seed))


def _body(framed: bytes) -> bytes:
    from engine.domain.wire import decode_varint

    size, used = decode_varint(framed)
    return framed[used : used + size]


def test_headers_are_signed_by_the_peer_at_the_other_end() -> None:
    me, other = _identity(), _identity(b"\x07" * 32)
    request = t.TunnelOpen(job_id="a1b2c3d4e5f6", kind="tcp", port=8888)
    body = _body(t.seal(me, request))
    assert t.decode_open(body, me.peer_id) == request
    with pytest.raises(t.TunnelError, match="another peer"):
        t.decode_open(body, other.peer_id)
    answer = _body(t.seal(other, t.TunnelAnswer(ok=False, reason="no such job of yours")))
    assert t.decode_answer(answer, other.peer_id).reason == "no such job of yours"


@pytest.mark.parametrize(
    "fields",
    [
        {"job_id": "../../etc", "kind": "tcp", "port": 1},
        {"job_id": "a1b2c3d4e5f6", "kind": "exec"},
        {"job_id": "a1b2c3d4e5f6", "kind": "tcp", "port": 70000},
        {"job_id": "a1b2c3d4e5f6", "kind": "shell", "term": "xterm\x1b]0;x\x07"},
        {"job_id": "a1b2c3d4e5f6", "kind": "shell", "command": ["x"] * 65},
        {"job_id": "a1b2c3d4e5f6", "kind": "shell", "rows": 0},
    ],
)
def test_bad_headers_are_refused(fields: dict[str, object]) -> None:
    from engine.domain import wire

    me = _identity()
    payload = msgspec.msgpack.encode({"v": 1, **fields})
    body = wire.seal_payload(me, t.KIND, payload)
    with pytest.raises(t.TunnelError):
        t.decode_open(body, me.peer_id)


def test_shell_frames_split_anywhere_and_are_bounded() -> None:
    stream = (
        t.shell_frame(t.SHELL_DATA, b"ls\r")
        + t.resize_frame(50, 132)
        + t.exit_frame(3)
        + t.shell_frame(t.SHELL_EOF)
    )
    frames = t.ShellFrames()
    got = [f for i in range(len(stream)) for f in frames.feed(stream[i : i + 1])]
    assert got == [
        (t.SHELL_DATA, b"ls\r"),
        (t.SHELL_RESIZE, b"\x00\x32\x00\x84"),
        (t.SHELL_EXIT, b"\x00\x00\x00\x03"),
        (t.SHELL_EOF, b""),
    ]
    with pytest.raises(t.TunnelError):
        t.ShellFrames().feed(b"\x00\xff\xff\xff\xff")  # 4 GiB announced: never buffered
    with pytest.raises(t.TunnelError):
        t.ShellFrames().feed(b"\x09\x00\x00\x00\x00")


# --- the relay ------------------------------------------------------------------------------


class FakePipe:
    """One end of an in-memory byte stream (a fake of our Pipe port)."""

    def __init__(
        self, inbox: trio.MemoryReceiveChannel[bytes], outbox: trio.MemorySendChannel[bytes]
    ) -> None:
        self.inbox, self.outbox = inbox, outbox
        self.closed = False

    async def receive(self, max_bytes: int) -> bytes:
        try:
            return await self.inbox.receive()
        except trio.EndOfChannel:
            return b""

    async def send(self, data: bytes) -> None:
        await self.outbox.send(data)

    async def send_eof(self) -> None:
        await self.outbox.aclose()

    async def close(self) -> None:
        self.closed = True


def _fake_pair() -> tuple[FakePipe, FakePipe]:
    a_send, b_recv = trio.open_memory_channel[bytes](16)
    b_send, a_recv = trio.open_memory_channel[bytes](16)
    return FakePipe(a_recv, a_send), FakePipe(b_recv, b_send)


def test_relay_moves_both_ways_passes_eof_and_counts() -> None:
    trio.run(_relay_both_ways)


async def _relay_both_ways() -> None:
    left_user, left = _fake_pair()
    right, right_user = _fake_pair()
    seen = tunnel_relay.Activity()
    async with trio.open_nursery() as nursery:
        result: list[str] = []

        async def run() -> None:
            result.append(await tunnel_relay.relay(left, right, idle_s=30, activity=seen))

        nursery.start_soon(run)
        await left_user.send(b"request")
        assert await right_user.receive(100) == b"request"
        await right_user.send(b"answer!!")
        assert await left_user.receive(100) == b"answer!!"
        await left_user.send_eof()
        assert await right_user.receive(100) == b""  # the EOF went through
        await right_user.send_eof()
    assert result == ["closed"] and (seen.up, seen.down) == (7, 8)


def test_relay_closes_an_idle_tunnel() -> None:
    async def idle() -> str:
        _, left = _fake_pair()
        right, _ = _fake_pair()
        with trio.fail_after(100):
            return await tunnel_relay.relay(left, right, idle_s=10)

    assert trio.run(idle, clock=trio.testing.MockClock(autojump_threshold=0)) == "idle"


# --- commands are dispatched ------------------------------------------------------------------


def test_every_tunnel_command_crosses_the_socket_to_the_jobs_room() -> None:
    """The control socket decodes what engine/commands.py lists; the tunnel commands are
    the jobs room's (the lists drifted before; tests/engine/test_command_registry.py checks all)."""
    import typing

    from engine.commands import ROOMS, AnyCommand

    union = set(typing.get_args(AnyCommand))
    for command in (
        api.JobForward,
        api.JobForwardClose,
        api.ListForwards,
        api.JobShell,
        api.StopJob,
    ):
        assert command in union and command in ROOMS["jobs"]


def test_the_shell_client_sends_keys_resizes_and_returns_the_exit_status() -> None:
    """run_shell against a fake provider on a socket pair: stdin goes out as data frames,
    SIGWINCH as a resize frame, the data frames come out on stdout, the exit frame ends it."""
    import signal
    import socket
    import threading

    from nunet_tui.shell_relay import run_shell

    ours, theirs = socket.socketpair()
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    got: list[tuple[int, bytes]] = []

    def provider() -> None:
        frames = t.ShellFrames()
        while not any(kind == t.SHELL_RESIZE for kind, _ in got):
            got.extend(frames.feed(theirs.recv(4096)))
            if any(kind == t.SHELL_DATA for kind, _ in got):
                os.kill(os.getpid(), signal.SIGWINCH)  # the local terminal was resized
        theirs.sendall(t.shell_frame(t.SHELL_DATA, b"hello\r\n") + t.exit_frame(42))

    thread = threading.Thread(target=provider, daemon=True)
    thread.start()
    os.write(stdin_w, b"ls\r")
    assert run_shell(ours, stdin_r, stdout_w) == 42
    thread.join(5)
    assert (t.SHELL_DATA, b"ls\r") in got
    assert any(kind == t.SHELL_RESIZE and len(body) == 4 for kind, body in got)
    assert os.read(stdout_r, 100) == b"hello\r\n"
    for fd in (stdin_r, stdin_w, stdout_r, stdout_w):
        os.close(fd)


def test_forward_ports_parse() -> None:
    from engine.errors import EngineError
    from nunet_tui.cli.job_tunnel import parse_ports

    assert parse_ports("8888") == (0, 8888)
    assert parse_ports("9000:8888") == (9000, 8888)
    for bad in ("x", "0", "70000", "1:2:3", "-1:80"):
        with pytest.raises(EngineError):
            parse_ports(bad)


# --- the process executor's pipes -----------------------------------------------------------


def test_process_pty_shell_runs_resizes_and_returns_the_exit_status(tmp_path: Path) -> None:
    trio.run(_pty_shell, tmp_path)


async def _pty_shell(tmp_path: Path) -> None:
    from engine.jobs.executors.pty_shell import open_pty_shell

    script = "import shutil,sys; print('size', *shutil.get_terminal_size()); sys.exit(7)"
    env = {"PATH": os.environ["PATH"], "TERM": "xterm", "COLUMNS": "", "LINES": ""}
    env = {k: v for k, v in env.items() if v}
    pipe = await open_pty_shell(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, rows=33, cols=101
    )
    out = b""
    with trio.fail_after(20):
        while chunk := await pipe.receive(4096):
            out += chunk
        assert await pipe.exit_code() == 7
    await pipe.close()
    assert b"size 101 33" in out


# --- end to end: real daemons, the real CLI, the process executor -----------------------------


def test_a_service_job_is_reached_shelled_into_and_stopped(
    daemons: Callable[..., Daemon], service_url: str, tmp_path: Path
) -> None:
    provider, consumer = pair(daemons, PROCESS_JOBS)
    port = free_port()
    job_id = submit_service(consumer, service_url, tmp_path, port)
    try:
        forward = Forwarding(consumer, job_id, str(port))
        try:
            status, body = http_get(forward.port)
            assert status == 200 and b"from a job" in body
            blob = os.urandom(300_000)
            assert http_post(forward.port, blob) == blob  # a large body both ways, unchanged
        finally:
            assert forward.stop() == 0

        # A `job forward` killed with -9 cannot say goodbye: its lease runs out, and the
        # daemon stops listening.
        killed = Forwarding(consumer, job_id, str(port))
        assert http_get(killed.port)[0] == 200
        killed.proc.kill()
        killed.proc.wait(10)

        def gone() -> bool:
            try:
                http_get(killed.port, timeout=1)
            except OSError:
                return True
            return False

        wait_for(gone, "the killed forward kept listening", timeout=LEASE_S + 10)

        # A shell: a command runs in the job's workspace and its exit status is ours.
        done = run_cli(
            "job",
            "shell",
            job_id,
            "--",
            sys.executable,
            "-c",
            "import os,sys; print('in', os.path.basename(os.getcwd())); sys.exit(5)",
            home=consumer.home,
        )
        assert done.returncode == 5, done.stderr
        assert "in workspace" in done.stdout
        # Recorded in the job's log (who, when), never what was typed.
        wait_for(
            lambda: "shell of" in run_cli("job", "logs", job_id, home=provider.home).stdout,
            "the shell was never logged",
        )
        log = run_cli("job", "logs", job_id, home=provider.home).stdout
        assert f"shell opened by {consumer.peer_id}" in log and "sys.exit(5)" not in log

        # An undeclared port is refused by the consumer's own node, with the reason.
        refused = run_cli("job", "forward", job_id, "9999", home=consumer.home)
        assert refused.returncode == 1 and "declared no port 9999" in refused.stderr

        # Stopping the service ends it normally, and closes a forward that is still open.
        forward = Forwarding(consumer, job_id, str(port))
        assert http_get(forward.port)[0] == 200
        stopped = consumer.cli("job", "stop", job_id)
        wait_for(
            lambda: consumer.cli("job", "show", job_id)["state"] == "completed", "never stopped"
        )
        assert forward.proc.wait(20) == 0  # the forward saw its job end
        with pytest.raises(OSError):
            http_get(forward.port, timeout=2)
        shown = consumer.cli("job", "show", job_id)
        assert stopped["job_id"] == job_id and shown["reason"] == "stopped by the consumer"
        metering = shown["metering"]
        assert metering["net_rx_bytes"] >= 300_000 and metering["net_tx_bytes"] >= 300_000
    finally:  # a failed test leaves no service behind on the host
        run_cli("job", "cancel", job_id, home=consumer.home)


def test_job_stop_refuses_a_batch_job(daemons: Callable[..., Daemon], tmp_path: Path) -> None:
    consumer = daemons("consumer", 41)
    done = run_cli("job", "stop", "a1b2c3d4e5f6", home=consumer.home)
    assert done.returncode == 1 and "no job" in done.stderr


# --- shells off: advertised, matched on ---------------------------------------------------------


def test_an_advert_names_shells_only_when_they_are_off() -> None:
    """Older peers refuse adverts with unknown fields: a provider that allows shells (the
    default) must send exactly the fields they know."""
    from engine.domain.wire import Advert

    class OldAdvert(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
        v: int = 1
        peer_id: str
        channel: str
        cpu_mhz: int = 0
        ram_mb: int = 0
        disk_mb: int = 0
        gpus: tuple[dict[str, object], ...] = ()
        prices: dict[str, float] = {}
        executors: tuple[str, ...] = ()
        frameworks: tuple[str, ...] = ()
        version: str = ""
        slots: int = 1
        addrs: tuple[str, ...] = ()
        seq: int = 0
        at: float = 0.0
        expires_at: float = 0.0
        withdrawn: bool = False

    default = Advert(peer_id="p", channel="c", executors=("docker",), slots=3)
    old = msgspec.msgpack.decode(msgspec.msgpack.encode(default), type=OldAdvert)
    assert old.executors == ("docker",) and old.slots == 3
    off = msgspec.msgpack.encode(Advert(peer_id="p", channel="c", no_shell=True))
    assert msgspec.msgpack.decode(off, type=Advert).no_shell
    assert b"no_shell" in off and b"no_shell" not in msgspec.msgpack.encode(default)


def test_matching_keeps_jobs_that_want_a_shell_off_providers_that_refuse_them() -> None:
    from engine.domain.admission import Needs, judge

    res = api.PeerResources(
        cpu_mhz=8000,
        memory_mb=16000,
        price_units={"low": 1_000_000},
        executors=("docker",),
        frameworks=("scikit-learn",),
        shell=False,
    )
    assert judge(Needs.of(_spec()), res).ok
    verdict = judge(Needs.of(_spec(shell=True)), res)
    assert not verdict.ok and "shells are turned off" in verdict.reason
    assert judge(Needs.of(_spec(shell=True)), msgspec.structs.replace(res, shell=True)).ok


def test_a_service_that_logs_every_request_is_followed_in_batches(
    daemons: Callable[..., Daemon], service_url: str, tmp_path: Path
) -> None:
    """Its owner gets every line, but in Updates that follow the first at most one a
    LINES_GATHER_S: one signed Update a request cost both daemons a signature, its check and a
    store write in the middle of every round trip through the job's tunnel."""
    import http.client

    from engine.jobs import protocol as p
    from engine.jobs.provider import LINES_GATHER_S
    from engine.network.host import peer_id_of
    from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, seal_job
    from tests.adversarial.test_tunnel_owner import _own_job

    # Its requests go to the job's port on the host's loopback, straight, not through a
    # tunnel: only an unsandboxed process job listens there (a sandboxed one has its own).
    provider, _ = pair(daemons, PROCESS_JOBS + 'process_sandbox = "off"\n')
    pid = provider.peer_id
    peer = HostilePeer(seed=b"\x67" * 32, bootstrap=[provider.addrs()[0]]).start()
    requests = 60
    try:
        peer.wait_connected(pid)
        port = free_port()
        own = _own_job(peer, pid, service_url, port)
        wait_for(
            lambda: "serving on" in run_cli("job", "logs", own, home=provider.home).stdout,
            "its service never listened",
            60,
        )

        def ask() -> None:  # one keep-alive connection, as a browser or the benchmark does
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            for _ in range(requests):
                conn.request("GET", "/")
                conn.getresponse().read()
            conn.close()

        async def follow() -> tuple[int, int, float]:
            stream = await peer.host.new_stream(peer_id_of(pid), [JOB_PROTOCOL])
            await p.send(stream, peer.identity, p.Follow(job_id=own))
            updates = lines = 0
            async with trio.open_nursery() as nursery:
                started = trio.current_time()
                nursery.start_soon(trio.to_thread.run_sync, ask)
                with trio.fail_after(60):
                    while lines < requests:
                        received = await p.receive(stream, pid)
                        assert received is not None, "the provider ended the follow"
                        update = received[0]
                        assert isinstance(update, p.Update), update
                        got = sum('"GET / ' in line.text for line in update.lines)
                        updates += bool(got)
                        lines += got
                took = trio.current_time() - started
            await stream.reset()
            return updates, lines, took

        updates, lines, took = peer.call(follow)
        assert lines == requests  # none lost, none twice
        # The first line goes at once; later ones wait at most LINES_GATHER_S together.
        assert updates <= 2 + took / LINES_GATHER_S, (updates, took)
    finally:
        cancel = {"t": "cancel", "v": 1, "job_id": "a0a1a2a3a4a5"}
        with contextlib.suppress(Exception):
            peer.request(pid, JOB_PROTOCOL, [seal_job(peer.identity, cancel)])
        peer.stop()
