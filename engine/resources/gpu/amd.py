"""AMD GPUs: through ``pyrsmi`` (ROCm SMI) when installed, else from amdgpu's sysfs files.

``pyrsmi`` is only touched when the kernel shows an AMD card: its ``smi_initialize`` walks
/opt and starts a subprocess, too slow to pay on every machine. Without ``pyrsmi`` (or without
the ROCm library) the amdgpu driver's own sysfs files still give name, VRAM and a unique id.
"""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Any

from engine.api import GpuInfo
from engine.resources.gpu.base import (
    DEFAULT_SYSFS_ROOT,
    DrmCard,
    ProbeResult,
    as_text,
    bytes_to_mb,
    drm_cards,
    read_sysfs_int,
)

DEFAULT_KFD = Path("/dev/kfd")
NO_AMD_DRIVER = "AMD card on the PCI bus but the amdgpu driver has not bound it"


def load_rocml() -> Any | None:
    """``pyrsmi.rocml``, or None when pyrsmi is not installed."""
    try:
        return importlib.import_module("pyrsmi.rocml")
    except ImportError:
        return None


def probe_amd(
    rsmi: Any | None = None,
    *,
    cards: list[DrmCard] | None = None,
    sysfs_root: Path = DEFAULT_SYSFS_ROOT,
    kfd: Path = DEFAULT_KFD,
) -> ProbeResult:
    """Read the AMD GPUs; None reason when the machine has no AMD card at all.

    /dev/kfd (the ROCm compute device) also counts as a sign of AMD hardware, because
    containers often get the device nodes without the host's /sys/class/drm.
    """
    found = drm_cards(sysfs_root) if cards is None else cards
    amd_cards = [card for card in found if card.vendor == "amd"]
    if not amd_cards and rsmi is None and not kfd.exists():
        return ProbeResult()
    module = rsmi if rsmi is not None else load_rocml()
    smi_reason: str | None = None
    if module is not None:
        result = _probe_rocml(module)
        if result.gpus:
            return result
        smi_reason = result.reason
    fallback = _from_sysfs(amd_cards)
    if fallback:
        return ProbeResult(gpus=fallback)
    if smi_reason is not None:
        return ProbeResult(reason=smi_reason)
    return ProbeResult(reason=NO_AMD_DRIVER if amd_cards else None)


def _probe_rocml(rocml: Any) -> ProbeResult:
    try:
        rocml.smi_initialize()
    except Exception as exc:
        # pyrsmi raises unrelated classes (ROCMLError_*, RuntimeError): name by class.
        kind = type(exc).__name__
        if "LibraryNotFound" in kind:
            return ProbeResult(reason="no ROCm SMI library found (install ROCm or set ROCM_PATH)")
        return ProbeResult(reason=f"ROCm SMI could not start: {exc or kind}")
    try:
        count = _call(rocml, "smi_get_device_count")
        if not isinstance(count, int) or count <= 0:
            return ProbeResult(reason="no AMD GPU found")
        return ProbeResult(gpus=tuple(_rocml_device(rocml, i) for i in range(count)))
    finally:
        # Nothing left to release on our side if shutdown fails; the devices read stay valid.
        with contextlib.suppress(Exception):
            rocml.smi_shutdown()


def _rocml_device(rocml: Any, index: int) -> GpuInfo:
    name = as_text(_call(rocml, "smi_get_device_name", index), "AMD GPU")
    total = _call(rocml, "smi_get_device_memory_total", index)
    uuid = as_text(_call(rocml, "smi_get_device_uuid", index), "")
    if not uuid:
        unique = _call(rocml, "smi_get_device_unique_id", index)
        uuid = f"GPU-{unique:016x}" if isinstance(unique, int) and unique > 0 else f"amd:{index}"
    return GpuInfo(index=index, vendor="amd", name=name, vram_mb=bytes_to_mb(total), uuid=uuid)


def _call(rocml: Any, name: str, *args: object) -> Any:
    """pyrsmi reports failures as -1 / '' or raises; older versions lack some functions."""
    func = getattr(rocml, name, None)
    if func is None:
        return None
    try:
        value = func(*args)
    except Exception:
        return None
    if isinstance(value, int) and value < 0:
        return None
    return value


def _from_sysfs(cards: list[DrmCard]) -> tuple[GpuInfo, ...]:
    gpus: list[GpuInfo] = []
    for index, card in enumerate(cards):
        if not (card.device_dir / "driver").exists():
            continue
        vram = read_sysfs_int(card.device_dir / "mem_info_vram_total")
        product = as_text(_read(card.device_dir / "product_name"), "")
        name = product or f"AMD GPU (PCI 1002:{card.device_id.removeprefix('0x')})"
        unique = _read(card.device_dir / "unique_id")
        uuid = f"GPU-{unique}" if unique else f"amd-pci:{card.pci_address}"
        gpus.append(
            GpuInfo(index=index, vendor="amd", name=name, vram_mb=bytes_to_mb(vram), uuid=uuid)
        )
    return tuple(gpus)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
