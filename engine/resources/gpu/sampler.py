"""One sample of every GPU, cheaply, again and again: ``GpuSampler``.

The sampler owns one live reader per vendor (NVIDIA through NVML, AMD through ROCm SMI and
sysfs, Intel through sysfs) and keeps their libraries initialised between samples; that is
what makes a 1 Hz refresh cost microseconds instead of an ``nvmlInit`` each time. It is not
thread-safe: one owner (the engine's GPU service) calls it from one worker thread at a time.
``sample_gpus`` is the one-shot form for scripts and tests.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.api import GpuStatus
from engine.resources.gpu.amd import DEFAULT_KFD
from engine.resources.gpu.amd_live import AmdReader
from engine.resources.gpu.base import DEFAULT_SYSFS_ROOT, DrmCard, drm_cards
from engine.resources.gpu.detect import NO_GPU
from engine.resources.gpu.intel_live import IntelReader
from engine.resources.gpu.live import GpuReader, VendorRead
from engine.resources.gpu.nvidia_live import NvidiaReader

log = logging.getLogger("nunet.gpu")

_LABELS = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}


class GpuSampler:
    def __init__(
        self,
        nvml: Any | None = None,
        rsmi: Any | None = None,
        *,
        sysfs_root: Path = DEFAULT_SYSFS_ROOT,
        kfd: Path = DEFAULT_KFD,
        proc_root: Path = Path("/proc"),
        rocm_root: Path | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        cards = _safe_cards(sysfs_root)
        self._readers: list[GpuReader] = [
            NvidiaReader(
                nvml,
                card_on_bus=any(c.vendor == "nvidia" for c in cards),
                proc_root=proc_root,
                clock=monotonic,
            ),
            AmdReader(
                rsmi,
                sysfs_root=sysfs_root,
                kfd=kfd,
                proc_root=proc_root,
                rocm_root=rocm_root,
                clock=monotonic,
            ),
            IntelReader(sysfs_root=sysfs_root, clock=monotonic),
        ]

    def sample(self) -> GpuStatus:
        """Every GPU now (NVIDIA, then AMD, then Intel); never raises."""
        results = [self._guarded(reader) for reader in self._readers]
        gpus = tuple(gpu for result in results for gpu in result.gpus)
        reason = None
        if not gpus:
            reasons: list[str] = []
            for result in results:
                if result.reason and result.reason not in reasons:
                    reasons.append(result.reason)
            reason = "; ".join(reasons) if reasons else NO_GPU
        return GpuStatus(gpus=gpus, reason=reason, at=self._clock())

    def close(self) -> None:
        for reader in self._readers:
            try:
                reader.close()
            except Exception:
                log.exception("closing the %s GPU reader failed", reader.vendor)

    def __enter__(self) -> GpuSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _guarded(reader: GpuReader) -> VendorRead:
        # Hardware libraries fail in ways their docs do not list (ctypes errors, odd
        # returns): one broken vendor must not hide the others or kill the sampler.
        try:
            return reader.read()
        except Exception as exc:
            log.debug("%s GPU read failed", reader.vendor, exc_info=True)
            with contextlib.suppress(Exception):
                reader.close()
            label = _LABELS.get(reader.vendor, reader.vendor)
            return VendorRead(reason=f"{label} GPU read failed: {type(exc).__name__}: {exc}")


def sample_gpus(nvml: Any | None = None, rsmi: Any | None = None, **roots: Any) -> GpuStatus:
    """One sample with a fresh sampler, closed afterwards (scripts, capability checks)."""
    with GpuSampler(nvml, rsmi, **roots) as sampler:
        return sampler.sample()


def _safe_cards(sysfs_root: Path) -> list[DrmCard]:
    try:
        return drm_cards(sysfs_root)
    except Exception:
        return []
