"""A tunnel outlives a local client that pauses reading, and a client that never resumes is
let go at the tunnel's idle deadline (engine/network/yamux_credit.py, engine/jobs/tunnel_relay.py).

py-libp2p 0.8.1's yamux write gave up after 5 s without window credit and the tunnel was
reset: a `job forward` download whose client stopped reading for 5 s (a paused download,
Ctrl-S in a shell) lost its connection. Real daemons, the real `job forward`, a process job
that sends 16 MiB to every connection; the client's receive buffer is small, so once the
consumer's buffers are full the provider's writes find no credit. A client that reads 1 MiB,
pauses for 10 s and reads on gets every byte (the same sha256); before, it got a short read.
A client that never reads on holds the provider's writer only until the tunnel's idle
timeout (here 25 s), which ends the tunnel with its reason, "idle", and the provider's RSS
stays flat meanwhile: the job's bytes wait in its own socket, not in the provider.
"""

from __future__ import annotations

import hashlib
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path

from tests.adversarial.test_stream_exhaustion import RssWatch, rss_mb
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, wait_for
from tests.tunnel_helpers import Forwarding, free_port, pair, serving, submit_service

SIZE = 16 << 20  # past what the consumer's socket buffers and yamux window hold
SEED = 21
IDLE_S = 25.0  # the provider's tunnel idle timeout: well past the pause, well under 600
PAUSE_S = 10.0  # twice py-libp2p's 5 s
FIRST = 1 << 20  # read before the pause
RSS_GROWTH_LIMIT_MB = 40.0
JOBS = f'[jobs]\nexecutors = ["process"]\ncheckpoint_interval_s = 0\ntunnel_idle_s = {IDLE_S}\n'

SENDER = f"""
import os, random, socket, threading
PORT = int(os.environ["PORT"])
DATA = random.Random({SEED}).randbytes({SIZE})
server = socket.create_server(("127.0.0.1", PORT))
print(f"serving on 127.0.0.1:{{PORT}}", flush=True)

def send(conn):
    with conn:
        try:
            conn.sendall(DATA)
        except OSError:
            pass

while True:
    conn, _ = server.accept()
    threading.Thread(target=send, args=(conn,), daemon=True).start()
"""


def _connect(port: int) -> socket.socket:
    sock = socket.socket()
    # A small receive buffer: the pause is felt upstream at once, not after 6 MB of kernel.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.settimeout(60)
    sock.connect(("127.0.0.1", port))
    return sock


def _read(sock: socket.socket, most: int) -> bytes:
    """Up to ``most`` bytes, fewer where the connection ends (EOF or reset) first."""
    got = bytearray()
    while len(got) < most:
        try:
            piece = sock.recv(min(1 << 16, most - len(got)))
        except ConnectionResetError:
            break
        if not piece:
            break
        got += piece
    return bytes(got)


def _pid(daemon: Daemon) -> int:
    assert daemon.proc is not None
    return daemon.proc.pid


def _idle_ends(provider: Daemon) -> int:
    log = Path(str(provider.home.log_dir)) / "engine.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(1 for line in text.splitlines() if "tunnel of" in line and "(idle)" in line)


def test_a_paused_reader_keeps_its_tunnel_and_one_that_never_resumes_is_let_go(
    daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    """Slow by nature (about 40 s): a 10 s pause, then the 25 s idle timeout to wait out."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "send.py").write_text(SENDER)
    expected = hashlib.sha256(random.Random(SEED).randbytes(SIZE)).hexdigest()
    provider, consumer = pair(daemons, JOBS)
    port = free_port()
    with serving(root) as url:
        job_id = submit_service(consumer, url + "send.py", tmp_path, port)
    forward = Forwarding(consumer, job_id, str(port))
    try:
        baseline = rss_mb(_pid(provider))
        watch = RssWatch(_pid(provider))
        # (b) first: it reads 1 MiB and never reads again (it waits for its deadline while
        # (a) runs).
        stuck = _connect(forward.port)
        assert len(_read(stuck, FIRST)) == FIRST
        stuck_since = time.monotonic()

        # (a) reads 1 MiB, pauses for twice py-libp2p's 5 s, then reads to the end.
        paused = _connect(forward.port)
        body = bytearray(_read(paused, FIRST))
        time.sleep(PAUSE_S)
        body += _read(paused, SIZE)
        paused.close()
        print(f"\npaused reader: {len(body)} of {SIZE} bytes after a {PAUSE_S:g} s pause")
        assert len(body) == SIZE, f"the tunnel ended after {len(body)} of {SIZE} bytes"
        assert hashlib.sha256(body).hexdigest() == expected

        # (b): the provider ends the stalled tunnel at its idle deadline, with its reason.
        wait_for(
            lambda: _idle_ends(provider) >= 1,
            "the stalled tunnel was never ended as idle",
            timeout=IDLE_S + 60,
        )
        ended_after = time.monotonic() - stuck_since
        peak = watch.stop()
        rest = _read(stuck, SIZE)  # what the consumer's buffers held, then the end
        stuck.close()
        print(
            f"stalled reader: ended after {ended_after:.0f} s (idle timeout {IDLE_S:g} s), "
            f"{FIRST + len(rest)} of {SIZE} bytes; provider RSS {baseline:.0f} -> "
            f"{peak:.0f} MB"
        )
        assert FIRST + len(rest) < SIZE  # it was cut, not finished
        assert ended_after >= PAUSE_S  # not at py-libp2p's 5 s
        assert peak - baseline < RSS_GROWTH_LIMIT_MB
    finally:
        forward.stop()
        run_cli("job", "cancel", job_id, home=consumer.home)
