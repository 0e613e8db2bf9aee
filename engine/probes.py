"""The engine's window on the host: files under /proc and /etc, GPU libraries, Docker.

Everything the node learns about the machine goes through one ``HostProbes``, so tests can
point it at a fixed tree or a GPU library double (tests/doubles) where real hardware is
missing or differs from one test machine to the next. Production uses the defaults.

The probes sit outside the rooms: the readiness checks are the resources room's, and the one
that asks whether the process executor can sandbox its jobs gets the jobs room's own probe here
(``check_host_readiness``), so neither room imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.api import GpuInfo, Readiness
from engine.jobs.executors import sandbox
from engine.resources.capacity import DEFAULT_HOST, HostFiles
from engine.resources.gpu.detect import detect_gpus
from engine.resources.gpu.sampler import GpuSampler
from engine.resources.gpu.service import Sampler
from engine.resources.readiness import check_readiness

GpuDetector = Callable[[], tuple[tuple[GpuInfo, ...], str | None]]
ReadinessCheck = Callable[[tuple[GpuInfo, ...]], Readiness]
SamplerFactory = Callable[[], Sampler]


def check_host_readiness(gpus: tuple[GpuInfo, ...]) -> Readiness:
    """This host's readiness for ``gpus``, the process executor's sandbox included."""
    return check_readiness(gpus, sandbox_probe=sandbox.probe)


@dataclass(frozen=True)
class HostProbes:
    host_files: HostFiles = DEFAULT_HOST
    detect_gpus: GpuDetector = detect_gpus
    check_readiness: ReadinessCheck = check_host_readiness
    # Builds the live GPU sampler (NVML and friends) that the GPU service polls at 1 Hz.
    gpu_sampler: SamplerFactory = GpuSampler
