"""The GPU commands of the facade: live status, doctor, capabilities, ML image preparation.

``commands(ctx)`` returns the handlers that ``Node`` registers (engine/commands.py). Every
blocking call (NVML, sysfs walks, Docker) runs in a worker thread, never on the trio loop.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from engine import api
from engine.context import NodeContext
from engine.domain.ml_images import DEFAULT_ML_IMAGES
from engine.errors import EngineError
from engine.resources.gpu.capabilities import (
    container_capabilities,
    host_capabilities,
    probe_image_for,
)
from engine.resources.gpu.containers import preflight_gpu_runtime
from engine.resources.gpu.doctor import run_doctor
from engine.resources.gpu.service import GpuService
from engine.resources.ml_images import prepare_images, select_images
from engine.resources.readiness import DockerStatus, probe_docker

Handler = Callable[[Any], Awaitable[Any]]


def ml_image_map(node: NodeContext) -> dict[str, str]:
    settings = getattr(node.settings, "ml_images", None)
    return settings.as_map() if settings is not None else dict(DEFAULT_ML_IMAGES)


def commands(
    node: NodeContext,
    *,
    service: GpuService | None = None,
    docker_probe: Callable[[], DockerStatus] | None = None,
) -> dict[type[api.Command], Handler]:
    gpu = service or GpuService(node.probes.gpu_sampler)
    probe = docker_probe or (lambda: probe_docker(os.environ))

    async def gpu_status(command: api.GetGpuStatus) -> api.GpuStatusReply:
        return await gpu.status(history=command.history)

    async def gpu_doctor(command: api.GpuDoctor) -> api.DoctorReport:
        executors = node.settings.jobs.executors
        return await trio.to_thread.run_sync(
            lambda: run_doctor(gpus=node.gpus, executors=executors)
        )

    async def gpu_capabilities(command: api.GpuCapabilities) -> api.CapabilityReport:
        status = await gpu.status()
        snapshot = api.GpuStatus(gpus=status.gpus, reason=status.reason, at=status.at)
        host = await trio.to_thread.run_sync(lambda: host_capabilities(snapshot))
        if not command.in_container:
            return api.CapabilityReport(host=host)
        vendor = next((g.vendor for g in snapshot.gpus if g.vendor in ("nvidia", "amd")), None)
        if vendor is None:
            return api.CapabilityReport(
                host=host,
                container_reason="no NVIDIA or AMD GPU on this host: the in-container check "
                "needs one (CPU jobs need no GPU check)",
            )
        docker = await trio.to_thread.run_sync(probe)
        if not docker.reachable:
            return api.CapabilityReport(
                host=host,
                container_reason=f"no Docker engine at {docker.url}: start dockerd or set "
                "DOCKER_HOST",
            )
        image = probe_image_for(vendor, ml_image_map(node))
        if image is None:
            return api.CapabilityReport(
                host=host, container_reason=f"no pytorch_{vendor} image set in [ml_images]"
            )
        try:
            preflight_gpu_runtime(vendor, docker)
            container = await trio.to_thread.run_sync(
                lambda: container_capabilities(vendor, image, docker), abandon_on_cancel=True
            )
        except EngineError as exc:
            return api.CapabilityReport(host=host, container_reason=exc.message)
        return api.CapabilityReport(host=host, container=container)

    async def prepare_ml_images(command: api.PrepareMlImages) -> api.MlImagesReport:
        docker = await trio.to_thread.run_sync(probe)
        if not docker.reachable:
            raise EngineError(
                "docker",
                f"no Docker engine at {docker.url} ({docker.error or 'not reachable'}): "
                "start dockerd or set DOCKER_HOST; onboard-ml pulls images into it",
            )
        selection = select_images(ml_image_map(node), (g.vendor for g in node.gpus), command.images)
        if not selection:
            return api.MlImagesReport()
        token = trio.lowlevel.current_trio_token()
        client = _docker_client(docker.url)

        def emit(event: api.ImagePullProgress) -> None:
            # From the pull's worker thread onto the engine loop, without waiting for it.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(node.emit, event)

        try:
            return await trio.to_thread.run_sync(
                lambda: prepare_images(client, selection, emit), abandon_on_cancel=True
            )
        finally:
            # On cancel (engine stopping) this also breaks the abandoned pull's stream.
            with contextlib.suppress(Exception):
                client.close()

    return {
        api.GetGpuStatus: gpu_status,
        api.GpuDoctor: gpu_doctor,
        api.GpuCapabilities: gpu_capabilities,
        api.PrepareMlImages: prepare_ml_images,
    }


def _docker_client(url: str) -> Any:
    try:
        import docker

        # Pull streams can stay silent for minutes while a big layer extracts.
        return docker.DockerClient(base_url=url, version="auto", timeout=3600)
    except Exception as exc:
        raise EngineError("docker", f"cannot talk to the Docker engine at {url}: {exc}") from exc
