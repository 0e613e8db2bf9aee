"""A shell session in the local terminal: raw mode, the shell framing over the daemon's
one-shot Unix socket, the terminal's size sent again on every SIGWINCH.

Shared by ``nunet-tui job shell`` (nunet_tui/cli/job_tunnel.py) and the TUI's job detail,
which suspends the app and runs the same relay (nunet_tui/widgets/job_ports.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

from engine.domain.tunnel_frames import (
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


# Where an OSC may start (ESC ], or U+009D in UTF-8) and where one ends (BEL, ESC \\,
# U+009C in UTF-8; CAN and SUB abort it). Raw 0x9D/0x9C bytes are left alone: in UTF-8
# they are continuation bytes of ordinary characters, and UTF-8 terminals read them so.
_OSC_START = re.compile(rb"\x1b|\xc2")
_OSC_END = re.compile(rb"[\x07\x18\x1a\x1b\xc2]")


class OscFilter:
    """Drops every OSC sequence from a provider's terminal output: OSC 52 writes the local
    clipboard, OSC 0/1/2 the window title (shown in the task bar, where it can pose as
    another window), OSC 8 makes links whose text is not their target. The rest (colours,
    cursor movement) is the session itself. Stateful: a sequence may be split across reads.
    ``job shell --raw`` passes everything."""

    def __init__(self) -> None:
        self._in_osc = False
        self._pending = b""  # at most one byte whose meaning depends on the next

    def feed(self, chunk: bytes) -> bytes:
        data, self._pending = self._pending + chunk, b""
        out = bytearray()
        i, n = 0, len(data)
        while i < n:
            if not self._in_osc:
                found = _OSC_START.search(data, i)
                if found is None:
                    out += data[i:]
                    break
                k = found.start()
                out += data[i:k]
                if k + 1 == n:
                    self._pending = data[k:]
                    break
                opener = data[k : k + 2]
                if opener in (b"\x1b]", b"\xc2\x9d"):
                    self._in_osc, i = True, k + 2
                else:  # another escape or character: the terminal's, as it was
                    out += data[k : k + 1]
                    i = k + 1
                continue
            found = _OSC_END.search(data, i)
            if found is None:
                break  # all of it inside the OSC: dropped
            k = found.start()
            byte = data[k]
            if byte in (0x07, 0x18, 0x1A):
                self._in_osc, i = False, k + 1
            elif k + 1 == n:
                self._pending = data[k:]
                break
            elif data[k : k + 2] in (b"\x1b\\", b"\xc2\x9c"):
                self._in_osc, i = False, k + 2
            elif byte == 0x1B:  # another sequence starts: the OSC ended there
                self._in_osc, i = False, k
            else:
                i = k + 1  # a UTF-8 character of the OSC's text
        return bytes(out)


def run_shell(sock: socket.socket, stdin: int, stdout: int, *, raw: bool = False) -> int | None:
    """Relay a shell session: ``stdin`` to the socket as frames, the frames' data to
    ``stdout`` (OSC sequences dropped unless ``raw``: see ``OscFilter``); returns the remote
    exit status (None: the session broke off without one)."""
    osc = None if raw else OscFilter()
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
                        _write_all(stdout, osc.feed(payload) if osc else payload)
                    elif kind == SHELL_EXIT and len(payload) == 4:
                        return int.from_bytes(payload, "big", signed=True)
    finally:
        signal.signal(signal.SIGWINCH, previous)
