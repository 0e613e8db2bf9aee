"""What every GPU vendor probe shares: its result type and small conversions.

Each vendor module (nvidia, amd, intel) turns its own library or sysfs into ``GpuInfo``
records and, when it read nothing, a reason a person can act on. ``detect`` combines them.
Live snapshots (utilisation, temperature, power) will sit beside detection in the vendor
modules, so the vendor handle (``index``) stays the vendor's own device number.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from engine.api import GpuInfo

Vendor = Literal["nvidia", "amd", "intel"]

# PCI vendor ids as sysfs writes them (/sys/class/drm/cardN/device/vendor).
PCI_VENDOR_IDS: dict[str, Vendor] = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel"}

DEFAULT_SYSFS_ROOT = Path("/sys")

_MIB = 1024 * 1024


@dataclass(frozen=True)
class ProbeResult:
    """What one vendor probe found.

    ``reason`` is None when the vendor does not apply to this machine (its library is not
    installed and no card of that vendor is present), so it adds nothing to the message.
    """

    gpus: tuple[GpuInfo, ...] = ()
    reason: str | None = None
    driver_version: str | None = None


class GpuProbe(Protocol):
    """A vendor probe: cheap, never raises, always releases what it initialised."""

    def __call__(self) -> ProbeResult: ...


def bytes_to_mb(value: object) -> int:
    """Bytes to whole MiB; anything unreadable (None, a NotSupported marker) counts as 0."""
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0
    return max(number, 0) // _MIB


def as_text(value: object, default: str) -> str:
    """Library strings arrive as str or bytes depending on the binding's version."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    text = str(value).strip() if value is not None else ""
    return text or default


@dataclass(frozen=True)
class DrmCard:
    """One /sys/class/drm/cardN entry: the PCI device behind a display/render node."""

    number: int
    vendor: Vendor
    device_id: str
    pci_address: str
    device_dir: Path


def drm_cards(sysfs_root: Path = DEFAULT_SYSFS_ROOT) -> list[DrmCard]:
    """The GPUs the kernel knows about, by PCI vendor, whatever their userspace libraries.

    Connector entries (card0-HDMI-A-1) and render nodes are skipped: only ``card<N>``
    describes a device. Unknown vendors (virtual display adapters) are ignored.
    """
    drm = sysfs_root / "class" / "drm"
    try:
        entries = sorted(drm.iterdir())
    except OSError:
        return []
    cards: list[DrmCard] = []
    seen: set[str] = set()
    for entry in entries:
        suffix = entry.name[4:]
        if not entry.name.startswith("card") or not suffix.isdigit():
            continue
        device_dir = entry / "device"
        vendor_id = _read(device_dir / "vendor").lower()
        vendor = PCI_VENDOR_IDS.get(vendor_id)
        if vendor is None:
            continue
        try:
            pci_address = device_dir.resolve().name
        except OSError:
            pci_address = entry.name
        # One device can back several card nodes (e.g. with simpledrm); count it once.
        if pci_address in seen:
            continue
        seen.add(pci_address)
        device_id = _read(device_dir / "device").lower()
        cards.append(DrmCard(int(suffix), vendor, device_id, pci_address, device_dir))
    cards.sort(key=lambda card: card.number)
    return cards


def read_sysfs_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text, 0)
    except ValueError:
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return ""
