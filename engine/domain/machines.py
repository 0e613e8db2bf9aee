"""The least a machine of each kind must offer to be onboarded (NuNet's minimums): the rule the
onboarding checks (engine/onboarding.py) and the form's placeholders (the TUI) share.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Minimums:
    """The least a machine of one kind must offer; the jobs tiers extend this table."""

    label: str
    cpu_mhz: int
    memory_mb: int
    disk_mb: int
    vram_mb_per_gpu: int = 0


CPU_ONLY = Minimums("a CPU-only machine", cpu_mhz=2_000, memory_mb=4_096, disk_mb=10_240)
GPU_MACHINE = Minimums(
    "a GPU machine", cpu_mhz=3_000, memory_mb=8_192, disk_mb=51_200, vram_mb_per_gpu=4_096
)
MACHINE_MINIMUMS: dict[str, Minimums] = {"cpu": CPU_ONLY, "gpu": GPU_MACHINE}
