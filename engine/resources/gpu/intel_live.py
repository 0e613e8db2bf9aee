"""Live Intel samples from sysfs: temperature and power where the driver publishes them.

The i915/xe drivers give no utilisation or per-process memory through sysfs (that needs perf
counters and fdinfo), so those are "n/a". Discrete cards expose hwmon: ``temp1_input``,
``power1_max``/``power1_cap`` and ``energy1_input`` (microjoules), from which power is the
energy difference between two samples.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from engine.api import GpuSnapshot
from engine.resources.gpu.base import DEFAULT_SYSFS_ROOT, DrmCard, drm_cards
from engine.resources.gpu.intel import probe_intel
from engine.resources.gpu.live import (
    VendorRead,
    hwmon_celsius,
    hwmon_dir,
    hwmon_watts,
    read_number,
)


class IntelReader:
    vendor = "intel"

    def __init__(
        self,
        *,
        sysfs_root: Path = DEFAULT_SYSFS_ROOT,
        cards: list[DrmCard] | None = None,
        rescan_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sysfs = sysfs_root
        self._given = cards
        self._rescan_s = rescan_s
        self._clock = clock
        self._scanned_at = 0.0
        self._cards: list[tuple[DrmCard, str, str, int]] | None = None
        self._reason: str | None = None
        self._energy: dict[str, tuple[float, float]] = {}

    def close(self) -> None:
        self._cards = None
        self._energy.clear()

    def _scan(self) -> list[tuple[DrmCard, str, str, int]]:
        now = self._clock()
        if self._cards is not None and now - self._scanned_at < self._rescan_s:
            return self._cards
        self._scanned_at = now
        found = self._given if self._given is not None else drm_cards(self._sysfs)
        intel = [c for c in found if c.vendor == "intel" and (c.device_dir / "driver").exists()]
        probe = probe_intel(cards=found)
        self._reason = probe.reason
        by_uuid = {gpu.uuid: gpu for gpu in probe.gpus}
        cards = []
        for card in intel:
            uuid = f"intel-pci:{card.pci_address}"
            info = by_uuid.get(uuid)
            if info is not None:
                cards.append((card, info.name, uuid, info.vram_mb))
        self._cards = cards
        return cards

    def read(self) -> VendorRead:
        cards = self._scan()
        if not cards:
            return VendorRead(reason=self._reason)
        gpus: list[GpuSnapshot] = []
        for index, (card, name, uuid, vram_mb) in enumerate(cards):
            if not card.device_dir.exists():
                self._cards = None
                continue
            hwmon = hwmon_dir(card.device_dir)
            gpus.append(
                GpuSnapshot(
                    index=index,
                    vendor="intel",
                    name=name,
                    uuid=uuid,
                    memory_total_mb=vram_mb or None,
                    temperature_c=hwmon_celsius(hwmon, "temp1_input"),
                    temperature_limit_c=hwmon_celsius(hwmon, "temp1_crit"),
                    power_draw_w=self._power(uuid, hwmon),
                    power_limit_w=hwmon_watts(hwmon, "power1_max", "power1_cap"),
                )
            )
        return VendorRead(gpus=tuple(gpus))

    def _power(self, uuid: str, hwmon: Path | None) -> float | None:
        direct = hwmon_watts(hwmon, "power1_input", "power1_average")
        if direct is not None or hwmon is None:
            return direct
        energy = read_number(hwmon / "energy1_input")
        if energy is None:
            return None
        now = self._clock()
        previous = self._energy.get(uuid)
        self._energy[uuid] = (now, energy)
        if previous is None or now <= previous[0] or energy < previous[1]:
            return None  # first sample, or the counter wrapped
        return round((energy - previous[1]) / 1_000_000.0 / (now - previous[0]), 1)
