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
