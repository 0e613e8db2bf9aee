"""Live AMD samples: ROCm SMI (``pyrsmi``) when it works, amdgpu's sysfs files always.

pyrsmi's ``smi_initialize`` is slow (it walks /opt and runs a subprocess), so it is called
once and kept. It has no temperature or power cap: those come from the card's hwmon folder
(``temp1_input``, ``temp1_crit``, ``power1_average``, ``power1_cap``). Without pyrsmi (or
without ROCm) the amdgpu driver's own files give utilisation and VRAM too. Per-process VRAM
comes from the KFD (``/sys/class/kfd/kfd/proc/<pid>/vram_<gpu_id>``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.api import GpuProcess, GpuSnapshot
from engine.resources.gpu.amd import DEFAULT_KFD, NO_AMD_DRIVER, load_rocml
from engine.resources.gpu.base import DEFAULT_SYSFS_ROOT, DrmCard, as_text, drm_cards
from engine.resources.gpu.live import (
    VendorRead,
    hwmon_celsius,
    hwmon_dir,
    hwmon_watts,
    percent,
    process_name,
    read_number,
    read_text,
    sorted_processes,
)

_MIB = 1024 * 1024


def rocm_version(rocm_root: Path) -> str | None:
    """ROCm's version from ``$ROCM_PATH/.info/version`` ("6.2.0-66" -> "6.2.0")."""
    text = read_text(rocm_root / ".info" / "version")
    return text.split("-", 1)[0] if text else None


def default_rocm_root() -> Path:
    return Path(os.environ.get("ROCM_PATH") or "/opt/rocm")


@dataclass
class _Card:
    index: int
    card: DrmCard | None
    smi_index: int | None
    name: str
    uuid: str
    render_minor: int | None


class AmdReader:
    vendor = "amd"

    def __init__(
        self,
        rsmi: Any | None = None,
        *,
        sysfs_root: Path = DEFAULT_SYSFS_ROOT,
        kfd: Path = DEFAULT_KFD,
        proc_root: Path = Path("/proc"),
        rocm_root: Path | None = None,
        cards: list[DrmCard] | None = None,
        rescan_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rsmi = rsmi
        self._sysfs = sysfs_root
        self._kfd = kfd
        self._proc = proc_root
        self._rocm_root = rocm_root if rocm_root is not None else default_rocm_root()
        self._given_cards = cards
        self._rescan_s = rescan_s
        self._clock = clock
        self._smi: Any | None = None
        self._smi_reason: str | None = None
        self._smi_tried = False
        self._cards: list[_Card] | None = None
        self._scanned_at = 0.0
        self._rocm: str | None = None
        self._driver: str | None = None
        self._unbound = False

    def close(self) -> None:
        if self._smi is not None:
            with contextlib.suppress(Exception):
                self._smi.smi_shutdown()
        self._smi = None
        self._smi_tried = False
        self._cards = None

    # --- discovery ---------------------------------------------------------------------------

    def _start_smi(self) -> None:
        if self._smi_tried:
            return
        self._smi_tried = True
        module = self._rsmi if self._rsmi is not None else load_rocml()
        if module is None:
            return
        try:
            module.smi_initialize()
        except Exception as exc:
            kind = type(exc).__name__
            self._smi_reason = (
                "no ROCm SMI library found (install ROCm or set ROCM_PATH)"
                if "LibraryNotFound" in kind
                else f"ROCm SMI could not start: {exc or kind}"
            )
            return
        self._smi = module

    def _scan(self) -> list[_Card]:
        now = self._clock()
        if self._cards is not None and now - self._scanned_at < self._rescan_s:
            return self._cards
        self._scanned_at = now
        found = self._given_cards if self._given_cards is not None else drm_cards(self._sysfs)
        on_bus = [c for c in found if c.vendor == "amd"]
        amd = [c for c in on_bus if (c.device_dir / "driver").exists()]
        self._unbound = bool(on_bus) and not amd
        if not amd and self._rsmi is None and not self._kfd.exists():
            self._cards = []
            return []
        self._start_smi()
        self._rocm = rocm_version(self._rocm_root)
        self._driver = read_text(self._sysfs / "module" / "amdgpu" / "version") or (
            as_text(_smi(self._smi, "smi_get_kernel_version"), "") or None
        )
        cards: list[_Card] = []
        count = _smi(self._smi, "smi_get_device_count")
        if isinstance(count, int) and count > 0:
            by_bdf = {_bdf_key(c.pci_address): c for c in amd}
            for i in range(count):
                card = by_bdf.get(_bdf_from_id(_smi(self._smi, "smi_get_device_pci_id", i)))
                if card is None and len(amd) == count:
                    card = amd[i]  # same count, same order: the kernel's numbering
                cards.append(self._describe(i, card, i))
        else:
            cards = [self._describe(i, card, None) for i, card in enumerate(amd)]
        self._cards = cards
        return cards

    def _describe(self, index: int, card: DrmCard | None, smi_index: int | None) -> _Card:
        dev = card.device_dir if card else None
        name = (
            as_text(_smi(self._smi, "smi_get_device_name", smi_index), "")
            if smi_index is not None
            else ""
        )
        if not name and dev is not None:
            name = read_text(dev / "product_name") or ""
        if not name:
            name = f"AMD GPU (PCI 1002:{card.device_id.removeprefix('0x')})" if card else "AMD GPU"
        uuid = (
            as_text(_smi(self._smi, "smi_get_device_uuid", smi_index), "")
            if smi_index is not None
            else ""
        )
        if not uuid and dev is not None:
            unique = read_text(dev / "unique_id")
            uuid = f"GPU-{unique}" if unique else f"amd-pci:{card.pci_address if card else index}"
        return _Card(index, card, smi_index, name, uuid or f"amd:{index}", _render_minor(dev))

    # --- sampling ----------------------------------------------------------------------------

    def read(self) -> VendorRead:
        cards = self._scan()
        if not cards:
            if self._smi_reason:
                return VendorRead(reason=self._smi_reason)
            return VendorRead(reason=NO_AMD_DRIVER if self._unbound else None)
        processes = _kfd_processes(self._sysfs, self._proc)
        gpus = [self._sample(card, processes) for card in cards]
        alive = [g for g in gpus if g is not None]
        if len(alive) < len(gpus):
            self._cards = None  # a card went away: scan again next time
        if not alive:
            return VendorRead(reason="the AMD GPU(s) stopped answering")
        return VendorRead(gpus=tuple(alive))

    def _sample(
        self, card: _Card, processes: dict[int, dict[int, GpuProcess]]
    ) -> GpuSnapshot | None:
        dev = card.card.device_dir if card.card else None
        if dev is not None and not dev.exists():
            return None
        i = card.smi_index
        smi = self._smi if i is not None else None
        total = _bytes_mb(_smi(smi, "smi_get_device_memory_total", i))
        used = _bytes_mb(_smi(smi, "smi_get_device_memory_used", i))
        util = percent(_smi(smi, "smi_get_device_utilization", i))
        mem_busy = percent(_smi(smi, "smi_get_device_memory_busy", i))
        power = _smi(smi, "smi_get_device_average_power", i)
        if dev is None and total is None and used is None and util is None:
            return None  # only ROCm SMI knew this GPU, and it no longer answers for it
        hwmon = hwmon_dir(dev) if dev is not None else None
        if dev is not None:
            total = (
                total if total is not None else _bytes_mb(read_number(dev / "mem_info_vram_total"))
            )
            used = used if used is not None else _bytes_mb(read_number(dev / "mem_info_vram_used"))
            util = util if util is not None else percent(read_number(dev / "gpu_busy_percent"))
            if mem_busy is None:
                mem_busy = percent(read_number(dev / "mem_busy_percent"))
        power_w = (
            round(float(power), 1)
            if isinstance(power, int | float) and not isinstance(power, bool) and power > 0
            else hwmon_watts(hwmon, "power1_average", "power1_input")
        )
        return GpuSnapshot(
            index=card.index,
            vendor="amd",
            name=card.name,
            uuid=card.uuid,
            memory_total_mb=total,
            memory_used_mb=used,
            memory_free_mb=total - used if total is not None and used is not None else None,
            utilization_gpu=util,
            utilization_memory=mem_busy,
            temperature_c=hwmon_celsius(hwmon, "temp1_input"),
            temperature_limit_c=hwmon_celsius(hwmon, "temp1_crit"),
            power_draw_w=power_w,
            power_limit_w=hwmon_watts(hwmon, "power1_cap"),
            driver_version=self._driver,
            rocm_version=self._rocm,
            processes=sorted_processes(processes.get(card.render_minor or -1, {})),
        )


def _smi(module: Any | None, name: str, *args: object) -> Any:
    """pyrsmi reports failures as -1 / '' or raises; older versions lack some functions."""
    if module is None or any(a is None for a in args):
        return None
    func = getattr(module, name, None)
    if func is None:
        return None
    try:
        value = func(*args)
    except Exception:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        return None
    if value == "":
        return None
    return value


def _bytes_mb(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return int(value) // _MIB


def _bdf_key(pci_address: str) -> tuple[int, int, int] | None:
    """'0000:0a:00.0' -> (bus, device, function); the domain is left out on purpose."""
    try:
        _, bus, rest = pci_address.split(":")
        device, function = rest.split(".")
        return int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return None


def _bdf_from_id(value: object) -> tuple[int, int, int] | None:
    # ROCm SMI packs BDF as ...domain | bus << 8 | device << 3 | function (domain's shift
    # differs between rocm-smi and amdsmi, so only the low 16 bits are used).
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return None
    return (value >> 8) & 0xFF, (value >> 3) & 0x1F, value & 0x7


def _render_minor(device_dir: Path | None) -> int | None:
    if device_dir is None:
        return None
    try:
        for entry in (device_dir / "drm").iterdir():
            if entry.name.startswith("renderD") and entry.name[7:].isdigit():
                return int(entry.name[7:])
    except OSError:
        pass
    return None


def _kfd_processes(sysfs_root: Path, proc_root: Path) -> dict[int, dict[int, GpuProcess]]:
    """Per render minor, the processes holding VRAM on that GPU (KFD's sysfs accounting)."""
    kfd = sysfs_root / "class" / "kfd" / "kfd"
    minor_of: dict[str, int] = {}
    try:
        nodes = list((kfd / "topology" / "nodes").iterdir())
    except OSError:
        return {}
    for node in nodes:
        gpu_id = read_text(node / "gpu_id")
        props = read_text(node / "properties") or ""
        for line in props.splitlines():
            key, _, value = line.partition(" ")
            if key == "drm_render_minor" and gpu_id and gpu_id != "0" and value.strip().isdigit():
                minor_of[gpu_id] = int(value)
    result: dict[int, dict[int, GpuProcess]] = {}
    try:
        procs = list((kfd / "proc").iterdir())
    except OSError:
        return {}
    for proc in procs:
        if not proc.name.isdigit():
            continue
        pid = int(proc.name)
        try:
            files = list(proc.glob("vram_*"))
        except OSError:
            continue
        for vram in files:
            minor = minor_of.get(vram.name[5:])
            used = read_number(vram)
            if minor is None:
                continue
            result.setdefault(minor, {})[pid] = GpuProcess(
                pid=pid,
                name=process_name(proc_root, pid),
                used_memory_mb=int(used) // _MIB if used is not None else None,
            )
    return result
