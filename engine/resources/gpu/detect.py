"""Find this machine's GPUs across vendors, and say why when there are none.

``detect_gpus`` is what capacity and onboarding use. Each vendor probe is independent: a
broken AMD stack never hides NVIDIA cards. The reason string is only produced when no GPU at
all was read, because that is when a provider wonders why their card is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.api import GpuInfo
from engine.resources.gpu.amd import DEFAULT_KFD, probe_amd
from engine.resources.gpu.base import DEFAULT_SYSFS_ROOT, DrmCard, ProbeResult, drm_cards
from engine.resources.gpu.intel import probe_intel
from engine.resources.gpu.nvidia import probe_nvidia

NO_GPU = "no GPU found"


def detect_gpus(
    nvml: Any | None = None,
    rsmi: Any | None = None,
    *,
    sysfs_root: Path = DEFAULT_SYSFS_ROOT,
    kfd: Path = DEFAULT_KFD,
) -> tuple[tuple[GpuInfo, ...], str | None]:
    """All GPUs found (NVIDIA, then AMD, then Intel) and, when none, the reason why.

    ``nvml`` / ``rsmi`` replace the ``pynvml`` / ``pyrsmi.rocml`` modules (tests pass
    doubles); ``sysfs_root`` and ``kfd`` relocate the kernel files for the same reason.
    Never raises: a vendor probe that fails unexpectedly becomes part of the reason.
    """
    results = probe_all(nvml, rsmi, sysfs_root=sysfs_root, kfd=kfd)
    gpus = tuple(gpu for result in results for gpu in result.gpus)
    if gpus:
        return gpus, None
    return (), combine_reasons(results)


def probe_all(
    nvml: Any | None = None,
    rsmi: Any | None = None,
    *,
    sysfs_root: Path = DEFAULT_SYSFS_ROOT,
    kfd: Path = DEFAULT_KFD,
) -> list[ProbeResult]:
    """Every vendor's result, in a fixed order; keeps driver versions for later views."""
    cards = _safe_cards(sysfs_root)
    nvidia_on_bus = any(card.vendor == "nvidia" for card in cards)
    return [
        _guard("NVIDIA", lambda: probe_nvidia(nvml, card_on_bus=nvidia_on_bus)),
        _guard("AMD", lambda: probe_amd(rsmi, cards=cards, kfd=kfd)),
        _guard("Intel", lambda: probe_intel(cards=cards)),
    ]


def combine_reasons(results: list[ProbeResult]) -> str:
    """One line from the vendors that had something to say, or plainly "no GPU found"."""
    reasons: list[str] = []
    for result in results:
        if result.reason and result.reason not in reasons:
            reasons.append(result.reason)
    return "; ".join(reasons) if reasons else NO_GPU


def _safe_cards(sysfs_root: Path) -> list[DrmCard]:
    try:
        return drm_cards(sysfs_root)
    except Exception:
        # sysfs only refines messages and finds Intel/AMD cards; detection goes on without it.
        return []


def _guard(vendor: str, probe: Any) -> ProbeResult:
    # Hardware libraries fail in ways their docs do not list (ctypes errors, odd returns);
    # a capacity view with a reason beats a crashed node.
    try:
        result: ProbeResult = probe()
    except Exception as exc:
        return ProbeResult(reason=f"{vendor} GPU probe failed: {type(exc).__name__}: {exc}")
    return result
