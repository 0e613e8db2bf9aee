"""A test double of the ``pynvml`` module (nvidia-ml-py) at the hardware boundary.

It mirrors the real module's shape: module-level functions, ``NVMLError`` whose ``__new__``
maps an error code to its subclass, and the subclasses the engine tells apart. Build one with
``FakeNvml.with_gpus(n)`` or a list of ``FakeGpu``; it records init/shutdown calls so tests can
check the pairing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999


class NVMLError(Exception):
    _by_value: ClassVar[dict[int, type[NVMLError]]] = {}
    _text: ClassVar[dict[int, str]] = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._by_value.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return self._text.get(self.value, f"NVML Error with code {self.value}")


def _subclass(name: str, value: int) -> type[NVMLError]:
    cls = type(name, (NVMLError,), {})
    NVMLError._by_value[value] = cls
    return cls


NVMLError_Uninitialized = _subclass("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _subclass("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _subclass("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _subclass("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_NotFound = _subclass("NVMLError_NotFound", NVML_ERROR_NOT_FOUND)
NVMLError_DriverNotLoaded = _subclass("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibraryNotFound = _subclass("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_GpuIsLost = _subclass("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_LibRmVersionMismatch = _subclass(
    "NVMLError_LibRmVersionMismatch", NVML_ERROR_LIB_RM_VERSION_MISMATCH
)
NVMLError_Unknown = _subclass("NVMLError_Unknown", NVML_ERROR_UNKNOWN)


@dataclass(frozen=True)
class c_nvmlMemory_t:
    total: int
    free: int
    used: int


NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1


@dataclass(frozen=True)
class c_nvmlUtilization_t:
    gpu: int
    memory: int


@dataclass(frozen=True)
class FakeProcessInfo:
    """What nvmlDeviceGet*RunningProcesses returns per process (usedGpuMemory may be None)."""

    pid: int
    usedGpuMemory: int | None


@dataclass
class FakeProcess:
    pid: int
    name: str  # the full path, as NVML reports it
    used_memory: int | None = 1024 * 1024**2
    graphics: bool = False


@dataclass
class FakeGpu:
    name: str = "NVIDIA GeForce RTX 3090"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    memory_total: int = 24 * 1024**3
    memory_used: int = 512 * 1024**2
    utilization_gpu: int = 37
    utilization_memory: int = 12
    temperature: int = 61
    temperature_slowdown: int = 90
    power_usage_mw: int = 215_000
    power_limit_mw: int = 350_000
    compute_capability: tuple[int, int] = (8, 6)
    processes: list[FakeProcess] = field(default_factory=list)
    # Function names (e.g. "nvmlDeviceGetUUID") this board answers with NotSupported.
    not_supported: frozenset[str] = frozenset()
    lost: bool = False  # every call about this board raises GpuIsLost


@dataclass(frozen=True)
class _Handle:
    index: int


@dataclass
class FakeNvml:
    """Stands in for the ``pynvml`` module object; pass it as ``nvml=``."""

    gpus: list[FakeGpu] = field(default_factory=list)
    init_error: int | None = None  # an NVML_ERROR_* code nvmlInit raises
    driver_version: str = "550.54.15"
    cuda_driver_version: int = 12040
    # An NVML_ERROR_* code every call raises once set: the driver going away mid-run.
    fail_all: int | None = None
    record_calls: bool = True  # off in benchmarks: the list would grow forever
    init_calls: int = 0
    shutdown_calls: int = 0
    calls: list[str] = field(default_factory=list)

    # The error classes, reachable as attributes exactly like on the real module.
    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_LibRmVersionMismatch = NVMLError_LibRmVersionMismatch
    NVMLError_Unknown = NVMLError_Unknown
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = NVML_TEMPERATURE_THRESHOLD_SLOWDOWN

    @classmethod
    def with_gpus(cls, count: int, **kwargs: Any) -> FakeNvml:
        """``count`` distinct boards: 0, 1 and 8 are the shapes the tests care about."""
        gpus = [
            FakeGpu(
                name="NVIDIA A100-SXM4-80GB" if count > 1 else "NVIDIA GeForce RTX 3090",
                uuid=f"GPU-{i:08x}-1111-2222-3333-444444444444",
                memory_total=(80 if count > 1 else 24) * 1024**3,
            )
            for i in range(count)
        ]
        return cls(gpus=gpus, **kwargs)

    @property
    def initialised(self) -> int:
        return self.init_calls - self.shutdown_calls

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.fail_all is not None:
            raise NVMLError(self.fail_all)
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        if self.initialised <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._require_init()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        return len(self.gpus)

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._require_init()
        return self.cuda_driver_version

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._require_init()
        for gpu in self.gpus:
            for proc in gpu.processes:
                if proc.pid == pid:
                    return proc.name
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._require_init()
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return _Handle(index)

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> c_nvmlMemory_t:
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        used = min(gpu.memory_used, gpu.memory_total)
        return c_nvmlMemory_t(total=gpu.memory_total, free=gpu.memory_total - used, used=used)

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> c_nvmlUtilization_t:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        return c_nvmlUtilization_t(gpu=gpu.utilization_gpu, memory=gpu.utilization_memory)

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        assert sensor == NVML_TEMPERATURE_GPU
        return self._gpu(handle, "nvmlDeviceGetTemperature").temperature

    def nvmlDeviceGetTemperatureThreshold(self, handle: _Handle, threshold: int) -> int:
        assert threshold == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return self._gpu(handle, "nvmlDeviceGetTemperatureThreshold").temperature_slowdown

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_usage_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        return self._gpu(handle, "nvmlDeviceGetCudaComputeCapability").compute_capability

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[FakeProcessInfo]:
        gpu = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [FakeProcessInfo(p.pid, p.used_memory) for p in gpu.processes if not p.graphics]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: _Handle) -> list[FakeProcessInfo]:
        gpu = self._gpu(handle, "nvmlDeviceGetGraphicsRunningProcesses")
        return [FakeProcessInfo(p.pid, p.used_memory) for p in gpu.processes if p.graphics]

    def _gpu(self, handle: _Handle, function: str) -> FakeGpu:
        self._require_init()
        if self.record_calls:
            self.calls.append(function)
        if not 0 <= handle.index < len(self.gpus) or self.gpus[handle.index].lost:
            # A board pulled off the bus: its old handle answers GpuIsLost.
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        gpu = self.gpus[handle.index]
        if function in gpu.not_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _require_init(self) -> None:
        if self.fail_all is not None:
            raise NVMLError(self.fail_all)
        if self.initialised <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
