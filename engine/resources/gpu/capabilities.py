"""Capability checks, like ``nunet capacity --cuda-tensor`` and ``--rocm-hip``.

On the host: CUDA (an NVIDIA GPU read through NVML and the driver's ``libcuda``), compute
capability and tensor cores (7.0 and up), ROCm and HIP (an AMD GPU, ``/dev/kfd`` and the HIP
runtime). Inside the framework container: a tiny probe container of the PyTorch image asks
``torch`` itself, with the GPUs passed the way jobs will get them.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engine.api import CapabilitySet, GpuCapability, GpuStatus, GpuVendor
from engine.errors import EngineError
from engine.resources.gpu.amd_live import default_rocm_root, rocm_version
from engine.resources.gpu.containers import explain_docker_gpu_error, gpu_container_options
from engine.resources.readiness import DockerStatus

FindLibrary = Callable[[str], str | None]
TENSOR_CORE_MIN_CC = (7, 0)

# Prints one JSON line; runs in the framework image (python + torch).
PROBE = """
import json
try:
    import torch
except Exception as exc:
    print(json.dumps({"error": "torch missing: %s" % exc})); raise SystemExit(0)
out = {"cuda": bool(torch.cuda.is_available()), "cuda_version": torch.version.cuda,
       "hip_version": getattr(torch.version, "hip", None), "gpus": []}
if out["cuda"]:
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        out["gpus"].append({"name": torch.cuda.get_device_name(i), "cc": "%d.%d" % (major, minor)})
print(json.dumps(out))
""".strip()


def tensor_cores(compute_capability: str | None) -> bool | None:
    if not compute_capability:
        return None
    try:
        major, minor = (int(part) for part in compute_capability.split(".", 1))
    except ValueError:
        return None
    return (major, minor) >= TENSOR_CORE_MIN_CC


def host_capabilities(
    status: GpuStatus,
    *,
    find_library: FindLibrary = ctypes.util.find_library,
    rocm_root: Path | None = None,
    dev_root: Path = Path("/dev"),
) -> CapabilitySet:
    root = rocm_root if rocm_root is not None else default_rocm_root()
    notes: list[str] = []
    gpus = tuple(
        GpuCapability(
            index=gpu.index,
            vendor=gpu.vendor,
            name=gpu.name,
            compute_capability=gpu.compute_capability,
            tensor_cores=tensor_cores(gpu.compute_capability) if gpu.vendor == "nvidia" else None,
        )
        for gpu in status.gpus
    )
    nvidia = [gpu for gpu in status.gpus if gpu.vendor == "nvidia"]
    amd = [gpu for gpu in status.gpus if gpu.vendor == "amd"]
    cuda = False
    cuda_version = next((g.cuda_version for g in nvidia if g.cuda_version), None)
    if nvidia:
        if find_library("cuda"):
            cuda = True
        else:
            notes.append("NVIDIA GPU found but no libcuda.so: the driver's CUDA part is missing")
    rocm = hip = False
    version = next((g.rocm_version for g in amd if g.rocm_version), None) or (
        rocm_version(root) if amd else None
    )
    if amd:
        kfd = (dev_root / "kfd").exists()
        if not kfd:
            notes.append("AMD GPU found but no /dev/kfd: ROCm cannot reach it")
        rocm = kfd and version is not None
        hip = kfd and (bool(find_library("amdhip64")) or (root / "lib" / "libamdhip64.so").exists())
        if kfd and not hip:
            notes.append(
                "no HIP runtime on the host (libamdhip64); containers bring their own ROCm"
            )
    if not status.gpus:
        notes.append(f"no GPU: {status.reason or 'none found'}")
    return CapabilitySet(
        where="host",
        cuda=cuda,
        cuda_version=cuda_version if cuda else None,
        rocm=rocm,
        rocm_version=version,
        hip=hip,
        tensor_cores=any(g.tensor_cores for g in gpus),
        gpus=gpus,
        notes=tuple(notes),
    )


def probe_image_for(vendor: GpuVendor, images: Mapping[str, str]) -> str | None:
    key = {"nvidia": "pytorch_nvidia", "amd": "pytorch_amd"}.get(vendor)
    return images.get(key) or None if key else None


def parse_probe(output: str, where: str, vendor: GpuVendor) -> CapabilitySet:
    """The probe's last JSON line as a CapabilitySet; a clear note when it said nothing."""
    data: dict[str, Any] | None = None
    for line in reversed(output.strip().splitlines()):
        try:
            candidate = json.loads(line)
        except ValueError:
            continue
        if isinstance(candidate, dict):
            data = candidate
            break
    if data is None:
        return CapabilitySet(where=where, notes=(f"the probe printed no result: {output[-200:]}",))
    if "error" in data:
        return CapabilitySet(where=where, notes=(str(data["error"]),))
    hip_version = data.get("hip_version")
    is_hip = bool(hip_version)
    gpus = tuple(
        GpuCapability(
            index=i,
            vendor=vendor,
            name=str(gpu.get("name", "")),
            compute_capability=None if is_hip else gpu.get("cc"),
            tensor_cores=None if is_hip else tensor_cores(gpu.get("cc")),
        )
        for i, gpu in enumerate(data.get("gpus") or [])
        if isinstance(gpu, dict)
    )
    available = bool(data.get("cuda"))
    return CapabilitySet(
        where=where,
        cuda=available and not is_hip,
        cuda_version=data.get("cuda_version") if available and not is_hip else None,
        rocm=available and is_hip,
        rocm_version=str(hip_version) if is_hip else None,
        hip=available and is_hip,
        tensor_cores=any(g.tensor_cores for g in gpus),
        gpus=gpus,
    )


def container_capabilities(
    vendor: GpuVendor,
    image: str,
    docker: DockerStatus,
    *,
    client_factory: Callable[[str], Any] | None = None,
    timeout_s: float = 180.0,
) -> CapabilitySet:
    """Run the probe in ``image`` with the vendor's GPUs; raises EngineError with the fix."""
    client = (client_factory or _client)(docker.url)
    try:
        try:
            client.images.get(image)
        except Exception as exc:
            if type(exc).__name__ == "ImageNotFound":
                raise EngineError(
                    "image_missing",
                    f"the framework image {image} is not on this machine: "
                    "run `nunet-tui onboard-ml` (or `docker load` it)",
                ) from exc
            raise
        options = gpu_container_options(vendor)
        container = client.containers.create(
            image, command=["python", "-c", PROBE], network_disabled=True, **options
        )
        try:
            try:
                container.start()
            except Exception as exc:
                mapped = explain_docker_gpu_error(exc)
                if mapped is not None:
                    raise mapped from exc
                raise
            container.wait(timeout=timeout_s)
            output = container.logs(stdout=True, stderr=True).decode("utf-8", errors="replace")
        finally:
            with contextlib.suppress(Exception):
                container.remove(force=True)
    finally:
        client.close()
    return parse_probe(output, f"container {image}", vendor)


def _client(url: str) -> Any:
    import docker

    return docker.DockerClient(base_url=url, version="auto", timeout=60)
