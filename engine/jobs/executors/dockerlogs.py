"""A container's output, read as fast as the container writes it, for the Docker executor.

The executor attaches to the container before starting it (as ``docker run`` does), so the
stream has every line from the first, stdout and stderr in one stream and in their order (each
frame's header says which). Following the logs endpoint instead capped a chatty job at a
fraction of that: dockerd decodes its json log line by line for a follower, and docker-py read
each frame in two calls. An attached reader that stops reading holds the container's writes
back rather than losing lines (the json log has them all either way).

The reader is a worker thread (the socket blocks). It queues frames and asks trio, without
waiting, to take whatever has gathered: waiting for trio once per read would make the job wait
on the provider's event loop. When trio falls MAX_PENDING bytes behind, the thread waits, so a
job that never stops printing cannot fill the provider's memory.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import trio

HEADER = struct.Struct(">BxxxL")  # stream (1 stdout, 2 stderr), 3 bytes padding, length
STREAMS = {1: "stdout", 2: "stderr"}
READ_SIZE = 1 << 16
MAX_PENDING = 8 << 20

Sink = Callable[[str, bytes], None]


class FrameParser:
    """Docker's multiplexed stream: frames of an 8-byte header and a payload, cut anywhere."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[tuple[str, bytes]]:
        buffer = self._buffer + data if self._buffer else data
        frames: list[tuple[str, bytes]] = []
        pos = 0
        end = len(buffer)
        while end - pos >= HEADER.size:
            kind, length = HEADER.unpack_from(buffer, pos)
            start = pos + HEADER.size
            if end - start < length:
                break
            if length:
                frames.append((STREAMS.get(kind, "stdout"), buffer[start : start + length]))
            pos = start + length
        self._buffer = buffer[pos:]
        return frames


def merged(frames: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """Consecutive frames of one stream as one chunk: the log buffer cuts lines per chunk."""
    out: list[tuple[str, bytes]] = []
    run: list[bytes] = []
    current = ""
    for stream, payload in frames:
        if stream != current and run:
            out.append((current, b"".join(run)))
            run = []
        current = stream
        run.append(payload)
    if run:
        out.append((current, b"".join(run)))
    return out


class LogReader:
    """Reads one attached container's stream until it ends (the container stopped and every
    line was sent) or ``close`` is called."""

    def __init__(self, sock: Any, sink: Sink, token: trio.lowlevel.TrioToken) -> None:
        self.sock = sock  # from attach_socket, before the container starts
        self.sink = sink
        self.token = token
        self.last_progress = time.monotonic()  # when the container last sent something
        self._lock = threading.Lock()
        self._pending: list[tuple[str, bytes]] = []
        self._pending_bytes = 0
        self._scheduled = False
        self._room = threading.Event()
        self._room.set()
        self._closed = False

    def close(self) -> None:
        """From trio: deliver nothing more, and let the thread go (a blocked read too)."""
        self._closed = True
        self._room.set()
        raw = getattr(self.sock, "_sock", self.sock)  # the socket under docker-py's SocketIO
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_RDWR)
        for closable in (self.sock, raw):  # the socket stays open while its SocketIO is
            with contextlib.suppress(OSError):
                closable.close()

    def read(self) -> None:
        """The thread's work."""
        parser = FrameParser()
        try:
            while not self._closed and (data := self.sock.read(READ_SIZE)):
                self.last_progress = time.monotonic()
                if frames := parser.feed(data):
                    self._put(frames)
        except (OSError, ValueError):  # ValueError: closed under us by ``close``
            if not self._closed:
                raise
        finally:
            if not self._closed:  # the tail, before the supervisor reads the exit status
                trio.from_thread.run_sync(self._drain, trio_token=self.token)

    def _put(self, frames: list[tuple[str, bytes]]) -> None:
        with self._lock:
            self._pending.extend(frames)
            self._pending_bytes += sum(len(payload) for _, payload in frames)
            wake = not self._scheduled
            self._scheduled = True
            full = self._pending_bytes > MAX_PENDING
            if full:
                self._room.clear()
        if wake:
            self.token.run_sync_soon(self._drain)
        if full:
            self._room.wait()

    def _drain(self) -> None:
        """In trio: hand over everything queued so far."""
        with self._lock:
            batch, self._pending = self._pending, []
            self._pending_bytes = 0
            self._scheduled = False
            self._room.set()
        if self._closed:
            return
        for stream, chunk in merged(batch):
            self.sink(stream, chunk)
