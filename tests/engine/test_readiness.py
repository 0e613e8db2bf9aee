"""Readiness checks: Docker through the real SDK, drivers and runtimes from built /proc and /dev."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TypedDict

import pytest

from engine.api import GpuInfo
from engine.resources.readiness import (
    NO_GPU,
    DockerStatus,
    check_readiness,
    probe_docker,
)

NVIDIA = GpuInfo(index=0, vendor="nvidia", name="RTX 3090", vram_mb=24576, uuid="GPU-a")
AMD = GpuInfo(index=0, vendor="amd", name="MI250X", vram_mb=65536, uuid="GPU-b")
INTEL = GpuInfo(index=0, vendor="intel", name="Arc", vram_mb=16384, uuid="intel-pci:x")
NVRM = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)


class FakeDockerEngine(BaseHTTPRequestHandler):
    """A double of the Docker engine's HTTP API: just /version and /info."""

    runtimes: dict[str, object] = {"runc": {"path": "runc"}}

    def do_GET(self) -> None:
        if self.path.endswith("/version"):
            body: dict[str, object] = {"ApiVersion": "1.45", "Version": "28.0.1"}
        elif self.path.endswith("/info"):
            body = {"ServerVersion": "28.0.1", "Runtimes": self.runtimes}
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def docker_engine() -> Iterator[tuple[str, type[FakeDockerEngine]]]:
    handler = type("Engine", (FakeDockerEngine,), {"runtimes": {"runc": {}}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Roots(TypedDict):
    proc_root: Path
    dev_root: Path


def roots(tmp_path: Path) -> Roots:
    proc, dev = tmp_path / "proc", tmp_path / "dev"
    proc.mkdir()
    dev.mkdir()
    return {"proc_root": proc, "dev_root": dev}


def no_docker() -> DockerStatus:
    return DockerStatus("unix:///var/run/docker.sock", False, error="no such socket")


# --- Docker ------------------------------------------------------------------------------


@pytest.mark.skipif(Path("/var/run/docker.sock").exists(), reason="a Docker engine is running")
def test_this_machine_without_docker_or_gpu() -> None:
    started = time.perf_counter()
    readiness = check_readiness((), environ={})
    assert time.perf_counter() - started < 3.0
    assert not readiness.docker.ok
    assert readiness.docker.detail == (
        "no Docker engine at unix:///var/run/docker.sock: start dockerd or set DOCKER_HOST"
    )
    assert (readiness.gpu_driver.ok, readiness.gpu_driver.detail) == (False, NO_GPU)
    assert (readiness.gpu_runtime.ok, readiness.gpu_runtime.detail) == (False, NO_GPU)


def test_docker_host_is_honoured(tmp_path: Path) -> None:
    url = f"unix://{tmp_path}/docker.sock"
    readiness = check_readiness((), environ={"DOCKER_HOST": url})
    assert readiness.docker.detail == f"no Docker engine at {url}: start dockerd or set DOCKER_HOST"


def test_nothing_listening_on_a_tcp_docker_host() -> None:
    url = f"tcp://127.0.0.1:{closed_port()}"
    started = time.perf_counter()
    status = probe_docker({"DOCKER_HOST": url})
    assert time.perf_counter() - started < 3.0
    assert (status.url, status.reachable) == (url, False)


def test_a_reachable_engine(docker_engine: tuple[str, type[FakeDockerEngine]]) -> None:
    url, _ = docker_engine
    readiness = check_readiness((), environ={"DOCKER_HOST": url})
    assert readiness.docker.ok
    assert readiness.docker.detail == f"Docker engine reachable at {url} (server 28.0.1)"


def test_nvidia_runtime_registered_in_docker(
    tmp_path: Path, docker_engine: tuple[str, type[FakeDockerEngine]]
) -> None:
    url, handler = docker_engine
    handler.runtimes = {"runc": {}, "nvidia": {"path": "nvidia-container-runtime"}}
    readiness = check_readiness(
        (NVIDIA,), environ={"DOCKER_HOST": url}, which=lambda _: None, **roots(tmp_path)
    )
    assert readiness.gpu_runtime.ok
    assert readiness.gpu_runtime.detail == "Docker has the nvidia runtime"


def test_a_hung_engine_costs_a_bounded_time() -> None:
    def hangs() -> DockerStatus:
        time.sleep(5)
        return no_docker()

    started = time.perf_counter()
    readiness = check_readiness((), docker_probe=hangs, environ={"DOCKER_HOST": "tcp://h:1"})
    assert time.perf_counter() - started < 3.0
    assert not readiness.docker.ok
    assert readiness.docker.detail.startswith("Docker engine at tcp://h:1 timed out")


def test_a_probe_that_raises_is_a_failed_check() -> None:
    def explodes() -> DockerStatus:
        raise OSError("boom")

    readiness = check_readiness((), docker_probe=explodes, environ={})
    assert not readiness.docker.ok


def test_socket_without_permission() -> None:
    status = DockerStatus("unix:///var/run/docker.sock", False, error="permission denied")
    readiness = check_readiness((), docker_probe=lambda: status)
    assert readiness.docker.detail == (
        "no permission to use the Docker engine at unix:///var/run/docker.sock: "
        "add your user to the docker group and log in again"
    )


# --- GPU driver and runtime --------------------------------------------------------------


def test_nvidia_driver_version_from_proc(tmp_path: Path) -> None:
    paths = roots(tmp_path)
    (paths["proc_root"] / "driver" / "nvidia").mkdir(parents=True)
    (paths["proc_root"] / "driver" / "nvidia" / "version").write_text(NVRM)
    readiness = check_readiness((NVIDIA,), docker_probe=no_docker, **paths)
    assert readiness.gpu_driver.ok
    assert readiness.gpu_driver.detail == "NVIDIA driver 550.54.15 loaded"


def test_nvidia_driver_from_the_control_device(tmp_path: Path) -> None:
    paths = roots(tmp_path)
    (paths["dev_root"] / "nvidiactl").touch()
    readiness = check_readiness((NVIDIA,), docker_probe=no_docker, **paths)
    assert readiness.gpu_driver.ok


def test_nvidia_driver_missing(tmp_path: Path) -> None:
    readiness = check_readiness((NVIDIA,), docker_probe=no_docker, **roots(tmp_path))
    assert not readiness.gpu_driver.ok
    assert "NVIDIA driver not loaded" in readiness.gpu_driver.detail


def test_nvidia_runtime_on_path(tmp_path: Path) -> None:
    def which(name: str) -> str | None:
        return "/usr/bin/nvidia-container-toolkit" if name == "nvidia-container-toolkit" else None

    readiness = check_readiness((NVIDIA,), docker_probe=no_docker, which=which, **roots(tmp_path))
    assert readiness.gpu_runtime.ok
    assert "/usr/bin/nvidia-container-toolkit" in readiness.gpu_runtime.detail


def test_nvidia_runtime_missing(tmp_path: Path) -> None:
    readiness = check_readiness(
        (NVIDIA,), docker_probe=no_docker, which=lambda _: None, **roots(tmp_path)
    )
    assert not readiness.gpu_runtime.ok
    assert "install nvidia-container-toolkit" in readiness.gpu_runtime.detail


def test_amd_devices(tmp_path: Path) -> None:
    paths = roots(tmp_path)
    missing = check_readiness((AMD,), docker_probe=no_docker, **paths)
    assert not missing.gpu_driver.ok and "/dev/kfd" in missing.gpu_driver.detail
    assert not missing.gpu_runtime.ok and "missing" in missing.gpu_runtime.detail
    (paths["dev_root"] / "kfd").touch()
    (paths["dev_root"] / "dri").mkdir()
    ready = check_readiness((AMD,), docker_probe=no_docker, **paths)
    assert ready.gpu_driver.ok and ready.gpu_runtime.ok
    assert ready.gpu_runtime.detail.startswith("AMD containers can be given")


def test_mixed_vendors_need_every_part(tmp_path: Path) -> None:
    paths = roots(tmp_path)
    (paths["dev_root"] / "dri").mkdir()
    readiness = check_readiness(
        (NVIDIA, INTEL), docker_probe=no_docker, which=lambda _: None, **paths
    )
    # Intel is fine, NVIDIA is not: the whole check fails and says both.
    assert not readiness.gpu_driver.ok
    assert "Intel GPU driver loaded" in readiness.gpu_driver.detail
    assert "NVIDIA driver not loaded" in readiness.gpu_driver.detail
