"""The engine's window on the host: files under /proc and /etc, GPU libraries, Docker.

Everything the node learns about the machine goes through one ``HostProbes``, so tests can
point it at a fixed tree or a GPU library double (tests/doubles) where real hardware is
missing or differs from one test machine to the next. Production uses the defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.api import GpuInfo, Readiness
from engine.resources.capacity import DEFAULT_HOST, HostFiles
from engine.resources.gpu.detect import detect_gpus
from engine.resources.gpu.sampler import GpuSampler
from engine.resources.gpu.service import Sampler
from engine.resources.readiness import check_readiness

GpuDetector = Callable[[], tuple[tuple[GpuInfo, ...], str | None]]
ReadinessCheck = Callable[[tuple[GpuInfo, ...]], Readiness]
SamplerFactory = Callable[[], Sampler]


@dataclass(frozen=True)
class HostProbes:
    host_files: HostFiles = DEFAULT_HOST
    detect_gpus: GpuDetector = detect_gpus
    check_readiness: ReadinessCheck = check_readiness
    # Builds the live GPU sampler (NVML and friends) that the GPU service polls at 1 Hz.
    gpu_sampler: SamplerFactory = GpuSampler
