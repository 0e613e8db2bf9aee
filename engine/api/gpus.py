"""GPU: live status, doctor, capabilities, ML images (issue 4).

Data and commands of engine/resources/gpu/; handlers in engine/resources/gpu/commands.py.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from engine.api.base import Command, Event, Record

GpuVendor = Literal["nvidia", "amd", "intel"]


class GpuProcess(Record, frozen=True):
    pid: int
    name: str
    used_memory_mb: int | None = None  # None: the driver does not say (n/a)


class GpuSnapshot(Record, frozen=True):
    """One GPU at one moment. Every None is "n/a": the board or driver does not report it."""

    index: int  # the vendor's own device number (NVML index, ROCm SMI index, DRM order)
    vendor: GpuVendor
    name: str
    uuid: str
    memory_total_mb: int | None = None
    memory_used_mb: int | None = None
    memory_free_mb: int | None = None
    utilization_gpu: float | None = None  # percent of time a kernel ran
    utilization_memory: float | None = None  # percent of time memory was read/written
    temperature_c: float | None = None
    temperature_limit_c: float | None = None  # slowdown threshold where the board has one
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    compute_capability: str | None = None  # NVIDIA "8.6"; tensor cores from 7.0
    driver_version: str | None = None
    cuda_version: str | None = None  # the highest CUDA the driver supports, "12.4"
    rocm_version: str | None = None
    processes: tuple[GpuProcess, ...] = ()

    @property
    def memory_percent(self) -> float | None:
        if not self.memory_total_mb or self.memory_used_mb is None:
            return None
        return 100.0 * self.memory_used_mb / self.memory_total_mb


class GpuStatus(Record, frozen=True):
    """One sample of every GPU; ``reason`` says why ``gpus`` is empty (None when read)."""

    gpus: tuple[GpuSnapshot, ...] = ()
    reason: str | None = None
    at: float = 0.0


class GpuHistory(Record, frozen=True):
    """One GPU's recent samples, oldest first, one column per metric (sparkline-ready)."""

    at: tuple[float, ...] = ()
    utilization_gpu: tuple[float | None, ...] = ()
    memory_percent: tuple[float | None, ...] = ()
    temperature_c: tuple[float | None, ...] = ()
    power_w: tuple[float | None, ...] = ()


class GpuStatusReply(Record, frozen=True):
    gpus: tuple[GpuSnapshot, ...] = ()
    reason: str | None = None
    at: float = 0.0
    interval_s: float = 1.0  # how often the engine samples while someone watches
    history: dict[str, GpuHistory] = msgspec.field(default_factory=dict)  # by GPU uuid


class DoctorFinding(Record, frozen=True):
    check: str  # vendor, driver, devices, docker, container_runtime, secure_boot, wsl
    ok: bool
    summary: str
    detail: str = ""
    fix: tuple[str, ...] = ()  # exact shell commands for Debian/Ubuntu, run in order


class DoctorReport(Record, frozen=True):
    vendors: tuple[GpuVendor, ...]
    distro: str
    findings: tuple[DoctorFinding, ...]

    @property
    def ok(self) -> bool:
        return all(finding.ok for finding in self.findings)

    @property
    def fixes(self) -> tuple[str, ...]:
        commands: list[str] = []
        for finding in self.findings:
            for command in finding.fix if not finding.ok else ():
                if command not in commands:
                    commands.append(command)
        return tuple(commands)


class GpuCapability(Record, frozen=True):
    index: int
    vendor: GpuVendor
    name: str
    compute_capability: str | None = None
    tensor_cores: bool | None = None  # None: not known (non-NVIDIA or n/a)


class CapabilitySet(Record, frozen=True):
    """What ML frameworks can use, as seen from one place (the host or a container)."""

    where: str
    cuda: bool = False
    cuda_version: str | None = None
    rocm: bool = False
    rocm_version: str | None = None
    hip: bool = False
    tensor_cores: bool = False
    gpus: tuple[GpuCapability, ...] = ()
    notes: tuple[str, ...] = ()


class CapabilityReport(Record, frozen=True):
    host: CapabilitySet
    container: CapabilitySet | None = None
    container_reason: str | None = None  # why there is no container result


MlImageStatus = Literal["pulled", "present", "failed"]


class MlImageResult(Record, frozen=True):
    key: str  # the [ml_images] name, e.g. "pytorch_nvidia"
    image: str
    status: MlImageStatus
    detail: str = ""


class MlImagesReport(Record, frozen=True):
    results: tuple[MlImageResult, ...] = ()

    @property
    def ok(self) -> bool:
        return all(result.status != "failed" for result in self.results)


class GetGpuStatus(Command, tag="gpu_status", frozen=True):
    """The latest sample (starts the 1 Hz sampler; it stops ~30 s after the last call)."""

    reply = GpuStatusReply
    history: bool = False


class GpuDoctor(Command, tag="gpu_doctor", frozen=True):
    reply = DoctorReport


class GpuCapabilities(Command, tag="gpu_capabilities", frozen=True):
    reply = CapabilityReport
    in_container: bool = False


class PrepareMlImages(Command, tag="prepare_ml_images", frozen=True):
    """Pull the framework images; progress arrives as ImagePullProgress events."""

    reply = MlImagesReport
    images: tuple[str, ...] | None = None  # [ml_images] keys or image refs; None: for this rig


class ImagePullProgress(Event, tag="image_pull_progress", frozen=True):
    """GPU section: one framework image's pull (PrepareMlImages), aggregated over its layers."""

    key: str
    image: str
    status: Literal["waiting", "pulling", "extracting", "done", "present", "failed"]
    percent: float | None = None  # None until the registry has told the layer sizes
    current_bytes: int = 0
    total_bytes: int = 0
    detail: str = ""
