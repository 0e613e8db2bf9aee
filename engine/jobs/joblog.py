"""A job's log on disk (JSON lines under the state dir), kept on both sides.

Lines carry the provider's sequence numbers, so a consumer that reconnects asks for what
comes after its last line and never gets one twice. An in-memory index of line offsets keeps
``read(after_seq)`` cheap for long logs.
"""

from __future__ import annotations

import bisect
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

import msgspec

from engine.api import JobLogLine

MAX_LOG_BYTES = 512 << 20  # past this a job's log is cut (a line says so)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(JobLogLine)


class JobLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._seqs: list[int] = []
        self._offsets: list[int] = []
        self._size = 0
        self._truncated = False
        if path.exists():
            self._index()

    def _index(self) -> None:
        offset = 0
        with _open(self.path, os.O_RDONLY) as handle:
            for raw in handle:
                try:
                    line = _decoder.decode(raw)
                except msgspec.DecodeError:
                    break  # a torn last line after a crash: everything before it stands
                self._seqs.append(line.seq)
                self._offsets.append(offset)
                offset += len(raw)
        self._size = offset
        if self.path.stat(follow_symlinks=False).st_size != offset:
            os.truncate(self.path, offset)

    @property
    def last_seq(self) -> int:
        return self._seqs[-1] if self._seqs else -1

    def __len__(self) -> int:
        return len(self._seqs)

    def append(self, lines: Iterable[JobLogLine]) -> list[JobLogLine]:
        """Write the lines newer than what we have; returns those actually written."""
        fresh = [line for line in lines if line.seq > self.last_seq]
        if not fresh or self._truncated:
            return []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT) as handle:
            for line in fresh:
                data = _encoder.encode(line) + b"\n"
                if self._size + len(data) > MAX_LOG_BYTES:
                    self._truncated = True
                    break
                handle.write(data)
                self._seqs.append(line.seq)
                self._offsets.append(self._size)
                self._size += len(data)
        return fresh

    def read(
        self, after_seq: int = -1, limit: int = 10_000, *, newest: bool = False
    ) -> list[JobLogLine]:
        """Up to ``limit`` lines after ``after_seq``: the first ones, or with ``newest`` the
        last ones (a live view's tail, without reading a long log from its start)."""
        start = bisect.bisect_right(self._seqs, after_seq)
        if newest:
            start = max(start, len(self._seqs) - limit)
        if start >= len(self._seqs):
            return []
        lines: list[JobLogLine] = []
        with _open(self.path, os.O_RDONLY) as handle:
            handle.seek(self._offsets[start])
            for raw in handle:
                lines.append(_decoder.decode(raw))
                if len(lines) >= limit:
                    break
        return lines


class JobLogs:
    """One side's open job logs. A log in use (its job running, or followed) stays open; of
    the others only the ``keep`` most recently read stay, so a long-lived daemon does not
    hold the index of every log it ever wrote. A closed log is opened again from its file."""

    def __init__(self, path_of: Callable[[str], Path], keep: int = 8) -> None:
        self._path_of = path_of
        self.keep = keep
        self._open: OrderedDict[str, JobLog] = OrderedDict()
        self._in_use: set[str] = set()

    def __len__(self) -> int:
        return len(self._open)

    def get(self, job_id: str) -> JobLog:
        joblog = self._open.get(job_id)
        if joblog is None:
            joblog = self._open[job_id] = JobLog(self._path_of(job_id))
        self._open.move_to_end(job_id)
        self._trim()
        return joblog

    def use(self, job_id: str) -> None:
        self._in_use.add(job_id)

    def done(self, job_id: str) -> None:
        """Its job ended (or is no longer followed): it may be closed now."""
        self._in_use.discard(job_id)
        self._trim()

    def _trim(self) -> None:
        idle = [job_id for job_id in self._open if job_id not in self._in_use]
        for job_id in idle[: max(0, len(idle) - self.keep)]:
            del self._open[job_id]


def _open(path: Path, flags: int) -> IO[bytes]:
    """The log file itself, never what a link put in its place points to."""
    fd = os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    mode = "rb" if flags & (os.O_WRONLY | os.O_RDWR) == 0 else "ab"
    return os.fdopen(fd, mode)
