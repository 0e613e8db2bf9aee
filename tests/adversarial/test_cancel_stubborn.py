"""`job cancel` of a job that ignores SIGTERM, against real daemons (the process executor,
and Docker): the provider answers the Cancel at once and stops the job in the background
(its grace time, then a kill), and the consumer's command ends with the job cancelled.

Before the fix the provider answered only once the job had stopped: with the 10 s grace
time (and more under load) the consumer's 10 s wait for an answer ran out first, and `job
cancel` failed ("internal error: " with an empty reason, later "did not take the cancel")
while the job was in fact being cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, _submit
from tests.docker_fixture import EXECUTORS, docker_host, executor_env, sklearn_image
from tests.http_files import serve_files

__all__ = ["daemons", "docker_host", "sklearn_image"]

STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM ignored", flush=True))
print("started", flush=True)
while True:
    time.sleep(0.2)
"""


@pytest.fixture
def stubborn_url(tmp_path: Path) -> Iterator[str]:
    with serve_files(tmp_path / "www", {"stubborn.py": STUBBORN}) as base:
        yield f"{base}/stubborn.py"


@EXECUTORS
def test_cancel_of_a_job_that_ignores_sigterm_is_taken_at_once_and_ends_it(
    executor: str,
    daemons: Callable[..., Daemon],
    stubborn_url: str,
    request: pytest.FixtureRequest,
) -> None:
    env = executor_env(executor, request)
    jobs = f'\n[jobs]\nexecutors = ["{executor}"]\ncheckpoint_interval_s = 0\n'
    provider, consumer = _pair(daemons, jobs_toml=jobs, env=env)
    job_id = _submit(consumer, stubborn_url, name="stubborn")["job_id"]
    wait_for(
        lambda: "started" in run_cli("job", "logs", job_id, home=consumer.home).stdout,
        "the job never started",
        60,
    )
    began = time.monotonic()
    result = run_cli("job", "cancel", job_id, home=consumer.home)
    took = time.monotonic() - began
    assert result.returncode == 0, result.stderr
    assert "internal error" not in result.stderr
    # Ended within the command (grace time, then a kill), or said to be stopping.
    if "is stopping job" not in result.stderr:
        assert "cancelled" in result.stdout, (result.stdout, result.stderr, took)
    wait_for(lambda: _state(consumer, job_id) == "cancelled", "the job never ended", 60)
    assert _state(provider, job_id) == "cancelled"
    logs = run_cli("job", "logs", job_id, home=consumer.home).stdout
    assert "SIGTERM ignored" in logs  # it was asked first, then killed
