"""``nunet-tui job forward | shell | stop``: into a running job, through the node's tunnels.

The bytes never pass through this process for ``forward``: the daemon listens on 127.0.0.1
itself (engine/jobs/tunnel_provider.py) and this command only asks it to, prints the local URL and
waits for Ctrl-C (then asks it to stop). ``shell`` connects to the one-shot Unix socket the
daemon opened for it and speaks the shell framing end to end with the provider: the local
terminal in raw mode (Ctrl-C is a byte for the remote process), its size sent again on every
SIGWINCH, and the remote exit status as this command's own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from engine import api
from engine.client import EngineClient
from engine.errors import EngineError
from nunet_tui.cli.output import show, show_error, show_json

START_WAIT_S = 120.0  # for a job just submitted to start running
POLL_S = 0.5
# For a tunnel's open (a forward's probe, a shell): longer than the engine's own whole open
# (engine/domain/tunnel_frames.py OPEN_S, 30 s), so its error, which says what it waited
# for, arrives before ours would (tests/unit/test_tunnel_timeouts.py).
TUNNEL_WAIT_S = 45.0
# The daemon closes our forward when we stop renewing it: a `job forward` killed with -9
# leaves nothing listening after this long.
LEASE_S = 10.0


def add_parsers(job_sub: Any, common: argparse.ArgumentParser) -> None:
    forward = job_sub.add_parser(
        "forward",
        parents=[common],
        help="reach a port of a running job on 127.0.0.1 (until Ctrl-C)",
    )
    forward.add_argument("job_id")
    forward.add_argument(
        "ports",
        metavar="[LOCAL:]REMOTE",
        help="the job's declared port, and the local one (default: a free port)",
    )
    shell = job_sub.add_parser(
        "shell", help="an interactive terminal in a running job (exit status returned)"
    )
    shell.add_argument("job_id")
    shell.add_argument(
        "--raw",
        action="store_true",
        help="pass the job's terminal output as it is: OSC sequences (clipboard writes, "
        "window titles, links) are dropped otherwise",
    )
    shell.add_argument(
        "shell_argv",
        nargs=argparse.REMAINDER,
        metavar="-- CMD",
        help="run CMD instead of a shell",
    )
    job_sub.add_parser(
        "stop", parents=[common], help="end a service job normally (it ends completed)"
    ).add_argument("job_id")


def parse_ports(text: str) -> tuple[int, int]:
    """``REMOTE`` or ``LOCAL:REMOTE`` -> (local, remote); local 0: a free port."""
    local_text, _, remote_text = text.rpartition(":")
    try:
        remote = int(remote_text)
        local = int(local_text) if local_text else 0
    except ValueError:
        raise EngineError(
            "usage", f"{text[:40]!r} is not [LOCAL:]REMOTE (for example 8888 or 9000:8888)"
        ) from None
    if not 1 <= remote <= 65535 or not 0 <= local <= 65535:
        raise EngineError("usage", f"{text[:40]!r}: ports go from 1 to 65535")
    return local, remote


def _wait_running(client: EngineClient, job_id: str, quiet: bool) -> api.JobInfo:
    """The job once it runs (a job just submitted takes a moment to start)."""
    deadline = time.monotonic() + START_WAIT_S
    said = False
    while True:
        job: api.JobInfo = client.call_blocking(api.GetJob(job_id=job_id))
        if job.role != "consumer":
            raise EngineError("invalid", f"job {job.job_id} is not yours: tunnels are its owner's")
        if job.state == "running":
            return job
        if job.state in api.TERMINAL_STATES:
            raise EngineError("not_running", f"job {job.job_id} has ended ({job.state})")
        if time.monotonic() > deadline:
            raise EngineError(
                "not_running", f"job {job.job_id} is still {job.state} after {START_WAIT_S:g} s"
            )
        if not said and not quiet:
            show(f"waiting for job {job.job_id} to start ({job.state})…", file=sys.stderr)
            said = True
        time.sleep(POLL_S)


@contextlib.contextmanager
def _stop_requested() -> Iterator[threading.Event]:
    """An event set by the first Ctrl-C or SIGTERM; a second one interrupts at once.

    A flag rather than KeyboardInterrupt raised wherever the main thread happens to be: an
    exception between a lock's acquire and its ``with`` block (the control client's) would
    leave the lock held, and the close that follows would wait on it for ever."""
    stop = threading.Event()

    def request(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {sig: signal.signal(sig, request) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _forward(args: argparse.Namespace, client: EngineClient) -> None:
    local, remote = parse_ports(args.ports)
    as_json = getattr(args, "json", False)
    job = _wait_running(client, args.job_id, as_json)
    info: api.TunnelForward = client.call_blocking(
        api.JobForward(job_id=job.job_id, remote_port=remote, local_port=local, lease_s=LEASE_S),
        timeout=TUNNEL_WAIT_S,
    )
    if as_json:
        show_json(api.to_builtins(info), indent=None, flush=True)
    else:
        path = f" {info.path}" if info.path else ""  # "direct" or "via relay …" (issue 24)
        show(
            f"forwarding {info.url} -> job {info.job_id} port {info.remote_port}{path} "
            "(Ctrl-C to stop)",
            flush=True,
        )
    with _stop_requested() as stop:
        while not stop.wait(POLL_S):
            listed: api.ForwardList = client.call_blocking(
                api.ListForwards(job_id=info.job_id, renew=(info.forward_id,)), timeout=LEASE_S
            )
            if not any(f.forward_id == info.forward_id for f in listed.forwards):
                ended: api.JobInfo = client.call_blocking(api.GetJob(job_id=info.job_id))
                show(f"job {info.job_id} is {ended.state}: the forward closed", file=sys.stderr)
                return None
        # Ctrl-C ends this command promptly whatever the daemon does: the daemon takes up to
        # 5 s to close a forward, and one that does not answer in time ends it anyway when
        # the lease we stop renewing runs out (LEASE_S).
        with contextlib.suppress(EngineError):
            client.call_blocking(api.JobForwardClose(forward_id=info.forward_id), timeout=8)
    return None


# --- job shell -------------------------------------------------------------------------------


def _shell(args: argparse.Namespace, client: EngineClient) -> None:
    # The relay brings the engine's tunnel module (trio): only `job shell` needs it.
    from nunet_tui.shell_relay import raw_terminal, run_shell, terminal_size

    command = list(args.shell_argv)
    if command[:1] == ["--"]:
        command = command[1:]
    job = _wait_running(client, args.job_id, quiet=False)
    rows, cols = terminal_size()
    term = os.environ.get("TERM", "xterm")
    term = term if term.replace("-", "").replace(".", "").isalnum() else "xterm"
    session: api.ShellSession = client.call_blocking(
        api.JobShell(
            job_id=job.job_id, command=tuple(command), rows=rows, cols=cols, term=term[:64]
        ),
        timeout=TUNNEL_WAIT_S,
    )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(session.socket)
        stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
        sys.stdout.flush()
        with raw_terminal(stdin):
            code = run_shell(sock, stdin, stdout, raw=args.raw)
    finally:
        sock.close()
    if code is None:
        why = ""
        if session.path.startswith("via relay"):  # issue 24: a circuit has a time/data limit
            why = (
                f": it ran {session.path}, whose circuits end after a time or data limit; "
                "`job shell` again opens a new one"
            )
        show_error(f"the shell in job {job.job_id} broke off without an exit status{why}")
        raise SystemExit(1)
    raise SystemExit(code & 0xFF if code >= 0 else 1)


RUNNERS = {
    "job forward": _forward,
    "job shell": _shell,
    "job stop": lambda a, c: c.call_blocking(
        api.StopJob(job_id=a.job_id), timeout=api.CANCEL_WAIT_S
    ),
}
