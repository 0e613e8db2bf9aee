"""Jobs that fill the provider's inodes rather than its bytes, against real provider and
consumer daemons (process executor), the provider's cap on files per job set low.

Before the fix only bytes were counted: a plain job made 200,000 empty files in 18 s and
completed, and a 200 KB git repository checked out to 1,111,156 files on the provider and its
job completed. Now a job past ``jobs.max_files`` files and folders is stopped ("failed", with
a reason that says so, which its consumer sees), and a clone past it is stopped and refused.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine import api
from engine.jobs.executors.disk_quota import MAX_DEPTH
from tests.adversarial.test_fetch import Consumer, _git_job, _script
from tests.daemon_harness import Daemon, daemons
from tests.daemons.test_jobs_e2e import _pair
from tests.http_files import serve_files
from tests.unit.test_fetch_policy import git_server

__all__ = ["daemons"]

CAP = 5_000
CAPPED = {"NUNET_JOBS_MAX_FILES": str(CAP)}
# 30,000 empty files, then it waits: a job that keeps what it made. Its time limit (2 min:
# twice its expected minute) is the only thing that would end it without the cap.
MANY_FILES = """\
import os, time
os.makedirs("many", exist_ok=True)
for number in range(30_000):
    open(f"many/f{number}", "w").close()
print("made 30000 files", flush=True)
time.sleep(600)
"""
# 1,200 nested folders, then it waits: os.fwalk recursed, so this crashed the watch
# (RecursionError) and the job could then write without limit.
NESTED = """\
import os, time
fd = os.open(".", os.O_RDONLY)
for _ in range(1_200):
    os.mkdir("d", dir_fd=fd)
    inner = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = inner
print("nested 1200 folders", flush=True)
time.sleep(600)
"""


@pytest.fixture
def market(daemons: Callable[..., Daemon]) -> Iterator[tuple[Consumer, Daemon]]:
    provider, consumer = _pair(daemons, env=CAPPED)
    client = Consumer(consumer, provider)
    try:
        yield client, provider
    finally:
        client.close()


def _failed(client: Consumer, tmp_path: Path, script: str) -> tuple[api.JobInfo, str]:
    """The job running ``script``, once it ended "failed", and its log."""
    with serve_files(tmp_path / "www", {"job.py": script}) as base:
        ended = client.run(_script(f"{base}/job.py"))
    assert isinstance(ended, tuple), ended
    assert ended[0].state == "failed", ended[0]
    return ended


@pytest.mark.timeout(240)
def test_a_job_making_many_empty_files_is_stopped_with_the_reason(
    market: tuple[Consumer, Daemon], tmp_path: Path
) -> None:
    client, provider = market
    job, logs = _failed(client, tmp_path, MANY_FILES)
    # The consumer sees why, in the job's reason and its log.
    assert f"over {CAP:,} files and folders" in job.reason, job.reason
    assert "jobs.max_files" in job.reason and "\n" not in job.reason
    assert f"stopped: made over {CAP:,} files" in logs, logs[-2000:]
    shown = provider.cli("job", "show", job.job_id)
    assert shown["state"] == "failed" and "jobs.max_files" in shown["reason"]


@pytest.mark.timeout(240)
def test_a_job_nesting_folders_past_the_walks_depth_is_stopped(
    market: tuple[Consumer, Daemon], tmp_path: Path
) -> None:
    client, provider = market
    job, logs = _failed(client, tmp_path, NESTED)
    assert f"nested folders over {MAX_DEPTH} deep in /workspace" in job.reason, job.reason
    assert "stopped: nested folders" in logs, logs[-2000:]
    # pytest's own clean-up of old temporary folders recurses: rm them here.
    workspace = provider.home.state_dir / "jobs" / job.job_id / "workspace"
    subprocess.run(["rm", "-rf", "--", str(workspace)], check=True)


@pytest.mark.timeout(240)
def test_a_git_source_checking_out_past_the_file_cap_is_refused(
    market: tuple[Consumer, Daemon], tmp_path: Path
) -> None:
    client, provider = market
    honest = "print('the honest job ran')\n"
    # 6,000 empty files: one blob, a pack of a few KB (the attack's shape, made small); and a
    # repository of 100 files, under the cap, that runs.
    with (
        git_server("127.0.0.1", tmp_path / "big", honest, empty_files=CAP + 1_000) as big,
        git_server("127.0.0.1", tmp_path / "small", honest, empty_files=100) as small,
    ):
        refused = client.run(_git_job(big.url))
        ran = client.run(_git_job(small.url))
    assert isinstance(refused, tuple) and isinstance(ran, tuple), (refused, ran)
    job, logs = refused
    assert job.state == "failed", job
    assert "has too many files" in job.reason and f"{CAP:,} files and folders" in job.reason
    assert "jobs.max_files" in job.reason and "\n" not in job.reason
    assert "the honest job ran" not in logs
    # Nothing of the refused clone stays on the provider.
    src = provider.home.state_dir / "jobs" / job.job_id / "workspace" / "src"
    assert not src.exists()
    # The provider carries on: a repository under the cap runs.
    assert ran[0].state == "completed" and "the honest job ran" in ran[1], ran
