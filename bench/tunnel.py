"""Throughput and round-trip latency of a job's tunnel, as ratios against the paths under it.

Two real daemons on 127.0.0.1 (process executor) run the example HTTP service job
(examples/jobs/http_service); an echo of SIZE bytes and small GETs on one keep-alive
connection go three ways:

- direct: loopback TCP to the service itself (what the tunnel adds nothing to);
- raw stream: a libp2p peer's own tunnel stream to the provider (one libp2p stream, the
  provider's bridge to the service), no consumer daemon and no local TCP hop;
- forwarded: ``nunet-tui job forward`` (local TCP -> consumer daemon -> libp2p -> provider).

Goals (issue 13): forwarded >= 50 % of the raw stream's throughput; < 5 ms added per round
trip on loopback. Run: ``.venv/bin/python bench/tunnel.py [--size-mb 8] [--rtts 200]``.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.domain import tunnel_frames as t
from engine.domain import wire
from tests.adversarial.hostile import HostilePeer
from tests.adversarial.test_tunnel_owner import _own_job as own_job
from tests.conftest import FETCH_LOOPBACK_ENV, MACHINE_TOML, TEST_ADDRESS, make_home
from tests.daemon_harness import HEARTBEAT_ENV, Daemon, wait_for
from tests.tunnel_helpers import Forwarding, free_port, submit_service

DAEMONS = ("consumer", "provider")
IDLE_S = 5.0
JOBS = '[jobs]\nexecutors = ["{}"]\ncheckpoint_interval_s = 0\nslots = 2\n'


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far; 0 where /proc is missing."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _idle_cpu(pids: tuple[int, ...], seconds: float) -> list[float]:
    """CPU seconds per second that each of ``pids`` spends over ``seconds`` of no requests."""
    before = [_cpu_s(pid) for pid in pids]
    time.sleep(seconds)
    return [(_cpu_s(pid) - at) / seconds for pid, at in zip(pids, before, strict=True)]


def _http_times(
    port: int, body: bytes, rtts: int, pids: tuple[int, ...] = ()
) -> tuple[float, list[float], list[float]]:
    """The echo's seconds, each small GET's seconds, and the CPU seconds per GET that each
    of ``pids`` spent during them (on a shared machine the round trip waits for CPU too)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", "/")
    conn.getresponse().read()
    started = time.perf_counter()
    conn.request("POST", "/echo", body=body)
    assert conn.getresponse().read() == body
    seconds = time.perf_counter() - started
    samples = []
    cpu = [_cpu_s(pid) for pid in pids]
    for _ in range(rtts):
        at = time.perf_counter()
        conn.request("GET", "/")
        conn.getresponse().read()
        samples.append(time.perf_counter() - at)
    cpu = [(_cpu_s(pid) - before) / rtts for pid, before in zip(pids, cpu, strict=True)]
    conn.close()
    return seconds, samples, cpu


def _raw_stream_times(
    peer: HostilePeer, provider: str, job_id: str, port: int, body: bytes, rtts: int
) -> tuple[float, list[float]]:
    import trio

    async def run() -> tuple[float, list[float]]:
        from engine.network.host import peer_id_of

        stream = await peer.host.new_stream(peer_id_of(provider), [t.TUNNEL_PROTOCOL])
        await stream.write(
            t.seal(peer.identity, t.TunnelOpen(job_id=job_id, kind="tcp", port=port))
        )
        answer = t.decode_answer(await wire.read_frame(stream, t.MAX_HEADER_BYTES), provider)
        assert answer.ok, answer.reason

        async def exchange(request: bytes) -> None:
            await stream.write(request)
            # The answer's head is parsed once and its body only counted (no copy of what
            # arrived so far per read: that made the raw stream look slower than it is).
            got = bytearray()
            end = -1
            while end < 0:
                got += await stream.read(1 << 16)
                end = got.find(b"\r\n\r\n")
            head = bytes(got[:end]).lower()
            length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
            left = length - (len(got) - end - 4)
            while left > 0:
                left -= len(await stream.read(1 << 16))

        get = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        started = trio.current_time()
        await exchange(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )
        seconds = trio.current_time() - started
        samples = []
        for _ in range(rtts):
            at = trio.current_time()
            await exchange(get)
            samples.append(trio.current_time() - at)
        await stream.reset()
        return seconds, samples

    return peer.call(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=8.0)
    parser.add_argument("--rtts", type=int, default=200)
    parser.add_argument(
        "--executor",
        choices=("process", "docker"),
        default="process",
        help="docker: the service in a network_mode none container (no direct path; "
        "DOCKER_HOST from scripts/dockerd.sh, the test image built)",
    )
    args = parser.parse_args()
    docker = args.executor == "docker"
    root = Path(tempfile.mkdtemp(prefix="nunet-bench-tunnel-"))
    env = {**HEARTBEAT_ENV, **FETCH_LOOPBACK_ENV}
    consumer = Daemon(make_home(root / "consumer", seed=b"\x51" * 32), env).start()
    provider = Daemon(
        make_home(
            root / "provider",
            seed=b"\x50" * 32,
            # Unsandboxed process jobs: "direct" needs the service on the host's loopback (a
            # sandboxed job has its own). On an open connection the tunnel's path is the same
            # either way; sandboxed, each connection is made by a helper in the job's network
            # namespace (engine/jobs/executors/sandbox_connect.py).
            machine_toml=MACHINE_TOML
            + JOBS.format(args.executor)
            + ('process_sandbox = "off"\n' if args.executor == "process" else ""),
        ),
        {**env, "NUNET_NETWORK_BOOTSTRAP": consumer.addrs()[0]},
    ).start()
    peer = HostilePeer(seed=b"\x52" * 32, bootstrap=[provider.addrs()[0]])
    import functools
    import http.server
    import threading

    www = root / "www"
    www.mkdir()
    (www / "serve.py").write_bytes(
        (
            Path(__file__).resolve().parent.parent / "examples/jobs/http_service/serve.py"
        ).read_bytes()
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *a: None  # type: ignore[assignment, attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
        pid = provider.peer_id
        wait_for(
            lambda: any(p["peer_id"] == pid for p in consumer.cli("peer", "list")["peers"]),
            "the consumer never saw the provider",
        )
        port = free_port()
        url = f"http://127.0.0.1:{server.server_address[1]}/serve.py"
        job_id = submit_service(consumer, url, root, port)
        body = os.urandom(int(args.size_mb * (1 << 20)))
        direct_s, direct_rtt, _ = (0.0, [], []) if docker else _http_times(port, body, args.rtts)
        forward = Forwarding(consumer, job_id, str(port))
        daemons = tuple(d.proc.pid for d in (consumer, provider) if d.proc is not None)
        idle = _idle_cpu(daemons, IDLE_S)
        try:
            fwd_s, fwd_rtt, fwd_cpu = _http_times(forward.port, body, args.rtts, daemons)
        finally:
            forward.stop()
        # The raw stream's peer runs a service job of its own (tunnels are the owner's only).
        peer.start()
        peer.wait_connected(pid)
        raw_port = free_port()
        raw_job = own_job(peer, pid, url, raw_port)
        wait_for(
            lambda: "serving on" in cli_logs(provider, raw_job), "its service never listened", 60
        )
        raw_s, raw_rtt = _raw_stream_times(peer, pid, raw_job, raw_port, body, args.rtts)
        mb = 2 * len(body) / (1 << 20)  # echoed: both ways
        raw_t, fwd_t = mb / raw_s, mb / fwd_s
        paths = [("raw libp2p stream", raw_t, raw_rtt), ("job forward", fwd_t, fwd_rtt)]
        if not docker:
            paths.insert(0, ("direct loopback TCP", mb / direct_s, direct_rtt))
        print(
            f"{args.executor} executor; echo of {args.size_mb:g} MiB each way; "
            f"{args.rtts} small GETs per path"
        )
        for label, rate, rtt in paths:
            print(f"{label:<20}: {rate:8.1f} MiB/s  rtt {statistics.median(rtt) * 1e3:6.2f} ms")
        ratio = fwd_t / raw_t
        # Added by the tunnel: against the service itself (process), or against the raw
        # stream into the same container (docker: there is no direct path to compare with).
        base_rtt = raw_rtt if docker else direct_rtt
        added = (statistics.median(fwd_rtt) - statistics.median(base_rtt)) * 1e3
        verdict = "met" if ratio >= 0.5 else "MISSED"
        print(f"forward / raw stream throughput: {ratio:.0%} (goal >= 50 %: {verdict})")
        if not docker:
            print(f"forward / direct throughput: {fwd_t / (mb / direct_s):.0%}")
        verdict = "met" if added < 5 else "MISSED"
        against = "the raw stream" if docker else "direct TCP"
        print(f"added per round trip vs {against}: {added:.2f} ms (goal < 5 ms: {verdict})")
        spent = zip(DAEMONS, fwd_cpu, strict=True)
        cpu = ", ".join(f"{who} daemon {c * 1e3:.2f} ms" for who, c in spent)
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"CPU per forwarded round trip: {cpu} (load average {load})")
        # What each daemon spends with the service job running and no request (heartbeats,
        # metering, gossip): part of the figures above, at the rate of one round trip each
        # median round trip.
        rtt_s = statistics.median(fwd_rtt)
        quiet = ", ".join(
            f"{who} {c * 1e3:.1f} ms/s ({c * rtt_s * 1e3:.2f} ms per round trip)"
            for who, c in zip(DAEMONS, idle, strict=True)
        )
        print(f"CPU with no request, over {IDLE_S:g} s: {quiet}")
        consumer.cli("job", "stop", job_id)
    finally:
        server.shutdown()
        peer.stop()
        provider.stop()
        consumer.stop()


def cli_logs(daemon: Daemon, job_id: str) -> str:
    from tests.conftest import run_cli

    return run_cli("job", "logs", job_id, home=daemon.home).stdout


if __name__ == "__main__":
    main()
