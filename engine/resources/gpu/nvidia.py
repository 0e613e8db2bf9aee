"""NVIDIA GPUs through NVML (the ``pynvml`` module of the nvidia-ml-py package).

``pynvml`` is imported only when asked for, so a machine without it (or without a driver)
costs nothing; tests hand in a double of the module instead. Every ``nvmlInit`` is paired
with ``nvmlShutdown`` because NVML reference-counts initialisations per process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from engine.api import GpuInfo
from engine.resources.gpu.base import ProbeResult, as_text, bytes_to_mb

LIBRARY_MISSING = "no NVIDIA driver library (libnvidia-ml.so) found"
DRIVER_NOT_LOADED = "NVIDIA driver not loaded"
NO_NVIDIA_GPU = "no NVIDIA GPU found"
BINDING_MISSING = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"

_UNNAMED = "NVIDIA GPU"


def load_nvml() -> Any | None:
    """The real ``pynvml`` module, or None when nvidia-ml-py is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def is_nvml_error(nvml: Any, exc: BaseException, name: str = "NVMLError") -> bool:
    """Whether ``exc`` is the module's error class ``name`` (classes differ per module)."""
    cls = getattr(nvml, name, None)
    return isinstance(cls, type) and isinstance(exc, cls)


def init_failure_reason(nvml: Any, exc: BaseException, card_on_bus: bool) -> str:
    """Turn an ``nvmlInit`` failure into what a person should do about it."""
    if is_nvml_error(nvml, exc, "NVMLError_LibraryNotFound"):
        reason = LIBRARY_MISSING
        if card_on_bus:
            reason += " although an NVIDIA card is on the PCI bus: install the NVIDIA driver"
        return reason
    if is_nvml_error(nvml, exc, "NVMLError_DriverNotLoaded"):
        return DRIVER_NOT_LOADED + " (load the nvidia kernel module or reboot after installing)"
    if is_nvml_error(nvml, exc, "NVMLError_NoPermission"):
        return "no permission to open the NVIDIA driver (check /dev/nvidia* permissions)"
    if is_nvml_error(nvml, exc, "NVMLError_LibRmVersionMismatch"):
        return "NVIDIA driver library and kernel module versions differ: reboot or reinstall"
    return f"NVIDIA driver error: {exc}"


def probe_nvidia(nvml: Any | None = None, *, card_on_bus: bool = False) -> ProbeResult:
    """Read every NVIDIA GPU NVML can see; never raises an NVML error.

    ``card_on_bus`` (from sysfs) only sharpens the message when the library is missing.
    """
    module = nvml if nvml is not None else load_nvml()
    if module is None:
        return ProbeResult(reason=BINDING_MISSING if card_on_bus else None)
    try:
        module.nvmlInit()
    except Exception as exc:
        if not is_nvml_error(module, exc):
            raise
        return ProbeResult(reason=init_failure_reason(module, exc, card_on_bus))
    try:
        return _read_devices(module)
    finally:
        try:
            module.nvmlShutdown()
        except Exception as exc:
            # A failed shutdown leaves nothing for us to release; the data read stands.
            if not is_nvml_error(module, exc):
                raise


def _read_devices(nvml: Any) -> ProbeResult:
    driver = _optional(nvml, nvml.nvmlSystemGetDriverVersion)
    driver_version = as_text(driver, "") or None
    count = _optional(nvml, nvml.nvmlDeviceGetCount)
    if not isinstance(count, int) or count <= 0:
        return ProbeResult(reason=NO_NVIDIA_GPU, driver_version=driver_version)
    gpus: list[GpuInfo] = []
    for index in range(count):
        handle = _optional(nvml, nvml.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            # A GPU that fell off the bus (GpuIsLost) or is hidden from us is not offered.
            continue
        gpus.append(read_device(nvml, index, handle))
    if not gpus:
        return ProbeResult(
            reason=f"{count} NVIDIA GPU(s) reported but none could be opened",
            driver_version=driver_version,
        )
    return ProbeResult(gpus=tuple(gpus), driver_version=driver_version)


def read_device(nvml: Any, index: int, handle: object) -> GpuInfo:
    """One device's static facts; unsupported values become defaults."""
    name = as_text(_optional(nvml, nvml.nvmlDeviceGetName, handle), _UNNAMED)
    # Onboarding selects GPUs by UUID, so a board without one still needs a stable key.
    uuid = as_text(_optional(nvml, nvml.nvmlDeviceGetUUID, handle), f"nvidia:{index}")
    memory = _optional(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
    vram_mb = bytes_to_mb(getattr(memory, "total", None))
    return GpuInfo(index=index, vendor="nvidia", name=name, vram_mb=vram_mb, uuid=uuid)


def _optional(nvml: Any, call: Callable[..., Any], *args: object) -> Any:
    """Call NVML; any NVML error (NotSupported, NoPermission, GpuIsLost...) gives None."""
    try:
        return call(*args)
    except Exception as exc:
        if is_nvml_error(nvml, exc):
            return None
        raise
