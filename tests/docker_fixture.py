"""A real Docker engine for the tests that need one (import the fixtures into a test module).

``docker_host``: DOCKER_HOST when it answers, else a private dockerd from scripts/dockerd.sh
(started once per session, stopped at the end only if this session started it); the tests are
skipped with the reason when no engine can be started. ``sklearn_image``: the jobs' test image
(python3, numpy, scikit-learn from Debian packages), built by scripts/build_test_image.sh when
missing. The CI's test command runs both scripts first; these fixtures make plain `pytest` work.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from engine.resources.readiness import probe_docker
from tests.conftest import REPO

SKLEARN_IMAGE = "nunet/python-sklearn:test"
NOTEBOOK_IMAGE = "nunet/jupyterlab:test"  # scripts/build_notebook_image.sh
TORCH_IMAGE = "nunet/python-torch:test"  # scripts/build_torch_image.sh
TORCH_WHEEL = os.environ.get(
    "NUNET_TORCH_WHEEL", "/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
)


def _unavailable(reason: str) -> None:
    # In CI the test command installs and starts dockerd: its absence there is a failure.
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _ping(url: str) -> bool:
    return probe_docker({"DOCKER_HOST": url}).reachable


@pytest.fixture(scope="session")
def docker_host() -> Iterator[str]:
    """A reachable Docker engine: DOCKER_HOST if it answers, else a private dockerd."""
    existing = os.environ.get("DOCKER_HOST")
    if existing and _ping(existing):
        yield existing
        return
    script = REPO / "scripts" / "dockerd.sh"
    done = subprocess.run(
        ["bash", str(script), "status"], capture_output=True, text=True, timeout=30
    )
    started = done.returncode != 0
    if started:
        done = subprocess.run(
            ["bash", str(script), "start"], capture_output=True, text=True, timeout=600
        )
    if done.returncode != 0:
        _unavailable(f"no Docker engine could be started here: {done.stderr.strip()[-400:]}")
    url = done.stdout.strip().splitlines()[-1].split("=", 1)[1]
    try:
        yield url
    finally:
        if started:
            subprocess.run(["bash", str(script), "stop"], capture_output=True, timeout=60)


def _built(script: str, image: str, docker_host: str, what: str) -> str:
    """``image``, built by scripts/``script`` when it is not there yet (each script keeps an
    image already present)."""
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / script), image],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "DOCKER_HOST": docker_host},
    )
    if done.returncode != 0:
        _unavailable(f"{what} could not be built: {done.stderr.strip()[-400:]}")
    return image


@pytest.fixture(scope="session")
def sklearn_image(docker_host: str) -> str:
    """The jobs' test image, built from Debian packages when it is not there yet."""
    return _built("build_test_image.sh", SKLEARN_IMAGE, docker_host, "the test image")


@pytest.fixture(scope="session")
def notebook_image(docker_host: str) -> str:
    """The test image plus JupyterLab (wheels from the package index pip is configured
    with, installed in a container without network), built when it is not there yet."""
    return _built("build_notebook_image.sh", NOTEBOOK_IMAGE, docker_host, "the notebook image")


@pytest.fixture(scope="session")
def torch_image(docker_host: str, sklearn_image: str) -> str:
    """The test image plus PyTorch (CPU) from the local wheel: the distributed-training tests'
    (issue 25). Skipped, naming the file, only where the wheel is absent."""
    if not os.path.isfile(TORCH_WHEEL):
        pytest.skip(f"no torch wheel at {TORCH_WHEEL} (set NUNET_TORCH_WHEEL)")
    return _built("build_torch_image.sh", TORCH_IMAGE, docker_host, "the torch image")


# Run a test with each executor (`@EXECUTORS` on a test taking ``executor`` and ``request``);
# its daemons get `executor_env(...)` and `executor_jobs_toml(...)`.
EXECUTORS = pytest.mark.parametrize(
    "executor", ["process", pytest.param("docker", marks=pytest.mark.docker)]
)


def executor_env(executor: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """The environment a daemon running jobs with ``executor`` needs (Docker's engine and
    the jobs' image, for "docker")."""
    if executor != "docker":
        return {}
    host = request.getfixturevalue("docker_host")
    request.getfixturevalue("sklearn_image")
    return {"DOCKER_HOST": host}
