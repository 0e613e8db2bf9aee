"""The suite's zygote: the command line and daemons forked from one process that imported them.

A fresh interpreter costs every `nunet-tui` command ~0.25 s idle and ~0.4 s on a loaded
machine before it does anything (importing the engine, libp2p, pycardano), and a daemon ~1.5 s
of CPU more: the suite started ~2,000 of them. Each test process (each xdist worker) starts
one zygote (nunet_tui/cli/zygote.py, the demo's fork server) on first use; a command or a daemon
is then a fork of it: a real, separate process running the real ``python -m nunet_tui`` with
its own argv, environment, working directory, standard streams and exit code, in ~40 ms.

What a fork cannot show (the interpreter's start: imports, a broken entry point, the cost of
`--help`) is what tests/cli/test_cli*.py check with ``run_cli_fresh``, in a new interpreter.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from nunet_tui.cli.demo_start import CHAIN_PRELOAD, NODE_PRELOAD
from nunet_tui.cli.zygote import ForkedChild, ZygoteClient

REPO = Path(__file__).resolve().parent.parent
# What the commands and daemons of the suite load: the demo's two zygotes' modules, and the
# command line's output modules (a module not preloaded is imported by the child itself).
PRELOAD = (
    *CHAIN_PRELOAD,
    *NODE_PRELOAD,
    "engine.control_client",
    "engine.logsetup",
    "logging.handlers",
    "pickle",
    "nunet_tui.cli.gpu_output",
    "nunet_tui.cli.job_tunnel",
    "nunet_tui.viewmodels.money",
    "oracle_client.billing",
)
READY_TIMEOUT_S = 120.0  # minutes only on a machine loaded far past its cores

_lock = threading.Lock()
_zygote: ZygoteClient | None = None


def zygote() -> ZygoteClient:
    """This test process's zygote, started (and waited for) on first use."""
    global _zygote
    with _lock:
        if _zygote is not None and _zygote.proc.poll() is None:
            return _zygote
        log = Path(tempfile.gettempdir()) / f"nunet-tests-zygote-{os.getpid()}.log"
        env = {k: v for k, v in os.environ.items() if k != "NUNET_HOME"}
        spawn = functools.partial(subprocess.Popen, cwd=REPO, process_group=0)
        client = ZygoteClient(spawn, PRELOAD, env=env, log=log, tag="nunet-tests")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not client.poll_ready(timeout=0.5):
            if time.monotonic() > deadline:
                client.close()
                raise AssertionError(f"the suite's zygote did not import in time; see {log}")
        atexit.register(_close, client)
        _zygote = client
        return client


def _close(client: ZygoteClient) -> None:
    client.close()  # it stops its children and exits at the end of its socket
    with contextlib.suppress(subprocess.TimeoutExpired):
        client.proc.wait(10)
    if client.proc.returncode == 0:  # its log matters only when it failed
        client.log.unlink(missing_ok=True)


def fork(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    stdout: int,
    stderr: int,
    stdin: int | None = None,
    name: str = "nunet-tui",
) -> ForkedChild:
    """``python -m nunet_tui args`` forked from the zygote, in the repository."""
    return zygote().fork("nunet_tui", args, env, name, stdout, stderr, stdin=stdin, cwd=str(REPO))


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout: float,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(..., capture_output=True, text=True)`` for a forked command."""
    out, err = os.memfd_create("stdout"), os.memfd_create("stderr")
    stdin = None
    try:
        if input is not None:
            stdin = os.memfd_create("stdin")
            os.write(stdin, input.encode())
            os.lseek(stdin, 0, os.SEEK_SET)
        child = fork(args, env=env, stdout=out, stderr=err, stdin=stdin)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait(10)
            raise subprocess.TimeoutExpired(
                ["nunet-tui", *args], timeout, _read(out), _read(err)
            ) from None
        finally:
            child.close()
        return subprocess.CompletedProcess(["nunet-tui", *args], code, _read(out), _read(err))
    finally:
        for fd in (out, err, stdin):
            if fd is not None:
                os.close(fd)


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")
