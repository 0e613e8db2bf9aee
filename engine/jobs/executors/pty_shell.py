"""A shell on a pseudo-terminal, for the process executor's jobs (entering the job's sandbox
with nsenter where it has one: sandbox.py ``shell_argv``; off unless jobs.allow_process_shell).

The command runs in its own session with the PTY as its controlling terminal (so Ctrl-C,
sent as a byte, reaches it as SIGINT), in the job's workspace with the job's environment and
limits. The PTY's master side is the Pipe (engine/jobs/tunnel_relay.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import shutil
import signal
import struct
import termios
from collections.abc import Callable
from pathlib import Path

import trio

from engine.jobs.executors.base import signal_exit_code

HANGUP_GRACE_S = 2.0


def set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def default_shell() -> list[str]:
    return [shutil.which("bash") or "/bin/sh"]


class PtyPipe:
    def __init__(self, process: trio.Process, master: int) -> None:
        self.process = process
        self.master = master
        self._stream = trio.lowlevel.FdStream(master)  # owns the fd from here on

    async def receive(self, max_bytes: int) -> bytes:
        try:
            return bytes(await self._stream.receive_some(max_bytes))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return b""  # EIO: the last holder of the terminal's other side has gone

    async def send(self, data: bytes) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._stream.send_all(data)

    async def send_eof(self) -> None:
        await self.send(b"\x04")  # Ctrl-D, as a terminal says it

    async def resize(self, rows: int, cols: int) -> None:
        with contextlib.suppress(OSError):
            set_size(self.master, rows, cols)

    async def exit_code(self) -> int | None:
        code = await self.process.wait()
        return signal_exit_code(code)

    async def close(self) -> None:
        if self.process.returncode is None:
            _signal_group(self.process, signal.SIGHUP)
            with trio.move_on_after(HANGUP_GRACE_S):
                await self.process.wait()
            _signal_group(self.process, signal.SIGKILL)
        with contextlib.suppress(Exception):
            await self._stream.aclose()


def _signal_group(process: trio.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


async def open_pty_shell(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    rows: int,
    cols: int,
    limits: Callable[[], None] | None = None,
) -> PtyPipe:
    master, slave = pty.openpty()
    try:
        set_size(slave, rows, cols)

        def child() -> None:
            # start_new_session made us a session leader; the terminal becomes ours.
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            if limits is not None:
                limits()

        process = await trio.lowlevel.open_process(
            argv,
            cwd=str(cwd),
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=child,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return PtyPipe(process, master)
