"""Vendor-agnostic GPU containers: what to hand docker-py, and a clear error before it fails.

NVIDIA GPUs are requested through ``device_requests`` (the nvidia-container-toolkit hook
does the rest); AMD and Intel GPUs are plain device nodes (``/dev/kfd`` for ROCm compute,
``/dev/dri`` for the render nodes) plus the groups that own them. Following NuNet's paper on
extending Docker's GPU support, the executor calls ``gpu_container_options`` and, before
creating anything, ``preflight_gpu_runtime``; a Docker error that still slips through is
translated by ``explain_docker_gpu_error``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.api import GpuInfo, GpuVendor
from engine.errors import EngineError
from engine.resources.gpu.base import DEFAULT_SYSFS_ROOT, drm_cards
from engine.resources.gpu.live import read_text
from engine.resources.readiness import NVIDIA_RUNTIME_TOOLS, DockerStatus, Which

NO_NVIDIA_RUNTIME = (
    "no NVIDIA container runtime: install nvidia-container-toolkit, run "
    "`sudo nvidia-ctk runtime configure --runtime=docker` and restart dockerd "
    "(`nunet-tui gpu doctor` prints the exact commands)"
)
_NO_DRIVER_FOR_GPU = re.compile(r'could not select device driver "[^"]*" with capabilities')
# The hook binaries Docker's "gpu" device driver needs on dockerd's PATH.
_NVIDIA_HOOKS = ("nvidia-container-runtime-hook", "nvidia-container-runtime", "nvidia-ctk")


def gpu_container_options(
    vendor: GpuVendor,
    gpus: Sequence[str | int] | None = None,
    *,
    dev_root: Path = Path("/dev"),
) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.run/create`` that give a container GPUs.

    ``gpus``: None for all GPUs of the vendor (the provider's own probes and checks; a job's
    container goes through ``job_gpu_options``, which never asks for all). NVIDIA takes
    indices or UUIDs; AMD and Intel take render nodes ("/dev/dri/renderD128"), and get every
    node of /dev/dri otherwise.
    """
    if vendor == "nvidia":
        from docker.types import DeviceRequest

        if gpus is None:
            request = DeviceRequest(count=-1, capabilities=[["gpu"]])
        else:
            request = DeviceRequest(device_ids=[str(g) for g in gpus], capabilities=[["gpu"]])
        return {"device_requests": [request]}
    nodes: list[Path] = []
    if vendor == "amd":
        nodes.append(dev_root / "kfd")  # ROCm's compute interface; Intel has none
    if gpus is None:
        nodes.append(dev_root / "dri")
    else:
        nodes.extend(Path(str(g)) for g in gpus)
    devices = [f"{node}:{node}:rwm" for node in nodes]
    return {"devices": devices, "group_add": _device_groups(nodes)}


def job_gpu_options(
    gpus: Sequence[GpuInfo],
    *,
    dev_root: Path = Path("/dev"),
    sysfs_root: Path = DEFAULT_SYSFS_ROOT,
) -> dict[str, Any]:
    """Options that give a job's container exactly ``gpus`` (the cards onboarded with
    ``--gpu``) and nothing else: a GPU that cannot be named precisely is refused, never
    widened to "all of them" (the host's other cards may be the owner's, or another job's).
    """
    if not gpus:
        raise EngineError(
            "no_gpu", "this GPU job was given no GPU: onboard one with `nunet-tui onboard --gpu`"
        )
    vendors = sorted({gpu.vendor for gpu in gpus})
    if len(vendors) != 1:
        raise EngineError("no_gpu", f"one job's GPUs must share a vendor, not {vendors}")
    vendor = gpus[0].vendor
    if vendor == "nvidia":
        return gpu_container_options("nvidia", nvidia_device_ids(gpus))
    nodes = render_nodes(gpus, sysfs_root=sysfs_root, dev_root=dev_root)
    return gpu_container_options(vendor, nodes, dev_root=dev_root)


def nvidia_device_ids(gpus: Sequence[GpuInfo]) -> list[str]:
    # NVML's UUIDs ("GPU-...", "MIG-...") are what the container toolkit takes; without
    # one (it could not be read), NVML's index is the toolkit's index too.
    return [gpu.uuid if gpu.uuid.startswith(("GPU-", "MIG-")) else str(gpu.index) for gpu in gpus]


def render_nodes(
    gpus: Sequence[GpuInfo],
    *,
    sysfs_root: Path = DEFAULT_SYSFS_ROOT,
    dev_root: Path = Path("/dev"),
) -> list[str]:
    """The /dev/dri render node of each AMD or Intel GPU, found through its PCI device
    (the ids the probes make: "intel-pci:<address>", "amd-pci:<address>", "GPU-<unique id>").
    A GPU whose node cannot be told is an error: the job never gets every node instead."""
    by_id: dict[str, str] = {}
    for card in drm_cards(sysfs_root):
        node = _render_node_name(card.device_dir)
        if node is None:
            continue
        ids = {f"{card.vendor}-pci:{card.pci_address}"}
        unique = read_text(card.device_dir / "unique_id")
        if unique:
            ids.add(f"GPU-{unique}")
            with contextlib.suppress(ValueError):
                ids.add(f"GPU-{int(unique, 16):016x}")
        for key in ids:
            by_id[key] = str(dev_root / "dri" / node)
    nodes: list[str] = []
    for gpu in gpus:
        node = by_id.get(gpu.uuid)
        if node is None:
            raise EngineError(
                "gpu_runtime",
                f"cannot tell which /dev/dri render node is GPU {gpu.uuid!r} ({gpu.name}): "
                "refusing to give the job every GPU; `nunet-tui gpu doctor` shows what was found",
            )
        nodes.append(node)
    return nodes


def _render_node_name(device_dir: Path) -> str | None:
    try:
        names = sorted(entry.name for entry in (device_dir / "drm").iterdir())
    except OSError:
        return None
    return next((n for n in names if n.startswith("renderD") and n[7:].isdigit()), None)


def _device_groups(nodes: list[Path]) -> list[str]:
    """The host's group ids that own the device nodes (names may not exist in the image).

    Docker resolves group names inside the container's /etc/group, where "render" is often
    missing; the numeric gid of the host's node is what the kernel checks.
    """
    gids: set[int] = set()
    for node in nodes:
        candidates = [node]
        if node.is_dir():
            try:
                candidates = [p for p in node.iterdir() if p.name.startswith(("render", "card"))]
            except OSError:
                candidates = []
        for path in candidates:
            try:
                gid = path.stat().st_gid
            except OSError:
                continue
            if gid != 0:
                gids.add(gid)
    return [str(gid) for gid in sorted(gids)] or ["video", "render"]


def preflight_gpu_runtime(
    vendor: GpuVendor,
    docker: DockerStatus,
    *,
    dev_root: Path = Path("/dev"),
    which: Which = shutil.which,
) -> None:
    """Raise a clear EngineError now rather than let the container start fail later."""
    if not docker.reachable:
        raise EngineError(
            "docker", f"no Docker engine at {docker.url}: start dockerd or set DOCKER_HOST"
        )
    if vendor == "nvidia":
        if "nvidia" in docker.runtimes:
            return
        if any(which(tool) for tool in (*_NVIDIA_HOOKS, *NVIDIA_RUNTIME_TOOLS)):
            return
        raise EngineError("gpu_runtime", NO_NVIDIA_RUNTIME)
    needed = [dev_root / "dri"] + ([dev_root / "kfd"] if vendor == "amd" else [])
    missing = [str(node) for node in needed if not node.exists()]
    label = "AMD" if vendor == "amd" else "Intel"
    if missing:
        hint = "load amdgpu (ROCm needs /dev/kfd)" if vendor == "amd" else "load i915 or xe"
        raise EngineError(
            "gpu_runtime",
            f"no {label} GPU devices for containers: {', '.join(missing)} missing; {hint}",
        )
    denied = [str(node) for node in needed if not os.access(node, os.R_OK | os.W_OK)]
    if denied:
        raise EngineError(
            "gpu_runtime",
            f"no access to {', '.join(denied)}: add this user to the video and render groups "
            "(`sudo usermod -aG video,render $USER`, then log in again)",
        )


def explain_docker_gpu_error(exc: BaseException) -> EngineError | None:
    """Docker's cryptic GPU failures as what to do; None when ``exc`` is something else."""
    text = str(exc)
    if _NO_DRIVER_FOR_GPU.search(text):
        return EngineError("gpu_runtime", NO_NVIDIA_RUNTIME)
    if "unknown or invalid runtime name: nvidia" in text:
        return EngineError("gpu_runtime", NO_NVIDIA_RUNTIME)
    match = re.search(
        r"error gathering device information while adding custom device "
        r"\"([^\"]+)\"",
        text,
    )
    if match:
        return EngineError(
            "gpu_runtime", f"the GPU device {match.group(1)} does not exist on this machine"
        )
    return None
