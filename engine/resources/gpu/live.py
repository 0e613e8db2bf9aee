"""What the live GPU readers share: their result, sysfs hwmon and /proc helpers.

A reader (one per vendor) is a long-lived object: it initialises its library once, caches
what never changes (name, UUID, compute capability, thresholds) and what a board does not
support, and on each ``read()`` asks only for the values that move. It never raises: a value
the board cannot give is None ("n/a"), a failure of the whole vendor is a reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from engine.api import GpuProcess, GpuSnapshot


@dataclass(frozen=True)
class VendorRead:
    gpus: tuple[GpuSnapshot, ...] = ()
    reason: str | None = None  # None with no GPUs: the vendor does not apply to this machine


class GpuReader(Protocol):
    vendor: str

    def read(self) -> VendorRead: ...

    def close(self) -> None: ...


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def read_number(path: Path) -> float | None:
    text = read_text(path)
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def hwmon_dir(device_dir: Path) -> Path | None:
    """The device's first hwmon folder (device/hwmon/hwmonN), where temps and power live."""
    try:
        found = sorted((device_dir / "hwmon").glob("hwmon*"))
    except OSError:
        return None
    return found[0] if found else None


def hwmon_celsius(hwmon: Path | None, name: str) -> float | None:
    """hwmon temperatures are millidegrees Celsius."""
    value = read_number(hwmon / name) if hwmon is not None else None
    return round(value / 1000.0, 1) if value is not None else None


def hwmon_watts(hwmon: Path | None, *names: str) -> float | None:
    """hwmon power values are microwatts; the first readable file of ``names`` wins."""
    if hwmon is None:
        return None
    for name in names:
        value = read_number(hwmon / name)
        if value is not None and value > 0:
            return round(value / 1_000_000.0, 1)
    return None


def percent(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value < 0 or value > 100:
        return None  # -1 (failure) or a sentinel such as 0xFFFFFFFF
    return float(value)


def process_name(proc_root: Path, pid: int) -> str:
    """The short command name of ``pid`` (/proc/PID/comm), or "?" when gone or hidden."""
    return read_text(proc_root / str(pid) / "comm") or "?"


def sorted_processes(processes: dict[int, GpuProcess]) -> tuple[GpuProcess, ...]:
    """Biggest GPU memory users first, then by pid: the order nvitop shows."""
    return tuple(sorted(processes.values(), key=lambda p: (-(p.used_memory_mb or 0), p.pid)))
