"""A job's log: lines in order, numbered, kept for late readers, and followed live.

Bytes arrive in arbitrary chunks per stream (pipes, Docker's log frames); ``feed`` cuts them
into lines and ``flush`` delivers a last unterminated line. Readers (``follow``) get the
backlog from any sequence number and then each new line as soon as it is appended. Only the
newest ``max_lines`` and ``max_bytes`` of text are kept in memory (the job's log on disk
keeps the rest): 64 KiB lines must not make the line count a bound on gigabytes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Literal

import msgspec
import trio

Stream = Literal["stdout", "stderr", "system"]
MAX_LINE = 64 * 1024  # a longer line is cut into pieces: one huge line must not stall readers


class LogLine(msgspec.Struct, frozen=True, gc=False):
    # gc=False: a buffer holds up to 400,000 of them, and as tracked objects (a dataclass)
    # every full collection walked them all: a third of the provider's time in a log flood.
    stream: Stream
    text: str
    at: float  # wall clock (time.time) when the executor read it
    seq: int


class LogBuffer:
    def __init__(self, max_lines: int = 200_000, max_bytes: int = 32 << 20) -> None:
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self._bytes = 0  # characters of text kept
        self._lines: list[LogLine] = []
        self._first = 0  # seq of self._lines[0]
        self._next = 0
        self._closed = False
        self._changed = trio.Event()
        self._partial: dict[str, bytes] = {}

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def next_seq(self) -> int:
        return self._next

    def append(self, stream: Stream, text: str, at: float | None = None) -> None:
        if self._closed:
            return
        self._add(stream, text, time.time() if at is None else at)
        self._wake()

    def _add(self, stream: Stream, text: str, when: float) -> None:
        self._bytes += len(text)
        if len(text) <= MAX_LINE:
            self._lines.append(LogLine(stream, text, when, self._next))
            self._next += 1
        else:
            for start in range(0, len(text), MAX_LINE):
                self._lines.append(
                    LogLine(stream, text[start : start + MAX_LINE], when, self._next)
                )
                self._next += 1
        if len(self._lines) > 2 * self.max_lines or self._bytes > 2 * self.max_bytes:
            self._trim()

    def _trim(self) -> None:
        """Down to half the bounds, in bulk: amortised O(1) per line."""
        drop = max(0, len(self._lines) - self.max_lines)
        dropped = sum(len(line.text) for line in self._lines[:drop])
        while drop < len(self._lines) - 1 and self._bytes - dropped > self.max_bytes:
            dropped += len(self._lines[drop].text)
            drop += 1
        del self._lines[:drop]
        self._first += drop
        self._bytes -= dropped

    def feed(self, stream: Stream, data: bytes) -> None:
        """A chunk of a stream's bytes: every complete line in it is appended (and readers
        woken once per chunk, not per line: a flood arrives in chunks of thousands)."""
        if not data or self._closed:
            return
        buffered = self._partial.get(stream, b"") + data
        *complete, rest = buffered.split(b"\n")
        if len(rest) > MAX_LINE:
            complete.append(rest)
            rest = b""
        self._partial[stream] = rest
        if not complete:
            return
        now = time.time()
        for raw in complete:
            self._add(stream, raw.rstrip(b"\r").decode("utf-8", "replace"), now)
        self._wake()

    def flush(self) -> None:
        for stream, rest in list(self._partial.items()):
            if rest:
                self.append(stream, rest.rstrip(b"\r").decode("utf-8", "replace"))  # type: ignore[arg-type]
        self._partial.clear()

    def close(self) -> None:
        self.flush()
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def lines(self) -> list[LogLine]:
        return list(self._lines)

    async def follow(self, from_seq: int = 0) -> AsyncIterator[LogLine]:
        seq = from_seq
        while True:
            seq = max(seq, self._first)
            while seq < self._next:
                index = seq - self._first
                if index < 0:  # trimmed while we were yielding: skip to what is kept
                    seq = self._first
                    continue
                yield self._lines[index]
                seq += 1
            if self._closed:
                return
            await self._changed.wait()

    async def follow_batches(
        self, from_seq: int = 0, max_batch: int = 5000
    ) -> AsyncIterator[list[LogLine]]:
        """Like ``follow``, but everything already there in one list: a reader that writes
        lines somewhere pays its per-write cost per batch, not per line."""
        seq = from_seq
        while True:
            seq = max(seq, self._first)
            if seq < self._next:
                start = seq - self._first
                batch = self._lines[start : start + max_batch]
                seq += len(batch)
                yield batch
                continue
            if self._closed:
                return
            await self._changed.wait()
