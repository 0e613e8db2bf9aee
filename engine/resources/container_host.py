"""What the Docker executor asks of the host's container engine and GPUs (engine/ports.py
``ContainerHost``): the engine's facts, a job's GPU options and the check before a GPU job's
container is made. The composition root (engine/node.py) builds one and hands it to the jobs
room, which never imports this room.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.api import GpuInfo, GpuVendor
from engine.errors import EngineError
from engine.resources.container_engine import EngineFacts, probe_facts
from engine.resources.gpu import containers
from engine.resources.gpu.base import DEFAULT_SYSFS_ROOT
from engine.resources.readiness import probe_docker


class ContainerFacts:
    """``dev_root`` and ``sysfs_root``: where the GPUs' device nodes and sysfs entries are
    read (a built tree in tests)."""

    def __init__(self, *, dev_root: Path = Path("/dev"), sysfs_root: Path = DEFAULT_SYSFS_ROOT):
        self.dev_root = dev_root
        self.sysfs_root = sysfs_root

    def engine(self, client: Any) -> EngineFacts:
        try:
            return probe_facts(client)
        except Exception:  # an engine that cannot say: treat it as rootful Docker
            return EngineFacts("Docker", "", rootless=False, cgroup_version="")

    def nvidia_device_ids(self, gpus: Sequence[GpuInfo]) -> list[str]:
        return containers.nvidia_device_ids(gpus)

    def job_gpu_options(self, gpus: Sequence[GpuInfo]) -> dict[str, Any]:
        return containers.job_gpu_options(gpus, dev_root=self.dev_root, sysfs_root=self.sysfs_root)

    def check_gpu_runtime(self, vendor: GpuVendor, docker_host: str | None) -> None:
        status = probe_docker({"DOCKER_HOST": docker_host or ""})
        containers.preflight_gpu_runtime(vendor, status, dev_root=self.dev_root)

    def explain_error(self, exc: BaseException) -> EngineError | None:
        return containers.explain_docker_gpu_error(exc)
