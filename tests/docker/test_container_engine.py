"""Docker or Podman, rootful or rootless: what the provider can enforce, and what it says.

The answers of /info, /version and Podman's /libpod/info are read as the engines send them
(the shapes below are Podman 4.3.1's and Docker 20.10's, trimmed); where scripts/podman.sh has
a real Podman service running, it is asked too.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine.api import GpuInfo
from engine.resources.container_engine import EngineFacts, facts_from, probe_facts
from engine.resources.readiness import DockerStatus, check_readiness
from tests.conftest import REPO

DOCKER_VERSION = {"Version": "20.10.24", "Components": [{"Name": "Engine"}, {"Name": "runc"}]}
PODMAN_VERSION = {"Version": "4.3.1", "Components": [{"Name": "Podman Engine"}]}
# Podman's compatible /info claims every limit, rootless or not.
PODMAN_INFO = {"ServerVersion": "4.3.1", "MemoryLimit": True, "CpuCfsQuota": True}


def _libpod(rootless: bool, version: str, controllers: list[str]) -> dict[str, Any]:
    return {
        "host": {
            "security": {"rootless": rootless},
            "cgroupVersion": version,
            "cgroupControllers": controllers,
        }
    }


def test_rootful_docker_enforces_the_limits() -> None:
    info = {
        "ServerVersion": "20.10.24",
        "MemoryLimit": True,
        "CpuCfsQuota": True,
        "PidsLimit": True,
        "CgroupVersion": "2",
        "SecurityOptions": ["name=seccomp"],
    }
    facts = facts_from(info, DOCKER_VERSION, None)
    assert facts == EngineFacts("Docker", "20.10.24", False, "2", ())
    assert facts.job_user is None and facts.limits_problem() == ""


def test_rootless_docker_on_cgroup_v1_ignores_every_limit() -> None:
    info = {
        "ServerVersion": "27.1",
        "CgroupVersion": "1",
        "SecurityOptions": ["name=seccomp,profile=builtin", "name=rootless"],
    }
    facts = facts_from(info, DOCKER_VERSION, None)
    assert facts.rootless and facts.unenforced == ("memory", "cpu", "pids")
    assert facts.job_user == "0:0"
    assert "rootless engine on cgroup v1" in facts.limits_problem()


def test_docker_that_says_a_limit_is_missing() -> None:
    info = {
        "ServerVersion": "27.1",
        "CgroupVersion": "2",
        "MemoryLimit": True,
        "CpuCfsQuota": True,
        "PidsLimit": False,
    }
    assert facts_from(info, DOCKER_VERSION, None).unenforced == ("pids",)


def test_podman_is_read_from_its_own_api_not_the_compatible_claims() -> None:
    rootful = facts_from(
        PODMAN_INFO, PODMAN_VERSION, _libpod(False, "v1", ["cpu", "memory", "pids"])
    )
    assert rootful == EngineFacts("Podman", "4.3.1", False, "1", ())
    assert rootful.label == "Podman 4.3.1"
    rootless = facts_from(PODMAN_INFO, PODMAN_VERSION, _libpod(True, "v1", []))
    assert rootless.label == "Podman 4.3.1 (rootless)"
    assert rootless.unenforced == ("memory", "cpu", "pids") and rootless.job_user == "0:0"
    # cgroup v2 with only memory and pids delegated: CPU limits do not hold.
    partial = facts_from(PODMAN_INFO, PODMAN_VERSION, _libpod(True, "v2", ["memory", "pids"]))
    assert partial.unenforced == ("cpu",)
    assert "not delegated" in partial.limits_problem()


def test_readiness_says_what_differs_and_is_not_ready_without_limits() -> None:
    rootless = facts_from(PODMAN_INFO, PODMAN_VERSION, _libpod(True, "v1", []))
    url = "unix:///run/user/1000/podman/podman.sock"
    status = DockerStatus(url, True, server_version="4.3.1", facts=rootless)
    readiness = check_readiness((), docker_probe=lambda: status, environ={})
    assert not readiness.docker.ok
    assert readiness.docker.detail.startswith(f"Podman 4.3.1 (rootless) reachable at {url}, but ")
    assert "job limits not enforced (memory, cpu, pids)" in readiness.docker.detail
    delegated = facts_from(
        PODMAN_INFO, PODMAN_VERSION, _libpod(True, "v2", ["cpu", "memory", "pids"])
    )
    ok = DockerStatus(url, True, server_version="4.3.1", facts=delegated)
    readiness = check_readiness((), docker_probe=lambda: ok, environ={})
    assert (
        readiness.docker.ok
        and readiness.docker.detail == f"Podman 4.3.1 (rootless) reachable at {url}"
    )


def test_rootless_gpu_access_is_explained(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "dev").mkdir()
    gpu = GpuInfo(index=0, vendor="nvidia", name="RTX 3090", vram_mb=24576, uuid="GPU-a")
    rootless = facts_from(
        PODMAN_INFO, PODMAN_VERSION, _libpod(True, "v2", ["cpu", "memory", "pids"])
    )
    status = DockerStatus("unix:///x", True, facts=rootless)
    readiness = check_readiness(
        (gpu,),
        docker_probe=lambda: status,
        proc_root=tmp_path / "proc",
        dev_root=tmp_path / "dev",
        which=lambda tool: f"/usr/bin/{tool}",
        environ={},
    )
    assert readiness.gpu_runtime.ok
    assert "rootless" in readiness.gpu_runtime.detail and "CDI" in readiness.gpu_runtime.detail


def _podman(*flags: str) -> str | None:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "podman.sh"), "status", *flags],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.stdout.strip().split("=", 1)[1] if done.returncode == 0 else None


@pytest.mark.parametrize("flags", [(), ("--rootless",)], ids=["rootful", "rootless"])
def test_a_real_podman_service(flags: tuple[str, ...]) -> None:
    url = _podman(*flags)
    if url is None:
        pytest.skip(f"no Podman service (bash scripts/podman.sh start {' '.join(flags)})")
    import docker

    client = docker.DockerClient(base_url=url, version="auto", timeout=30)
    try:
        facts = probe_facts(client)
    finally:
        client.close()
    assert facts.name == "Podman" and facts.rootless == bool(flags)
    if facts.rootless and facts.cgroup_version == "1":
        assert facts.unenforced == ("memory", "cpu", "pids")
    if not facts.rootless:
        assert facts.unenforced == () and facts.job_user is None
