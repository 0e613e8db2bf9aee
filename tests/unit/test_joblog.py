"""A job's log on disk: a sparse index whatever the line count, a cap per log, retention."""

from __future__ import annotations

import os
import time
from pathlib import Path

from engine import api
from engine.jobs.joblog import MARK_BYTES, MB, JobLog, JobLogs, LogLimits


def _lines(start: int, count: int, text: str = "") -> list[api.JobLogLine]:
    return [
        api.JobLogLine(seq=i, stream="stdout", text=text, at=1.0)
        for i in range(start, start + count)
    ]


def test_the_index_is_sparse_and_reads_find_every_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    joblog = JobLog(path)
    for start in range(0, 300_000, 10_000):
        joblog.append(_lines(start, 10_000))
    size = path.stat().st_size
    # One mark per MARK_BYTES, not one entry per line (300,000 empty lines used to be 600,000
    # Python ints in memory; ten such logs took a daemon past 1 GB).
    assert joblog.index_entries <= size // MARK_BYTES + 1 < 300
    for reopened in (joblog, JobLog(path)):
        assert len(reopened) == 300_000 and reopened.last_seq == 299_999
        assert [ln.seq for ln in reopened.read(123_455, 3)] == [123_456, 123_457, 123_458]
        assert [ln.seq for ln in reopened.read(-1, 2)] == [0, 1]
        assert [ln.seq for ln in reopened.read(-1, 3, newest=True)] == [299_997, 299_998, 299_999]
        assert [ln.seq for ln in reopened.read(299_998, 5, newest=True)] == [299_999]
        assert reopened.read(299_999) == []
        got = [ln.seq for ln in reopened.read(99_999, 50_000)]
        assert got == list(range(100_000, 150_000))


def test_gaps_in_the_numbering_and_long_lines_are_found_too(tmp_path: Path) -> None:
    joblog = JobLog(tmp_path / "log.jsonl")
    long = "x" * (3 * MARK_BYTES)  # a line longer than a mark's span
    joblog.append(_lines(0, 10) + _lines(100, 5, long) + _lines(1000, 10))
    reopened = JobLog(tmp_path / "log.jsonl")
    assert [ln.seq for ln in reopened.read(5, 8)] == [6, 7, 8, 9, 100, 101, 102, 103]
    assert [ln.seq for ln in reopened.read(50, 2)] == [100, 101]
    assert [ln.seq for ln in reopened.read(104, 1)] == [1000]
    assert [ln.seq for ln in reopened.read(-1, 11, newest=True)] == [104, *range(1000, 1010)]


def test_a_torn_last_line_is_cut_off_and_the_rest_stands(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    JobLog(path).append(_lines(0, 1000))
    whole = path.stat().st_size
    with path.open("ab") as handle:
        handle.write(b'{"seq":1000,"stream":"std')  # a crash mid-write
    reopened = JobLog(path)
    assert path.stat().st_size == whole and reopened.last_seq == 999 and len(reopened) == 1000
    assert reopened.append(_lines(1000, 1)) and JobLog(path).last_seq == 1000


def test_a_log_stops_at_its_cap_with_a_line_that_says_so(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    joblog = JobLog(path, max_bytes=1 * MB)
    written = joblog.append(_lines(0, 100_000, "spam"))
    assert path.stat().st_size <= MB
    assert written[-1].stream == "system" and "1 MB cap" in written[-1].text
    assert joblog.truncated and joblog.append(_lines(200_000, 5)) == []
    reopened = JobLog(path, max_bytes=1 * MB)  # a restart does not start it again
    assert reopened.truncated and reopened.append(_lines(200_000, 5)) == []
    assert reopened.read(-1, 1, newest=True)[0].text == written[-1].text


ANCIENT, RUNNING = "a00000000001", "a00000000002"
IDS = [f"b0000000000{n}" for n in range(5)]


def _job_log(logs: JobLogs, job_id: str, lines: int, age_s: float) -> None:
    (logs.root / job_id).mkdir(parents=True, exist_ok=True)
    JobLog(logs.path_of(job_id)).append(_lines(0, lines, "some output of the job"))
    then = time.time() - age_s
    os.utime(logs.path_of(job_id), (then, then))


def test_retention_removes_old_logs_then_the_oldest_past_the_total(tmp_path: Path) -> None:
    running = {RUNNING}
    logs = JobLogs(
        tmp_path,
        LogLimits(job_bytes=MB, total_bytes=2 * MB, keep_s=10 * 86400),
        ended=lambda job_id: job_id not in running,
    )
    _job_log(logs, ANCIENT, 1000, 40 * 86400)  # past the age
    _job_log(logs, RUNNING, 1000, 50 * 86400)  # old, but its job has not ended
    for n, age in enumerate((5, 4, 3, 2, 1)):  # ~0.55 MB each: over 2 MB together
        _job_log(logs, IDS[n], 8_000, age * 86400)
    logs.use(IDS[3])  # followed right now: never removed under a reader
    removed = logs.sweep()
    assert removed[0] == ANCIENT
    assert set(removed[1:]) == {IDS[0], IDS[1]}  # the oldest, until under the cap
    total = sum(logs.path_of(j).stat().st_size for j in os.listdir(tmp_path))
    assert total <= 2 * MB
    note = JobLog(logs.path_of(ANCIENT)).read(-1, 10)
    assert len(note) == 1 and note[0].stream == "system" and note[0].seq == 1000
    assert "older than 10 days (jobs.log_keep_days)" in note[0].text
    assert "passed their 2 MB (jobs.log_total_mb)" in JobLog(logs.path_of(IDS[0])).read()[0].text
    assert len(JobLog(logs.path_of(RUNNING))) == 1000
    assert len(JobLog(logs.path_of(IDS[3]))) == 8_000
    assert logs.sweep() == []  # a removed log's one line is never removed again
