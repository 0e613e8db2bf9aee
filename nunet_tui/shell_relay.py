"""A shell session in the local terminal: raw mode, the shell framing over the daemon's
one-shot Unix socket, the terminal's size sent again on every SIGWINCH.

Shared by ``nunet-tui job shell`` (nunet_tui/cli/job_tunnel.py) and the TUI's job detail,
which suspends the app and runs the same relay (nunet_tui/widgets/job_ports.py).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

from engine.jobs.tunnel import (
    SHELL_DATA,
    SHELL_EOF,
    SHELL_EXIT,
    ShellFrames,
    resize_frame,
    shell_frame,
)


def terminal_size() -> tuple[int, int]:
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
        return max(1, size.lines), max(1, size.columns)
    except OSError:
        return 24, 80


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[bool]:
    """The local terminal in raw mode for the session (keys go to the remote process as
    they are), put back as it was afterwards; nothing to do when stdin is not a terminal."""
    if not os.isatty(fd):
        yield False
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            select.select([], [fd], [])


def run_shell(sock: socket.socket, stdin: int, stdout: int) -> int | None:
    """Relay a shell session: ``stdin`` to the socket as frames, the frames' data to
    ``stdout``; returns the remote exit status (None: the session broke off without one)."""
    resized = [False]

    def on_winch(signum: int, frame: Any) -> None:
        resized[0] = True

    previous = signal.signal(signal.SIGWINCH, on_winch)
    frames = ShellFrames()
    reading_stdin = True
    try:
        while True:
            if resized[0]:
                resized[0] = False
                sock.sendall(resize_frame(*terminal_size()))
            watched: list[Any] = [sock, stdin] if reading_stdin else [sock]
            try:
                ready, _, _ = select.select(watched, [], [], 0.25)
            except InterruptedError:
                continue
            if stdin in ready:
                data = os.read(stdin, 65536)
                if data:
                    sock.sendall(shell_frame(SHELL_DATA, data))
                else:
                    reading_stdin = False
                    sock.sendall(shell_frame(SHELL_EOF))
            if sock in ready:
                data = sock.recv(65536)
                if not data:
                    return None
                for kind, payload in frames.feed(data):
                    if kind == SHELL_DATA:
                        _write_all(stdout, payload)
                    elif kind == SHELL_EXIT and len(payload) == 4:
                        return int.from_bytes(payload, "big", signed=True)
    finally:
        signal.signal(signal.SIGWINCH, previous)
