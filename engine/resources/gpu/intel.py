"""Intel GPUs from sysfs: PCI vendor 0x8086 under /sys/class/drm.

Intel has no NVML-like Python binding we can rely on, so detection reads what the kernel
publishes. Integrated GPUs share system RAM and report no VRAM (0); discrete cards on the
xe/i915 drivers may publish their local memory size, which is used when present.
"""

from __future__ import annotations

from pathlib import Path

from engine.api import GpuInfo
from engine.resources.gpu.base import (
    DEFAULT_SYSFS_ROOT,
    DrmCard,
    ProbeResult,
    bytes_to_mb,
    drm_cards,
    read_sysfs_int,
)

# Files that, depending on driver and kernel version, hold a discrete card's VRAM in bytes.
_VRAM_FILES = ("mem_info_vram_total", "lmem_total_bytes", "tile0/vram0/io_size")


def probe_intel(
    *, cards: list[DrmCard] | None = None, sysfs_root: Path = DEFAULT_SYSFS_ROOT
) -> ProbeResult:
    """The Intel GPUs the kernel has bound a driver to; never raises."""
    found = drm_cards(sysfs_root) if cards is None else cards
    intel = [card for card in found if card.vendor == "intel"]
    gpus: list[GpuInfo] = []
    for index, card in enumerate(intel):
        # A card with no driver bound cannot run anything; don't offer it.
        if not (card.device_dir / "driver").exists():
            continue
        gpus.append(
            GpuInfo(
                index=index,
                vendor="intel",
                name=f"Intel GPU (PCI 8086:{card.device_id.removeprefix('0x')})",
                vram_mb=_vram_mb(card),
                # No UUID in sysfs: the PCI address is stable across reboots for a slot.
                uuid=f"intel-pci:{card.pci_address}",
            )
        )
    if intel and not gpus:
        return ProbeResult(reason="Intel GPU on the PCI bus but no driver (i915/xe) is bound")
    return ProbeResult(gpus=tuple(gpus))


def _vram_mb(card: DrmCard) -> int:
    for name in _VRAM_FILES:
        value = read_sysfs_int(card.device_dir / name)
        if value:
            return bytes_to_mb(value)
    return 0
