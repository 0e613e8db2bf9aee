"""Test doubles at the host boundary: a fixed host file tree, a GPU library, a Docker answer.

Pictures (snapshot tests, README screenshots) must look the same on every machine, but the
engine reads the OS and kernel from /proc and /etc, GPUs through NVML and Docker through its
socket. ``fixed_host(root, ...)`` builds a small, fixed host under ``root`` and returns the
``HostProbes`` that read it with the engine's real code:

- ``HostFiles`` pointing at ``root/proc``, ``root/etc`` and an empty cgroup folder;
- ``detect_gpus``: the real ``detect_gpus`` on ``FakeNvml`` (tests/doubles/fake_pynvml.py);
- ``check_readiness``: the real checks with a fixed ``DockerStatus`` and no container toolkit;
- ``gpu_sampler``: the real ``GpuSampler`` on the same ``FakeNvml`` with a fixed clock.

Only the host is a double: everything the engine does with what it reads is the real thing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from engine.api import GpuInfo, Readiness
from engine.jobs.executors import sandbox
from engine.probes import HostProbes
from engine.resources.capacity import HostFiles
from engine.resources.gpu.detect import detect_gpus
from engine.resources.gpu.sampler import GpuSampler
from engine.resources.readiness import DockerStatus, check_readiness
from tests.doubles.fake_pynvml import (
    NVML_ERROR_LIBRARY_NOT_FOUND,
    FakeGpu,
    FakeNvml,
    FakeProcess,
)

OS_RELEASE = """\
PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
ID=debian
"""
CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7543 32-Core Processor
cpu MHz\t\t: 2800.000

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7543 32-Core Processor
cpu MHz\t\t: 2800.000
"""
NVIDIA_VERSION = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
DOCKER = DockerStatus(
    url="unix:///var/run/docker.sock", reachable=True, server_version="27.3.1", runtimes=("runc",)
)
FIXED_TIME = 1_750_000_000.0  # the GPU sampler's clock: every sample at the same moment

# Two boards of a small rig, one busy, one idle: what the GPU pictures show.
RIG_GPUS = (
    FakeGpu(
        name="NVIDIA GeForce RTX 3090",
        uuid="GPU-3090aaaa-1111-2222-3333-444444444444",
        memory_total=24 * 1024**3,
        memory_used=18_432 * 1024**2,
        utilization_gpu=87,
        utilization_memory=64,
        temperature=84,
        temperature_slowdown=90,
        power_usage_mw=341_000,
        power_limit_mw=350_000,
        processes=[
            FakeProcess(pid=4242, name="/usr/bin/python3", used_memory=17_920 * 1024**2),
            FakeProcess(
                pid=1337, name="/usr/lib/xorg/Xorg", used_memory=212 * 1024**2, graphics=True
            ),
        ],
    ),
    FakeGpu(
        name="NVIDIA GeForce RTX 4070",
        uuid="GPU-4070bbbb-1111-2222-3333-444444444444",
        memory_total=12 * 1024**3,
        memory_used=310 * 1024**2,
        utilization_gpu=3,
        utilization_memory=1,
        temperature=38,
        temperature_slowdown=93,
        power_usage_mw=29_000,
        power_limit_mw=200_000,
        compute_capability=(8, 9),
    ),
)


@dataclass(frozen=True)
class FixedHost:
    """What ``fixed_host`` built: the probes to give the engine and the parts they use."""

    root: Path
    files: HostFiles
    nvml: FakeNvml
    probes: HostProbes


def fixed_host(
    root: Path,
    *,
    gpus: int | tuple[FakeGpu, ...] | list[FakeGpu] = 0,
    docker: DockerStatus = DOCKER,
    nvml: FakeNvml | None = None,
    clock: Callable[[], float] = lambda: FIXED_TIME,
) -> FixedHost:
    """A Debian 12 host under ``root`` with ``gpus`` NVIDIA boards (0: no NVIDIA library).

    ``gpus`` is a count (``FakeNvml.with_gpus``) or the boards themselves; ``nvml`` replaces
    the whole library double (a driver that is not loaded, boards that come and go...).
    """
    proc = root / "proc"
    (proc / "sys/kernel").mkdir(parents=True, exist_ok=True)
    (proc / "cpuinfo").write_text(CPUINFO, encoding="utf-8")
    (proc / "sys/kernel/osrelease").write_text("6.1.0-28\n", encoding="utf-8")
    (proc / "sys/kernel/arch").write_text("x86_64\n", encoding="utf-8")
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/os-release").write_text(OS_RELEASE, encoding="utf-8")
    cgroup = root / "sys/fs/cgroup"
    cgroup.mkdir(parents=True, exist_ok=True)
    sysfs = root / "sys"
    dev = root / "dev"
    dev.mkdir(parents=True, exist_ok=True)

    if nvml is None:
        if isinstance(gpus, int):
            nvml = (
                FakeNvml.with_gpus(gpus)
                if gpus
                else FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
            )
        else:
            nvml = FakeNvml(gpus=list(gpus))
    nvml.record_calls = False  # a sampler runs for as long as a screen is open
    if nvml.gpus and nvml.init_error is None:
        (proc / "driver/nvidia").mkdir(parents=True, exist_ok=True)
        (proc / "driver/nvidia/version").write_text(NVIDIA_VERSION, encoding="utf-8")
        (dev / "nvidiactl").touch()

    files = HostFiles(proc=proc, etc=root / "etc", cgroup=cgroup)
    kfd = dev / "kfd"
    fixed_nvml = nvml

    def detect() -> tuple[tuple[GpuInfo, ...], str | None]:
        return detect_gpus(nvml=fixed_nvml, sysfs_root=sysfs, kfd=kfd)

    def readiness(found: tuple[GpuInfo, ...]) -> Readiness:
        return check_readiness(
            found,
            docker_probe=lambda: docker,
            proc_root=proc,
            dev_root=dev,
            which=lambda _name: None,
            environ={},
            sandbox_probe=sandbox.probe,  # the real one: bubblewrap is this machine's
        )

    sampler = partial(
        GpuSampler, fixed_nvml, sysfs_root=sysfs, kfd=kfd, proc_root=proc, clock=clock
    )
    probes = HostProbes(
        host_files=files, detect_gpus=detect, check_readiness=readiness, gpu_sampler=sampler
    )
    return FixedHost(root=root, files=files, nvml=fixed_nvml, probes=probes)
