"""A job that prints 200,000 lines in about a second, through the whole path: executor,
provider daemon, libp2p, consumer daemon. Every line must reach the consumer, once and in
order, and the job must end "completed".

Docker jobs used to stall at 50-80k lines and stay "running" for ever: a periodic checkpoint
that came after the container's exit, while its log tail was still being read, failed to pause
it, and the error ended the executor's nursery and with it the provider's whole engine.
Checkpoints every second here make that moment certain to come.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.jobs.joblog import JobLog
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import TERMINAL, _pair, _state, _submit
from tests.docker_fixture import EXECUTORS, docker_host, executor_env, sklearn_image
from tests.http_files import serve_files

__all__ = ["daemons", "docker_host", "sklearn_image"]

LINES = 200_000
FLOOD = f"import sys\nw = sys.stdout.write\nfor i in range({LINES}):\n    w(f'line {{i}}\\n')\n"


@pytest.fixture
def flood_url(tmp_path: Path) -> Iterator[str]:
    with serve_files(tmp_path / "www", {"flood.py": FLOOD}) as base:
        yield f"{base}/flood.py"


@EXECUTORS
def test_a_log_flood_arrives_whole_and_the_job_completes(
    executor: str,
    daemons: Callable[..., Daemon],
    flood_url: str,
    request: pytest.FixtureRequest,
) -> None:
    env = executor_env(executor, request)
    jobs = f'\n[jobs]\nexecutors = ["{executor}"]\ncheckpoint_interval_s = 1\n'
    provider, consumer = _pair(daemons, jobs_toml=jobs, env=env)
    job_id = _submit(consumer, flood_url, name="flood")["job_id"]
    state = wait_for(
        lambda: (s := _state(consumer, job_id)) in TERMINAL and s, "the flood never ended", 60
    )
    shown = consumer.cli("job", "show", job_id)
    assert state == "completed", shown
    # The end is announced with the last line: once "completed", the log is whole.
    lines = JobLog(consumer.home.state_dir / "jobs" / job_id / "log.jsonl").read(-1, 2 * LINES)
    seqs = [line.seq for line in lines]
    assert seqs == sorted(set(seqs)), "lines repeated or out of order"
    stdout = [line.text for line in lines if line.stream == "stdout"]
    assert len(stdout) == LINES
    assert stdout == [f"line {i}" for i in range(LINES)]
    assert shown["log_lines"] == len(lines)
    assert lines[-1].stream == "system" and lines[-1].text == "completed"
    # Checkpoints ran meanwhile and none of them took the provider down.
    assert provider.cli("job", "show", job_id)["state"] == "completed"
