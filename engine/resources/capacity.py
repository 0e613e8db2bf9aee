"""What this machine is and what it can offer, in NuNet's units (MHz, MB).

Three views: *full* (everything the machine has, or what the operator declared instead),
*available* (full minus what is in use right now) and *onboarded* (what the provider
offered to the network). Detection reads /proc, /etc and the cgroup files directly: it must
stay well under half a second, so there is no CPU sampling and no subprocess.

A process in a container sees the host's cores and RAM through psutil; the cgroup limits
(v1 and v2) say what it may really use, and the lower figure wins.
"""

from __future__ import annotations

import math
import os
import platform
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import psutil

from engine.api import Capacity, GpuInfo, Machine, Onboarding
from engine.config import MachineSettings

_MIB = 1024 * 1024
# cgroup v1 writes "no limit" as a huge page-aligned number; anything this large is no limit.
_UNLIMITED = 1 << 60


@dataclass(frozen=True)
class HostFiles:
    """Where the kernel's files are; tests point these at a fake tree."""

    proc: Path = Path("/proc")
    etc: Path = Path("/etc")
    cgroup: Path = Path("/sys/fs/cgroup")


DEFAULT_HOST = HostFiles()


# --- the machine ------------------------------------------------------------------------


def detect_machine(overrides: MachineSettings, *, host: HostFiles = DEFAULT_HOST) -> Machine:
    """Identify this machine; every declared (non-None) override replaces its probe."""
    cpuinfo = _read(host.proc / "cpuinfo")
    cores = overrides.cpu_cores if overrides.cpu_cores is not None else usable_cores(host)
    mhz = (
        overrides.cpu_mhz_per_core
        if overrides.cpu_mhz_per_core is not None
        else cpu_mhz_per_core(cpuinfo)
    )
    return Machine(
        hostname=overrides.hostname or socket.gethostname() or platform.node() or "localhost",
        os=os_pretty_name(host),
        kernel=_read(host.proc / "sys/kernel/osrelease").strip() or platform.release(),
        arch=_read(host.proc / "sys/kernel/arch").strip() or platform.machine(),
        cpu_model=overrides.cpu_model or cpu_model(cpuinfo),
        cpu_cores=cores,
        cpu_mhz_per_core=mhz,
    )


def os_pretty_name(host: HostFiles = DEFAULT_HOST) -> str:
    for path in (host.etc / "os-release", Path("/usr/lib/os-release")):
        fields = _key_values(_read(path), "=")
        pretty = fields.get("PRETTY_NAME") or fields.get("NAME")
        if pretty:
            return pretty.strip().strip("\"'")
    return f"{platform.system()} {platform.release()}".strip()


def cpu_model(cpuinfo: str) -> str:
    # x86 says "model name"; ARM boards use "Model" or "Hardware".
    fields = _key_values(cpuinfo, ":")
    for key in ("model name", "Model", "Hardware", "cpu model"):
        if fields.get(key):
            return fields[key]
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_mhz_per_core(cpuinfo: str) -> int:
    """Rated clock: the max frequency when the kernel knows it, else the current one."""
    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError, AttributeError):
        freq = None
    if freq is not None:
        for value in (freq.max, freq.current):
            if value and value > 0:
                return round(value)
    mhz = _key_values(cpuinfo, ":").get("cpu MHz", "")
    try:
        return round(float(mhz))
    except ValueError:
        return 0


def usable_cores(host: HostFiles = DEFAULT_HOST) -> int:
    """Cores this process may run on: CPU affinity, further capped by a cgroup CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(host)
    if quota is not None:
        # A quota of 1.5 CPUs lets a job keep two cores partly busy; count whole cores.
        cores = min(cores, max(1, math.ceil(quota)))
    return max(cores, 1)


def cgroup_cpu_quota(host: HostFiles = DEFAULT_HOST) -> float | None:
    """The tightest CPU quota (in CPUs) on our cgroup or an ancestor, None when unlimited."""
    quotas: list[float] = []
    for folder in _cgroup_dirs(host, "cpu"):
        parts = _read(folder / "cpu.max").split()  # v2: "max 100000" or "150000 100000"
        if len(parts) == 2 and parts[0] != "max":
            quotas.append(_ratio(parts[0], parts[1]))
        quota = _read(folder / "cpu.cfs_quota_us")  # v1: -1 means none
        period = _read(folder / "cpu.cfs_period_us")
        if quota and period and not quota.startswith("-"):
            quotas.append(_ratio(quota, period))
    valid = [q for q in quotas if q > 0]
    return min(valid) if valid else None


def cgroup_memory(host: HostFiles = DEFAULT_HOST) -> tuple[int | None, int | None]:
    """(limit, usage) in bytes of the tightest memory cgroup above us; None when unknown."""
    best: tuple[int | None, int | None] = (None, None)
    for folder in _cgroup_dirs(host, "memory"):
        for limit_file, usage_file in (
            ("memory.max", "memory.current"),
            ("memory.limit_in_bytes", "memory.usage_in_bytes"),
        ):
            limit = _int(_read(folder / limit_file))
            if limit is None or limit >= _UNLIMITED:
                continue
            if best[0] is None or limit < best[0]:
                best = (limit, _int(_read(folder / usage_file)))
    return best


# --- the three views --------------------------------------------------------------------


def full_capacity(
    machine: Machine,
    overrides: MachineSettings,
    disk_path: str | os.PathLike[str],
    gpus: tuple[GpuInfo, ...],
    gpu_reason: str | None,
    *,
    host: HostFiles = DEFAULT_HOST,
) -> Capacity:
    """Everything this machine has: RAM within its cgroup, free disk where the node keeps
    its state (NuNet counts free, not total, disk) and every GPU found."""
    cores = overrides.cpu_cores if overrides.cpu_cores is not None else machine.cpu_cores
    mhz = (
        overrides.cpu_mhz_per_core
        if overrides.cpu_mhz_per_core is not None
        else machine.cpu_mhz_per_core
    )
    if overrides.memory_mb is not None:
        memory_mb = overrides.memory_mb
    else:
        total = psutil.virtual_memory().total
        limit, _ = cgroup_memory(host)
        memory_mb = min(total, limit if limit is not None else total) // _MIB
    disk_mb = overrides.disk_mb if overrides.disk_mb is not None else free_disk_mb(disk_path)
    return Capacity(
        view="full",
        cpu_cores=cores,
        cpu_mhz=cores * mhz,
        memory_mb=memory_mb,
        disk_mb=disk_mb,
        gpus=gpus,
        gpu_reason=None if gpus else gpu_reason,
    )


def available_capacity(
    full: Capacity,
    disk_path: str | os.PathLike[str],
    *,
    cpu_mhz_in_use: int = 0,
    host: HostFiles = DEFAULT_HOST,
) -> Capacity:
    """What could be onboarded or given to a new job right now.

    CPU is time-shared, so only what the node has committed to running jobs is taken away;
    the load average is reported beside it for people, not subtracted.
    """
    memory = psutil.virtual_memory()
    available_bytes = memory.available
    limit, usage = cgroup_memory(host)
    if limit is not None and usage is not None:
        available_bytes = min(available_bytes, max(limit - usage, 0))
    cores = max(full.cpu_cores, 1)
    return Capacity(
        view="available",
        cpu_cores=full.cpu_cores,
        cpu_mhz=max(full.cpu_mhz - max(cpu_mhz_in_use, 0), 0),
        memory_mb=min(full.memory_mb, available_bytes // _MIB),
        disk_mb=min(full.disk_mb, free_disk_mb(disk_path)),
        gpus=full.gpus,
        gpu_reason=full.gpu_reason,
        cpu_load_percent=load_percent(cores),
    )


def onboarded_capacity(onboarding: Onboarding | None, full: Capacity) -> Capacity:
    """What the provider offered: zeros when not onboarded."""
    if onboarding is None:
        return Capacity(view="onboarded", cpu_cores=0, cpu_mhz=0, memory_mb=0, disk_mb=0)
    per_core = full.cpu_mhz // full.cpu_cores if full.cpu_cores else 0
    # The offer is in MHz; the cores it spans is what a job's container may be pinned to.
    cores = math.ceil(onboarding.cpu_mhz / per_core) if per_core else 0
    offered = set(onboarding.gpus)
    gpus = tuple(gpu for gpu in full.gpus if gpu.uuid in offered)
    if gpus:
        reason = None
    elif full.gpus:
        reason = "no GPU offered in the onboarding"
    else:
        reason = full.gpu_reason
    return Capacity(
        view="onboarded",
        cpu_cores=min(cores, full.cpu_cores),
        cpu_mhz=onboarding.cpu_mhz,
        memory_mb=onboarding.memory_mb,
        # Disk is not part of NuNet's onboarding: jobs use the free disk of the state dir.
        disk_mb=full.disk_mb,
        gpus=gpus,
        gpu_reason=reason,
    )


def free_disk_mb(path: str | os.PathLike[str]) -> int:
    """Free MB on the filesystem that holds ``path`` (or its nearest existing parent)."""
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return int(psutil.disk_usage(str(folder)).free // _MIB)
    except OSError:
        return 0


def load_percent(cores: int) -> float | None:
    """1-minute load average as a share of the usable cores (can exceed 100)."""
    try:
        one_minute = os.getloadavg()[0]
    except OSError:
        return None
    return round(100.0 * one_minute / max(cores, 1), 1)


# --- file helpers -----------------------------------------------------------------------


def _cgroup_dirs(host: HostFiles, controller: str) -> Iterator[Path]:
    """Our cgroup folder and its ancestors, for v2 and for the v1 ``controller`` hierarchy.

    Limits set on an ancestor bind us too. Inside a container with a cgroup namespace our
    path reads "/" and the mount root is our own cgroup, which the walk also covers.
    """
    seen: set[Path] = set()
    for line in _read(host.proc / "self" / "cgroup").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            bases = [host.cgroup, host.cgroup / "unified"]
        elif controller in controllers.split(","):
            bases = [host.cgroup / controller, host.cgroup / controllers]
        else:
            continue
        relative = PurePosixPath(path).relative_to("/") if path.startswith("/") else None
        for base in bases:
            if relative is None:
                candidates = [base]
            else:
                folder = base / relative
                candidates = [folder, *folder.parents[: len(relative.parts)]]
            for candidate in candidates:
                if candidate not in seen and candidate.is_dir():
                    seen.add(candidate)
                    yield candidate


def _key_values(text: str, separator: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(separator)
        if sep and key.strip() and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return fields


def _ratio(numerator: str, denominator: str) -> float:
    try:
        return int(numerator) / int(denominator)
    except (ValueError, ZeroDivisionError):
        return 0.0


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
