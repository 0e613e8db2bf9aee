"""A job's steps and replicas (issue 25 §1) in containers, against the real dockerd: each
replica its own container (no network, the job's limits), all on the one workspace."""

from __future__ import annotations

from pathlib import Path

from engine.jobs.executors.docker import DockerExecutor
from tests.docker.test_jobs_docker import executor, ours  # noqa: F401 (fixtures)
from tests.docker_fixture import docker_host, sklearn_image  # noqa: F401 (fixtures)
from tests.engine.test_job_steps import (
    check_a_failing_replica_ends_the_job,
    check_cancel_stops_every_replica,
    check_three_steps,
)


def test_three_steps_in_containers(executor: DockerExecutor, tmp_path: Path) -> None:  # noqa: F811
    check_three_steps(executor, tmp_path)
    assert ours(executor) == []  # every replica's container removed


def test_a_failing_replica_stops_its_sibling_container(
    executor: DockerExecutor,  # noqa: F811
    tmp_path: Path,
) -> None:
    check_a_failing_replica_ends_the_job(executor, tmp_path)
    assert ours(executor) == []


def test_cancel_stops_every_replica_container(executor: DockerExecutor, tmp_path: Path) -> None:  # noqa: F811
    check_cancel_stops_every_replica(executor, tmp_path)
    assert ours(executor) == []


def test_the_sweep_example_runs_in_containers(executor: DockerExecutor, tmp_path: Path) -> None:  # noqa: F811
    """examples/jobs/sweep.toml on the test image (python3, numpy, scikit-learn)."""
    import json

    from engine.domain.spec import load_job_file
    from tests.engine.test_jobs_process import EXAMPLES, LIMITS, new_run, run_job

    spec = load_job_file(EXAMPLES / "sweep.toml", base_url="http://127.0.0.1/")
    run = new_run(tmp_path, spec, LIMITS)
    status, lines = run_job(executor, run, (EXAMPLES / "sweep.py").read_text())
    assert status.outcome == "completed", status
    stdout = [line.text for line in lines if line.stream == "stdout"]
    assert stdout[0].startswith("[prepare#1] prepared ")
    assert sum(1 for text in stdout if text.startswith("[sweep#")) == 4
    best = json.loads((run.workspace / "outputs" / "best.json").read_text())
    assert [t["max_depth"] for t in best["tried"]] == [1, 2, 3, 5]
    assert any(text.startswith("[pick#1] best: max_depth=") for text in stdout)
