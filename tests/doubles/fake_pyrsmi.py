"""A test double of ``pyrsmi.rocml`` (ROCm SMI bindings) at the hardware boundary.

Like the real module it reports per-call failures as -1 / '' and raises on a missing
library; pass it to the AMD probe as ``rsmi=``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class ROCMLError_LibraryNotFound(Exception):
    pass


@dataclass
class FakeAmdGpu:
    name: str = "AMD Instinct MI250X"
    memory_total: int = 64 * 1024**3
    uuid: str = "GPU-5f1a2b3c4d5e6f70"
    unique_id: int = 0x5F1A2B3C4D5E6F70
    memory_used: int = 4 * 1024**3
    utilization: int = 55
    memory_busy: int = 20
    average_power: float = 310.0
    pci_id: int = (0x0A << 8) | (0 << 3) | 0  # bus 0a, device 00, function 0
    gone: bool = False  # every call about it fails (-1), as after a GPU reset


@dataclass
class FakeRocml:
    gpus: list[FakeAmdGpu] = field(default_factory=list)
    library_missing: bool = False
    has_uuid_function: bool = True
    init_calls: int = 0
    shutdown_calls: int = 0

    def smi_initialize(self) -> None:
        if self.library_missing:
            raise ROCMLError_LibraryNotFound("ROCm library not found")
        self.init_calls += 1

    def smi_shutdown(self) -> None:
        self.shutdown_calls += 1

    def smi_get_device_count(self) -> int:
        return len(self.gpus) if self.init_calls > self.shutdown_calls else -1

    def smi_get_device_name(self, dev: int) -> str:
        return "" if self.gpus[dev].gone else self.gpus[dev].name

    def smi_get_device_memory_total(self, dev: int, type: str = "VRAM") -> int:
        return -1 if self.gpus[dev].gone else self.gpus[dev].memory_total

    def smi_get_device_memory_used(self, dev: int, type: str = "VRAM") -> int:
        return -1 if self.gpus[dev].gone else self.gpus[dev].memory_used

    def smi_get_device_utilization(self, dev: int) -> int:
        return -1 if self.gpus[dev].gone else self.gpus[dev].utilization

    def smi_get_device_memory_busy(self, dev: int) -> int:
        return -1 if self.gpus[dev].gone else self.gpus[dev].memory_busy

    def smi_get_device_average_power(self, dev: int) -> float:
        return -1 if self.gpus[dev].gone else self.gpus[dev].average_power

    def smi_get_device_pci_id(self, dev: int) -> int:
        return self.gpus[dev].pci_id

    def smi_get_kernel_version(self) -> str:
        return "6.8.5"

    def smi_get_device_unique_id(self, dev: int) -> int:
        return self.gpus[dev].unique_id

    def __getattr__(self, name: str) -> object:
        # Older pyrsmi releases have no smi_get_device_uuid; model both.
        if name == "smi_get_device_uuid" and self.has_uuid_function:
            return lambda dev, format="roc": self.gpus[dev].uuid
        raise AttributeError(name)
