"""Live NVIDIA samples through NVML, kept initialised between samples.

``NvidiaReader.read()`` costs one ``nvmlDeviceGetCount`` plus the moving values of each GPU
(memory, utilisation, temperature, power, processes). Static facts are read once per
enumeration, and a function a board answers with NotSupported is never asked again. A GPU
that falls off the bus (GpuIsLost) is left out of that sample and the devices are enumerated
again on the next one; a driver that goes away mid-run shuts NVML down and the reader retries
``nvmlInit`` at most every ``retry_s`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.api import GpuProcess, GpuSnapshot
from engine.resources.gpu.base import as_text, bytes_to_mb
from engine.resources.gpu.live import VendorRead, percent, process_name, sorted_processes
from engine.resources.gpu.nvidia import (
    BINDING_MISSING,
    NO_NVIDIA_GPU,
    init_failure_reason,
    is_nvml_error,
    load_nvml,
)

# Errors after which the NVML session is useless: shut down and init again later.
_FATAL = (
    "NVMLError_Uninitialized",
    "NVMLError_DriverNotLoaded",
    "NVMLError_LibRmVersionMismatch",
    "NVMLError_LibraryNotFound",
)


class _Lost(Exception):
    """A GPU stopped answering (GpuIsLost) in the middle of a sample."""


class _Fatal(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _Device:
    index: int
    handle: object
    name: str
    uuid: str
    compute_capability: str | None
    temperature_limit_c: float | None


class NvidiaReader:
    vendor = "nvidia"

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        card_on_bus: bool = False,
        proc_root: Path = Path("/proc"),
        retry_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._module = nvml
        self._module_loaded = nvml is not None
        self.card_on_bus = card_on_bus
        self._proc_root = proc_root
        self._retry_s = retry_s
        self._clock = clock
        self._initialised = False
        self._next_init = 0.0
        self._init_reason: str | None = None
        self._count: int | None = None
        self._devices: list[_Device] = []
        self._unsupported: set[tuple[int, str]] = set()
        self._names: dict[int, str] = {}
        self._driver: str | None = None
        self._cuda: str | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def _nvml(self) -> Any | None:
        if not self._module_loaded:
            self._module = load_nvml()
            self._module_loaded = True
        return self._module

    def _init(self, nvml: Any) -> str | None:
        """Initialise NVML if needed; the reason when it cannot be."""
        if self._initialised:
            return None
        now = self._clock()
        if now < self._next_init:
            return self._init_reason
        try:
            nvml.nvmlInit()
        except Exception as exc:
            if not is_nvml_error(nvml, exc):
                raise
            self._next_init = now + self._retry_s
            self._init_reason = init_failure_reason(nvml, exc, self.card_on_bus)
            return self._init_reason
        self._initialised = True
        self._init_reason = None
        self._count = None
        self._driver = as_text(self._static(nvml, "nvmlSystemGetDriverVersion"), "") or None
        self._cuda = _cuda_version(nvml, self)
        return None

    def close(self) -> None:
        nvml = self._module
        if self._initialised and nvml is not None:
            try:
                nvml.nvmlShutdown()
            except Exception as exc:
                if not is_nvml_error(nvml, exc):
                    raise
        self._initialised = False
        self._devices = []
        self._count = None
        self._unsupported.clear()

    # --- sampling ----------------------------------------------------------------------------

    def read(self) -> VendorRead:
        nvml = self._nvml()
        if nvml is None:
            return VendorRead(reason=BINDING_MISSING if self.card_on_bus else None)
        reason = self._init(nvml)
        if reason is not None:
            return VendorRead(reason=reason)
        try:
            count = self._call(nvml, -1, "nvmlDeviceGetCount")
            if not isinstance(count, int) or count <= 0:
                return VendorRead(reason=NO_NVIDIA_GPU)
            if count != self._count:
                self._enumerate(nvml, count)
            snapshots: list[GpuSnapshot] = []
            lost = False
            for device in self._devices:
                try:
                    snapshots.append(self._sample(nvml, device))
                except _Lost:
                    lost = True
            if lost:
                self._count = None  # enumerate again next time: the bus changed
            self._prune_names(snapshots)
        except _Fatal as fatal:
            self.close()
            self._next_init = self._clock()  # try again on the next sample
            return VendorRead(reason=fatal.reason)
        if not snapshots:
            return VendorRead(reason=f"{count} NVIDIA GPU(s) reported but none could be read")
        return VendorRead(gpus=tuple(snapshots))

    def _enumerate(self, nvml: Any, count: int) -> None:
        self._devices = []
        self._unsupported.clear()
        for index in range(count):
            try:
                handle = self._call(nvml, index, "nvmlDeviceGetHandleByIndex", index)
            except _Lost:
                continue
            if handle is None:
                continue
            cc = self._call(nvml, index, "nvmlDeviceGetCudaComputeCapability", handle)
            threshold = self._call(
                nvml,
                index,
                "nvmlDeviceGetTemperatureThreshold",
                handle,
                getattr(nvml, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1),
            )
            self._devices.append(
                _Device(
                    index=index,
                    handle=handle,
                    name=as_text(
                        self._call(nvml, index, "nvmlDeviceGetName", handle), "NVIDIA GPU"
                    ),
                    uuid=as_text(
                        self._call(nvml, index, "nvmlDeviceGetUUID", handle), f"nvidia:{index}"
                    ),
                    compute_capability=(
                        f"{cc[0]}.{cc[1]}" if isinstance(cc, tuple) and len(cc) == 2 else None
                    ),
                    temperature_limit_c=_number(threshold),
                )
            )
        self._count = count

    def _sample(self, nvml: Any, dev: _Device) -> GpuSnapshot:
        i, h = dev.index, dev.handle
        memory = self._call(nvml, i, "nvmlDeviceGetMemoryInfo", h)
        rates = self._call(nvml, i, "nvmlDeviceGetUtilizationRates", h)
        temperature = self._call(
            nvml, i, "nvmlDeviceGetTemperature", h, getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        )
        power = self._call(nvml, i, "nvmlDeviceGetPowerUsage", h)
        limit = self._call(nvml, i, "nvmlDeviceGetEnforcedPowerLimit", h)
        total = _mb(getattr(memory, "total", None))
        used = _mb(getattr(memory, "used", None))
        free = _mb(getattr(memory, "free", None))
        return GpuSnapshot(
            index=i,
            vendor="nvidia",
            name=dev.name,
            uuid=dev.uuid,
            memory_total_mb=total,
            memory_used_mb=used,
            memory_free_mb=free,
            utilization_gpu=percent(getattr(rates, "gpu", None)),
            utilization_memory=percent(getattr(rates, "memory", None)),
            temperature_c=_number(temperature),
            temperature_limit_c=dev.temperature_limit_c,
            power_draw_w=_milliwatts(power),
            power_limit_w=_milliwatts(limit),
            compute_capability=dev.compute_capability,
            driver_version=self._driver,
            cuda_version=self._cuda,
            processes=self._processes(nvml, dev),
        )

    def _processes(self, nvml: Any, dev: _Device) -> tuple[GpuProcess, ...]:
        found: dict[int, GpuProcess] = {}
        for function in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",
        ):
            for info in self._call(nvml, dev.index, function, dev.handle) or ():
                pid = getattr(info, "pid", None)
                if not isinstance(pid, int) or pid in found:
                    continue
                found[pid] = GpuProcess(
                    pid=pid,
                    name=self._process_name(nvml, pid),
                    used_memory_mb=_mb(getattr(info, "usedGpuMemory", None)),
                )
        return sorted_processes(found)

    def _process_name(self, nvml: Any, pid: int) -> str:
        name = self._names.get(pid)
        if name is None:
            raw = self._static(nvml, "nvmlSystemGetProcessName", pid)
            text = as_text(raw, "")
            # NVML gives the full path of the executable; the table wants its basename.
            name = text.rsplit("/", 1)[-1] if text else process_name(self._proc_root, pid)
            self._names[pid] = name
        return name

    def _prune_names(self, snapshots: list[GpuSnapshot]) -> None:
        if len(self._names) > 256:
            alive = {p.pid for s in snapshots for p in s.processes}
            self._names = {pid: n for pid, n in self._names.items() if pid in alive}

    # --- one NVML call -------------------------------------------------------------------------

    def _call(self, nvml: Any, index: int, function: str, *args: object) -> Any:
        """One NVML call: None for n/a (remembered), _Lost / _Fatal for the sample to act on."""
        key = (index, function)
        if key in self._unsupported:
            return None
        func = getattr(nvml, function, None)
        if func is None:  # an older nvidia-ml-py without this function
            self._unsupported.add(key)
            return None
        try:
            return func(*args)
        except Exception as exc:
            if not is_nvml_error(nvml, exc):
                raise
            if is_nvml_error(nvml, exc, "NVMLError_GpuIsLost"):
                raise _Lost from exc
            if any(is_nvml_error(nvml, exc, name) for name in _FATAL):
                raise _Fatal(init_failure_reason(nvml, exc, self.card_on_bus)) from exc
            if is_nvml_error(nvml, exc, "NVMLError_NotSupported") or is_nvml_error(
                nvml, exc, "NVMLError_FunctionNotFound"
            ):
                self._unsupported.add(key)
            return None  # NoPermission, NotFound, Unknown...: n/a this time

    def _static(self, nvml: Any, function: str, *args: object) -> Any:
        try:
            return self._call(nvml, -1, function, *args)
        except (_Lost, _Fatal):
            return None


def _cuda_version(nvml: Any, reader: NvidiaReader) -> str | None:
    for function in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        value = reader._static(nvml, function)
        if isinstance(value, int) and value > 0:
            return f"{value // 1000}.{(value % 1000) // 10}"
    return None


def _mb(value: object) -> int | None:
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        return None
    if value < 0 or value >= 2**63:
        return None
    return bytes_to_mb(value)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _milliwatts(value: object) -> float | None:
    number = _number(value)
    return round(number / 1000.0, 1) if number is not None and number > 0 else None
