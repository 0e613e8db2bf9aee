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
        return self.gpus[dev].name

    def smi_get_device_memory_total(self, dev: int, type: str = "VRAM") -> int:
        return self.gpus[dev].memory_total

    def smi_get_device_unique_id(self, dev: int) -> int:
        return self.gpus[dev].unique_id

    def __getattr__(self, name: str) -> object:
        # Older pyrsmi releases have no smi_get_device_uuid; model both.
        if name == "smi_get_device_uuid" and self.has_uuid_function:
            return lambda dev, format="roc": self.gpus[dev].uuid
        raise AttributeError(name)
