"""`job submit --follow`, `job resubmit` (issue 22 §1): the real command line against a real
consumer and provider daemon (process executor, scripts over HTTP). --follow prints the job's
log on stdout, its end on stderr, and exits with its end (job_output.FOLLOW_EPILOG)."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nunet_tui.cli.job_output import EXIT_CANCELLED
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state
from tests.http_files import serve_files

__all__ = ["daemons"]

HELLO = """
for i in range(3):
    print(f"hello {i}", flush=True)
"""
EXIT_3 = """
import sys
print("giving up", flush=True)
sys.exit(3)
"""
SLOW = """
import time
for i in range(600):
    print(f"tick {i}", flush=True)
    time.sleep(0.1)
"""


@pytest.fixture
def scripts(tmp_path: Path) -> Iterator[str]:
    files = {"hello.py": HELLO, "exit3.py": EXIT_3, "slow.py": SLOW}
    with serve_files(tmp_path / "www", files) as base:
        yield base


def _submit(consumer: Daemon, url: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "job", "submit", "--url", url, "--framework", "scikit-learn",
        "--expected-minutes", "1", *flags, home=consumer.home, timeout=90,
    )  # fmt: skip


@pytest.mark.timeout(240)
def test_follow_streams_the_log_and_exits_with_the_jobs_end(
    daemons: Callable[..., Daemon], scripts: str
) -> None:
    """Completed 0, failed with its own code, cancelled 130; a resubmit is a new job of
    the same spec, refused while the old one runs. Several jobs on one pair of daemons:
    starting a pair is most of this test's time."""
    provider, consumer = _pair(daemons, slots=2)
    done = _submit(consumer, f"{scripts}/hello.py", "--follow", "--no-progress")
    assert done.returncode == 0, done.stderr
    # As `job logs -f` prints it: the script's lines, then the provider's own (» completed).
    assert done.stdout.splitlines()[:3] == ["hello 0", "hello 1", "hello 2"]
    first_line, end_line = done.stderr.strip().splitlines()
    assert "following its log" in first_line
    job_id = first_line.split()[1]
    assert end_line == f"job {job_id} completed (exit status 0)"

    # The same spec again, on the provider named, followed with --json and its steps said.
    again = run_cli(
        "job", "resubmit", job_id, "--provider", provider.peer_id, "--follow", "--json",
        "--progress", home=consumer.home, timeout=90,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    objects: list[dict[str, Any]] = [json.loads(line) for line in again.stdout.splitlines()]
    submitted, *lines, ended = objects
    assert submitted["job_id"] != job_id and submitted["provider"] == provider.peer_id
    assert submitted["spec"] == consumer.cli("job", "show", job_id)["spec"]
    assert [line["text"] for line in lines if line["stream"] == "stdout"] == [
        "hello 0", "hello 1", "hello 2",
    ]  # fmt: skip
    assert (ended["job_id"], ended["state"]) == (submitted["job_id"], "completed")
    assert "submit: matching: peer" in again.stderr  # --progress and --follow together
    assert again.stderr.strip().endswith("completed (exit status 0)")
    assert _state(consumer, job_id) == "completed"  # the old job stays as it ended

    failed = _submit(consumer, f"{scripts}/exit3.py", "--follow", "--no-progress")
    assert failed.returncode == 3, failed.stderr
    assert "giving up" in failed.stdout
    assert ": exit code 3 (exit status 3)" in failed.stderr.strip().splitlines()[-1]

    # Cancelled while followed: the follower exits with cancelled's status.
    followed: dict[str, subprocess.CompletedProcess[str]] = {}
    thread = threading.Thread(
        target=lambda: followed.update(
            run=_submit(consumer, f"{scripts}/slow.py", "--follow", "--no-progress")
        )
    )
    thread.start()
    slow = wait_for(
        lambda: next(
            (j["job_id"] for j in consumer.cli("job", "list")["jobs"] if j["state"] == "running"),
            None,
        ),
        "the slow job never ran",
        60,
    )
    busy = run_cli("job", "resubmit", slow, home=consumer.home)
    assert busy.returncode == 1
    assert f"job {slow} is still running" in busy.stderr and "\n" not in busy.stderr.strip()
    assert consumer.cli("job", "cancel", slow)["state"] == "cancelled"
    thread.join(60)
    run = followed["run"]
    assert run.returncode == EXIT_CANCELLED, run.stderr
    assert "tick 0" in run.stdout
    end = run.stderr.strip().splitlines()[-1]
    assert end.startswith(f"job {slow} cancelled") and f"(exit status {EXIT_CANCELLED})" in end

    # A job this node ran for someone else, or none at all: one line each.
    theirs = run_cli("job", "resubmit", job_id, home=provider.home)
    assert theirs.returncode == 1 and "only its consumer" in theirs.stderr
    missing = run_cli("job", "resubmit", "0123456789ab", home=consumer.home)
    assert missing.returncode == 1 and "no job '0123456789ab'" in missing.stderr
