"""NuNet's Low / Moderate / High resource tiers, written once, and what they cost.

NuNet's "Fundamental algorithms" document defines ``estimate_resource(resource_usage)``: for
each tier a minimum and maximum CPU, RAM and GPU VRAM plus a GPU power and usage level, and
``Calculate_Static_NTX`` (CPU and GPU variants) turning a tier and an expected time into a
price range. The document gives the structure; its figures are not reproduced in anything we
can check, so the figures below are ours, chosen to match common machines (a Low job fits a
2-core laptop, a High GPU job a 24 GB card) and documented here as the single source: the TUI
shows this table, admission (engine/domain/admission.py) uses the minimums, executors enforce
the maximums. What a provider charges is its own price per tier (admission.units_for).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.errors import EngineError
from oracle_client.ntx import units_of

MHZ_PER_CORE = 2000  # how a tier's MHz figures turn into whole cores for container limits


@dataclass(frozen=True)
class TierResources:
    """What one tier needs (min: to be matched) and may use (max: the enforced limit)."""

    tier: str
    device: str
    min_cpu_mhz: int
    max_cpu_mhz: int
    min_ram_mb: int
    max_ram_mb: int
    min_vram_mb: int = 0
    max_vram_mb: int = 0
    gpu_power_w: tuple[int, int] = (0, 0)  # NuNet's "GPU power level": board power, watts
    gpu_usage_percent: tuple[int, int] = (0, 0)  # NuNet's "GPU usage level"

    @property
    def min_cores(self) -> int:
        return max(1, math.ceil(self.min_cpu_mhz / MHZ_PER_CORE))

    @property
    def max_cores(self) -> int:
        return max(1, math.ceil(self.max_cpu_mhz / MHZ_PER_CORE))


_CPU = {
    "low": (1000, 2000, 1024, 2048),
    "moderate": (2000, 8000, 2048, 8192),
    "high": (8000, 16000, 8192, 16384),
}
_GPU_EXTRA = {  # min/max VRAM MB, GPU power W, GPU usage %
    "low": (2048, 6144, (75, 150), (10, 40)),
    "moderate": (6144, 12288, (150, 250), (40, 70)),
    "high": (12288, 24576, (250, 450), (70, 100)),
}

TABLE: dict[tuple[str, str], TierResources] = {}
for _tier, (_cmin, _cmax, _rmin, _rmax) in _CPU.items():
    TABLE[(_tier, "cpu")] = TierResources(_tier, "cpu", _cmin, _cmax, _rmin, _rmax)
    _vmin, _vmax, _power, _usage = _GPU_EXTRA[_tier]
    TABLE[(_tier, "gpu")] = TierResources(
        _tier, "gpu", _cmin, _cmax, _rmin, _rmax, _vmin, _vmax, _power, _usage
    )

# Calculate_Static_NTX rates, NTX per hour per unit. CPU jobs pay for CPU and RAM; GPU jobs
# also for VRAM and the board's power level (which tracks how big and busy the GPU is).
NTX_PER_GHZ_HOUR = 0.25
NTX_PER_GB_RAM_HOUR = 0.125
NTX_PER_GB_VRAM_HOUR = 0.1
NTX_PER_100W_HOUR = 0.2


def estimate_resource(tier: str, device: str = "cpu") -> TierResources:
    """NuNet's estimate_resource: the tier's min/max resources for ``device``."""
    try:
        return TABLE[(tier.lower(), device.lower())]
    except KeyError:
        raise EngineError(
            "tier", f"unknown tier/device {tier!r}/{device!r}: low, moderate or high; cpu or gpu"
        ) from None


def _hourly(res: TierResources, which: int) -> float:
    cpu = (res.min_cpu_mhz, res.max_cpu_mhz)[which] / 1000
    ram = (res.min_ram_mb, res.max_ram_mb)[which] / 1024
    rate = cpu * NTX_PER_GHZ_HOUR + ram * NTX_PER_GB_RAM_HOUR
    if res.device == "gpu":
        vram = (res.min_vram_mb, res.max_vram_mb)[which] / 1024
        rate += vram * NTX_PER_GB_VRAM_HOUR + res.gpu_power_w[which] / 100 * NTX_PER_100W_HOUR
    return rate


def static_units(tier: str, device: str, expected_minutes: float) -> tuple[int, int]:
    """NuNet's Calculate_Static_NTX (CPU or GPU variant): the (low, high) estimate for a
    job of ``tier`` running ``expected_minutes``, priced at the tier's min and max resources,
    in NTX base units (to the nearest one)."""
    res = estimate_resource(tier, device)
    hours = max(0.0, expected_minutes) / 60
    return units_of(_hourly(res, 0) * hours), units_of(_hourly(res, 1) * hours)
