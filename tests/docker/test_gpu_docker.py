"""GPU container paths against a real Docker engine (a private dockerd from scripts/dockerd.sh).

No registry is reachable from the test machines and no GPU is present, which is exactly what
these tests need: an offline pull must say so plainly, and a GPU request on a machine without
the NVIDIA runtime must fail with the clear message rather than Docker's.
"""

from __future__ import annotations

import io
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import api
from engine.config import MlImagesSettings, Settings, load_settings
from engine.errors import EngineError
from engine.resources.gpu.capabilities import container_capabilities
from engine.resources.gpu.containers import (
    NO_NVIDIA_RUNTIME,
    explain_docker_gpu_error,
    gpu_container_options,
)
from engine.resources.ml_images import prepare_images
from engine.resources.readiness import probe_docker
from tests import docker_fixture
from tests.conftest import make_home, run_cli

docker_host = docker_fixture.docker_host  # the shared session fixture
PRESENT = "nunet-test/present:1"
UNREACHABLE = "registry.invalid/nunet/tf:1"


@pytest.fixture(scope="session")
def docker_client(docker_host: str) -> Iterator[Any]:
    import docker

    client = docker.DockerClient(base_url=docker_host, version="auto", timeout=60)
    buffer = io.BytesIO()
    tarfile.open(fileobj=buffer, mode="w").close()  # an image with nothing in it
    repository, tag = PRESENT.rsplit(":", 1)
    client.api.import_image_from_data(buffer.getvalue(), repository=repository, tag=tag)
    try:
        yield client
    finally:
        client.close()


def test_gpu_request_without_nvidia_runtime_is_explained(docker_client: Any) -> None:
    container = docker_client.containers.create(
        PRESENT, command=["/probe"], network_disabled=True, **gpu_container_options("nvidia")
    )
    try:
        with pytest.raises(Exception) as info:
            container.start()
    finally:
        container.remove(force=True)
    assert 'could not select device driver ""' in str(info.value)
    mapped = explain_docker_gpu_error(info.value)
    assert mapped is not None and mapped.message == NO_NVIDIA_RUNTIME


def test_in_container_check_without_runtime_or_image(docker_host: str, docker_client: Any) -> None:
    docker = probe_docker({"DOCKER_HOST": docker_host})
    with pytest.raises(EngineError) as info:
        container_capabilities("nvidia", PRESENT, docker)
    assert info.value.code == "gpu_runtime" and info.value.message == NO_NVIDIA_RUNTIME
    with pytest.raises(EngineError) as missing:
        container_capabilities("nvidia", "nunet-test/absent:1", docker)
    assert missing.value.code == "image_missing"
    assert "run `nunet-tui onboard-ml`" in missing.value.message
    assert docker_client.containers.list(all=True, filters={"ancestor": PRESENT}) == []


def test_prepare_images_present_and_offline(docker_client: Any) -> None:
    events: list[api.ImagePullProgress] = []
    report = prepare_images(
        docker_client, [("pytorch_cpu", PRESENT), ("tensorflow_cpu", UNREACHABLE)], events.append
    )
    assert [r.status for r in report.results] == ["present", "failed"]
    assert not report.ok
    detail = report.results[1].detail
    assert detail.startswith("cannot reach registry registry.invalid: ")
    assert detail.endswith("— this machine is offline; load images with `docker load`")
    by_image = {(e.image, e.status) for e in events}
    assert {(PRESENT, "waiting"), (PRESENT, "present"), (UNREACHABLE, "failed")} <= by_image


def test_prepare_ml_images_through_the_engine(
    tmp_path: Path, docker_host: str, docker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.facade import Engine

    monkeypatch.setenv("DOCKER_HOST", docker_host)
    paths = make_home(tmp_path / "home")
    settings = load_settings(paths)
    settings = Settings(
        log_level=settings.log_level,
        machine=settings.machine,
        network=settings.network,
        jobs=settings.jobs,
        ml_images=MlImagesSettings(pytorch_cpu=PRESENT, tensorflow_cpu=UNREACHABLE),
    )
    seen: list[api.ImagePullProgress] = []
    lock = threading.Lock()

    def on_event(event: api.Event) -> None:
        if isinstance(event, api.ImagePullProgress):
            with lock:
                seen.append(event)

    with Engine(paths, settings=settings) as engine:
        engine.subscribe(on_event)
        report = engine.call_blocking(api.PrepareMlImages(), timeout=120)
    assert isinstance(report, api.MlImagesReport)
    assert [(r.key, r.status) for r in report.results] == [
        ("pytorch_cpu", "present"),
        ("tensorflow_cpu", "failed"),
    ]
    assert any(e.status == "failed" and "offline" in e.detail for e in seen)


def test_onboard_ml_cli_offline(tmp_path: Path, docker_host: str, docker_client: Any) -> None:
    paths = make_home(tmp_path / "home")
    with paths.config_file.open("a") as config:
        config.write(
            f'\n[ml_images]\npytorch_cpu = "{PRESENT}"\ntensorflow_cpu = "{UNREACHABLE}"\n'
        )
    done = run_cli("onboard-ml", home=paths, env={"DOCKER_HOST": docker_host})
    assert done.returncode == 1, done.stderr
    assert f"{PRESENT}" in done.stdout and "present" in done.stdout
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("nunet-tui: error: cannot reach registry registry.invalid: ")
    assert "this machine is offline; load images with `docker load`" in error


def test_onboard_ml_without_docker_is_a_clear_error(tmp_path: Path) -> None:
    paths = make_home(tmp_path / "home")
    done = run_cli("onboard-ml", "--json", home=paths, env={"DOCKER_HOST": "unix:///nonexistent"})
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "nunet-tui: error: no Docker engine at unix:///nonexistent (no such socket): start "
        "dockerd or set DOCKER_HOST; onboard-ml pulls images into it"
    )
