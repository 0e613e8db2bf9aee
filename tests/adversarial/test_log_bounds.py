"""A job that prints millions of empty lines, against real provider and consumer daemons:
each side's memory stays flat (the log's index is sparse), each log stops at its cap with a
line saying so, and the ended jobs' logs together stay under their total cap, the oldest
replaced by a line that says when and why.

Before the fix every line cost two Python ints of index on both sides, kept for the last 8
logs read: ten 5-second jobs printing empty lines took a provider from 110 MB to 1.08 GB
and the consumer to 1.02 GB, and the 849 MB of their logs were never removed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.jobs.joblog import JobLog
from tests.adversarial.test_stream_exhaustion import rss_mb
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, _submit
from tests.http_files import serve_files

__all__ = ["daemons"]

JOB_MB, TOTAL_MB = 12, 30
# 1.5 M empty lines: ~90 MB of log lines, cut at 12 MB (~200,000 lines) on each side.
FLOOD = "import sys\nfor _ in range(30):\n    sys.stdout.write('\\n' * 50_000)\n"
JOBS = 6
# Measured on 2 cores: the provider grows by ~20 MB in the first job (a running job's line
# buffer at its peak, bounded in lines and bytes) and levels off at ~35 MB after 6-16 jobs
# (allocator and SQLite caches), the consumer by 9 MB and then not at all; before the fix
# each job added ~35 MB to the provider and ~32 MB to the consumer, without end.
GROWTH_LIMIT_MB = 60.0
LAST_THREE_LIMIT_MB = 15.0


@pytest.fixture
def flood_url(tmp_path: Path) -> Iterator[str]:
    with serve_files(tmp_path / "www", {"flood.py": FLOOD}) as base:
        yield f"{base}/flood.py"


def _pid(daemon: Daemon) -> int:
    assert daemon.proc is not None
    return daemon.proc.pid


def _log(daemon: Daemon, job_id: str) -> Path:
    return daemon.home.state_dir / "jobs" / job_id / "log.jsonl"


def test_floods_of_lines_keep_memory_flat_and_logs_within_their_caps(
    daemons: Callable[..., Daemon], flood_url: str
) -> None:
    caps = {"NUNET_JOBS_LOG_JOB_MB": str(JOB_MB), "NUNET_JOBS_LOG_TOTAL_MB": str(TOTAL_MB)}
    provider, consumer = _pair(daemons, env=caps, consumer_env=caps)
    sides = {"provider": provider, "consumer": consumer}
    before = {name: rss_mb(_pid(d)) for name, d in sides.items()}
    job_ids: list[str] = []
    middle: dict[str, float] = {}
    for n in range(JOBS):
        job_id = _submit(consumer, flood_url, name=f"flood-{n}")["job_id"]
        job_ids.append(job_id)
        wait_for(lambda j=job_id: _state(consumer, j) == "completed", "the flood never ended", 120)
        if n == JOBS - 4:
            middle = {name: rss_mb(_pid(d)) for name, d in sides.items()}
    for name, daemon in sides.items():
        now = rss_mb(_pid(daemon))
        grew, last_three = now - before[name], now - middle[name]
        assert grew < GROWTH_LIMIT_MB, f"{name} grew by {grew:.0f} MB in {JOBS} jobs"
        assert last_three < LAST_THREE_LIMIT_MB, f"{name} grew by {last_three:.0f} MB in 3 jobs"
        logs = [_log(daemon, job_id) for job_id in job_ids]
        assert sum(p.stat().st_size for p in logs) <= TOTAL_MB << 20
        # The newest log: cut at its cap, its last line says so, on both sides.
        newest = JobLog(_log(daemon, job_ids[-1]))
        assert _log(daemon, job_ids[-1]).stat().st_size <= JOB_MB << 20
        tail = [line.text for line in newest.read(-1, 3, newest=True)]
        assert any(f"{JOB_MB} MB cap here" in text for text in tail), (name, tail)
        # The oldest: replaced by the line that says why.
        oldest = JobLog(_log(daemon, job_ids[0])).read()
        assert len(oldest) == 1 and "(jobs.log_total_mb)" in oldest[0].text, (name, oldest)
    shown = consumer.cli("job", "show", job_ids[-1])
    assert shown["state"] == "completed"
