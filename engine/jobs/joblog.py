"""A job's log on disk (JSON lines under the state dir), kept on both sides.

Lines carry the provider's sequence numbers, so a consumer that reconnects asks for what
comes after its last line and never gets one twice. The index is sparse: one (seq, offset)
mark per ``MARK_BYTES`` of file, so its memory is bounded by the log's size cap whatever the
line count (a per-line index of ten logs of empty lines took a daemon past 1 GB); a read
seeks to the mark before what it wants and decodes at most ``MARK_BYTES`` to get there.

Disk is bounded three ways (``[jobs]`` settings): a log stops at its per-job cap with a line
that says so; ``JobLogs.sweep`` replaces the logs of ended jobs older than the retention time,
and then the oldest ones while all logs together are over their total cap, with a one-line
log that says when and why (the job's record stays).
"""

from __future__ import annotations

import array
import bisect
import contextlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import msgspec

from engine import api
from engine.domain import safe_paths

log = logging.getLogger("nunet.jobs")

MARK_BYTES = 64 << 10  # a read decodes at most this much before the lines it returns
MB = 1 << 20
LOG_NAME = "log.jsonl"
_CUT_ROOM = 512  # kept free under the cap for the line that says where the log was cut
_TAIL_STEP = 256 << 10
_CUT_NOTE = "the log reached its"

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(api.JobLogLine)


@dataclass(frozen=True)
class LogLimits:
    """``job_bytes``: one log's cap; ``total_bytes``: all logs' together; ``keep_s``: how
    long an ended job's log is kept (0: for ever)."""

    job_bytes: int = 256 * MB
    total_bytes: int = 4096 * MB
    keep_s: float = 30 * 86400.0


class JobLog:
    def __init__(self, path: Path, max_bytes: int = LogLimits.job_bytes) -> None:
        self.path = path
        self.max_bytes = max(max_bytes, 2 * _CUT_ROOM)
        self._mark_seqs = array.array("q")
        self._mark_offsets = array.array("q")
        self._next_mark = 0
        self._count = 0
        self._last_seq = -1
        self._size = 0
        self._cut = False
        if path.exists():
            self._index()

    @property
    def truncated(self) -> bool:
        """Cut at its cap: it takes no more lines."""
        return self._cut

    def _index(self) -> None:
        with _open(self.path, os.O_RDONLY) as handle:
            end = _whole_lines_end(handle, self.path.stat(follow_symlinks=False).st_size)
            while self._next_mark < end:
                # The first line starting at or after the mark: the byte before it is a "\n".
                handle.seek(self._next_mark - 1 if self._next_mark else 0)
                if self._next_mark:
                    handle.readline()
                start = handle.tell()
                if start >= end:
                    break
                line = _decode(handle.readline())
                if line is None:  # garbage inside: keep what comes before it
                    end = start
                    break
                self._mark(line.seq, start)
            self._count = _count_lines(handle, end)
            raw = _tail_lines(handle, end, 1)
            last = _decode(raw[-1]) if raw else None
        if last is not None:
            self._last_seq = last.seq
            self._cut = last.stream == "system" and last.text.startswith(_CUT_NOTE)
        self._size = end
        if self.path.stat(follow_symlinks=False).st_size != end:
            os.truncate(self.path, end)  # a torn last line after a crash: the rest stands

    def _mark(self, seq: int, offset: int) -> None:
        self._mark_seqs.append(seq)
        self._mark_offsets.append(offset)
        self._next_mark = (offset // MARK_BYTES + 1) * MARK_BYTES

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def __len__(self) -> int:
        return self._count

    @property
    def index_entries(self) -> int:
        """Marks held in memory (bounded by the size cap / MARK_BYTES)."""
        return len(self._mark_seqs)

    def append(self, lines: Iterable[api.JobLogLine]) -> list[api.JobLogLine]:
        """Write the lines newer than what we have; returns those actually written. At the
        size cap one system line says so and the rest of the job's lines are dropped."""
        fresh = [line for line in lines if line.seq > self._last_seq]
        if not fresh or self.truncated:
            return []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        written: list[api.JobLogLine] = []
        with _open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT) as handle:
            for line in fresh:
                data = _encoder.encode(line) + b"\n"
                if self._size + len(data) > self.max_bytes - _CUT_ROOM:
                    line = api.JobLogLine(
                        seq=line.seq,
                        stream="system",
                        text=f"{_CUT_NOTE} {self.max_bytes // MB} MB cap here "
                        "(jobs.log_job_mb): later lines are not kept",
                        at=line.at,
                    )
                    data = _encoder.encode(line) + b"\n"
                    self._write(handle, line, data)
                    written.append(line)
                    self._cut = True
                    break
                self._write(handle, line, data)
                written.append(line)
        return written

    def _write(self, handle: IO[bytes], line: api.JobLogLine, data: bytes) -> None:
        handle.write(data)
        if self._size >= self._next_mark:
            self._mark(line.seq, self._size)
        self._size += len(data)
        self._count += 1
        self._last_seq = line.seq

    def read(
        self, after_seq: int = -1, limit: int = 10_000, *, newest: bool = False
    ) -> list[api.JobLogLine]:
        """Up to ``limit`` lines after ``after_seq``: the first ones, or with ``newest`` the
        last ones (a live view's tail, without reading a long log from its start)."""
        if limit <= 0 or after_seq >= self._last_seq or not self._mark_seqs:
            return []
        with _open(self.path, os.O_RDONLY) as handle:
            if newest:
                return _tail(handle, self._size, after_seq, limit)
            at = bisect.bisect_right(self._mark_seqs, after_seq) - 1
            handle.seek(self._mark_offsets[max(at, 0)])
            lines: list[api.JobLogLine] = []
            while handle.tell() < self._size and len(lines) < limit:
                line = _decoder.decode(handle.readline())
                if line.seq > after_seq:
                    lines.append(line)
            return lines


class JobLogs:
    """The node's job logs, shared by its provider and consumer sides (one folder of jobs).

    A log in use (its job running, or followed) stays open; of the others only the ``keep``
    most recently read stay, and a closed one is opened again from its file. ``sweep`` keeps
    the disk within ``limits`` (see the module's note), touching only logs whose job
    ``ended`` says has ended (one waiting to resume keeps its log whatever its age)."""

    def __init__(
        self,
        root: Path,
        limits: LogLimits | None = None,
        *,
        ended: Callable[[str], bool] = lambda job_id: True,
        keep: int = 8,
    ) -> None:
        self.root = root
        self.limits = limits or LogLimits()
        self._ended = ended
        self.keep = keep
        self._open: OrderedDict[str, JobLog] = OrderedDict()
        self._in_use: set[str] = set()

    def path_of(self, job_id: str) -> Path:
        directory = safe_paths.job_dir(self.root, job_id)
        return safe_paths.child(directory, LOG_NAME, what=f"job {job_id}'s")

    def __len__(self) -> int:
        return len(self._open)

    def get(self, job_id: str) -> JobLog:
        joblog = self._open.get(job_id)
        if joblog is None:
            joblog = self._open[job_id] = JobLog(self.path_of(job_id), self.limits.job_bytes)
        self._open.move_to_end(job_id)
        self._trim()
        return joblog

    def use(self, job_id: str) -> None:
        self._in_use.add(job_id)

    def done(self, job_id: str) -> None:
        """Its job ended (or is no longer followed): it may be closed, and the disk swept."""
        self._in_use.discard(job_id)
        self._trim()
        self.sweep()

    def _trim(self) -> None:
        idle = [job_id for job_id in self._open if job_id not in self._in_use]
        for job_id in idle[: max(0, len(idle) - self.keep)]:
            del self._open[job_id]

    def sweep(self, now: float | None = None) -> list[str]:
        """Replace the logs that retention removes; returns their job ids."""
        now = time.time() if now is None else now
        logs: list[tuple[float, int, str]] = []  # (last written, size, job id)
        total = 0
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            return []
        for entry in entries:
            try:
                info = os.stat(Path(entry.path) / LOG_NAME, follow_symlinks=False)
            except OSError:
                continue
            total += info.st_size
            if entry.name not in self._in_use and info.st_size > _CUT_ROOM:
                logs.append((info.st_mtime, info.st_size, entry.name))
        logs.sort()
        removed: list[str] = []
        for mtime, size, job_id in logs:
            if self.limits.keep_s and now - mtime > self.limits.keep_s:
                why = f"older than {self.limits.keep_s / 86400:g} days (jobs.log_keep_days)"
            elif total > self.limits.total_bytes:
                why = (
                    f"all job logs passed their {self.limits.total_bytes // MB} MB "
                    "(jobs.log_total_mb)"
                )
            else:
                continue
            # Asked only of the logs retention would remove: a store read each, not one per
            # log on every job's end.
            if self._ended(job_id) and self._tombstone(job_id, why, now):
                total -= size
                removed.append(job_id)
        if removed:
            log.info("removed %d job logs (%s)", len(removed), "retention")
        return removed

    def _tombstone(self, job_id: str, why: str, now: float) -> bool:
        """The log, replaced by one line saying it was removed and why."""
        try:
            path = self.path_of(job_id)
            last = JobLog(path, self.limits.job_bytes).last_seq
        except Exception as exc:  # a name or file that is not a job's: leave it alone
            log.debug("log of %s not swept: %s", job_id, exc)
            return False
        day = time.strftime("%Y-%m-%d", time.gmtime(now))
        note = api.JobLogLine(
            seq=last + 1, stream="system", text=f"this log was removed on {day}: {why}", at=now
        )
        spare = path.with_name(LOG_NAME + ".swept")
        with contextlib.suppress(FileNotFoundError):
            spare.unlink()
        with _open(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL) as handle:
            handle.write(_encoder.encode(note) + b"\n")
        os.replace(spare, path)
        self._open.pop(job_id, None)
        return True


def _decode(raw: bytes) -> api.JobLogLine | None:
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError:
        return None


def _whole_lines_end(handle: IO[bytes], size: int) -> int:
    """Where the last complete line ends (a crash may have torn the one after it)."""
    position = size
    while position > 0:
        start = max(0, position - _TAIL_STEP)
        handle.seek(start)
        chunk = handle.read(position - start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        position = start
    return 0


def _count_lines(handle: IO[bytes], end: int) -> int:
    handle.seek(0)
    count, left = 0, end
    while left > 0:
        chunk = handle.read(min(left, 1 << 20))
        if not chunk:
            break
        count += chunk.count(b"\n")
        left -= len(chunk)
    return count


def _tail_lines(handle: IO[bytes], end: int, want: int) -> list[bytes]:
    """The last ``want`` raw lines before ``end``, read backwards in steps."""
    position, buffered = end, b""
    while position > 0:
        start = max(0, position - _TAIL_STEP)
        handle.seek(start)
        buffered = handle.read(position - start) + buffered
        position = start
        if buffered.count(b"\n") > want:
            break
    raw = buffered.split(b"\n")[:-1]  # the text after the last "\n" is empty
    if position > 0:
        raw = raw[1:]  # the first piece may be the end of a longer line
    return raw[-want:]


def _tail(handle: IO[bytes], end: int, after_seq: int, limit: int) -> list[api.JobLogLine]:
    lines = [_decoder.decode(raw) for raw in _tail_lines(handle, end, limit)]
    return [line for line in lines if line.seq > after_seq]


def _open(path: Path, flags: int) -> IO[bytes]:
    """The log file itself, never what a link put in its place points to."""
    fd = os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    mode = "rb" if flags & (os.O_WRONLY | os.O_RDWR) == 0 else "ab"
    return os.fdopen(fd, mode)
