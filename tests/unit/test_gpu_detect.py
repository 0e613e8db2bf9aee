"""GPU detection: NVML through the pynvml double, AMD/Intel through a built sysfs tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.resources.gpu import nvidia
from engine.resources.gpu.amd import probe_amd
from engine.resources.gpu.base import ProbeResult, as_text, bytes_to_mb, drm_cards
from engine.resources.gpu.detect import NO_GPU, combine_reasons, detect_gpus
from engine.resources.gpu.intel import probe_intel
from tests.doubles.fake_pynvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    FakeGpu,
    FakeNvml,
)
from tests.doubles.fake_pyrsmi import FakeAmdGpu, FakeRocml


@pytest.fixture
def bare(tmp_path: Path) -> dict[str, Path]:
    """No sysfs GPUs and no /dev/kfd: only what the injected modules report counts."""
    return {"sysfs_root": tmp_path / "sys", "kfd": tmp_path / "dev" / "kfd"}


def add_card(
    sysfs: Path,
    number: int,
    vendor: str,
    device: str,
    pci: str,
    *,
    driver: bool = True,
    files: dict[str, str] | None = None,
) -> None:
    """A /sys/class/drm/cardN entry linked to its PCI device folder, as the kernel lays it out."""
    pci_dir = sysfs / "devices" / "pci0000:00" / pci
    pci_dir.mkdir(parents=True, exist_ok=True)
    (pci_dir / "vendor").write_text(vendor + "\n")
    (pci_dir / "device").write_text(device + "\n")
    if driver:
        (pci_dir / "driver").mkdir(exist_ok=True)
    for name, text in (files or {}).items():
        (pci_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (pci_dir / name).write_text(text)
    card = sysfs / "class" / "drm" / f"card{number}"
    card.mkdir(parents=True)
    os.symlink(pci_dir, card / "device")
    # Connectors and render nodes sit beside cards and must not count as GPUs.
    connector = sysfs / "class" / "drm" / f"card{number}-HDMI-A-1"
    connector.mkdir()
    os.symlink(pci_dir, connector / "device")


# --- NVIDIA ------------------------------------------------------------------------------


def test_no_nvidia_gpu_reports_why_and_shuts_down(bare: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(0)
    gpus, reason = detect_gpus(nvml, **bare)
    assert gpus == ()
    assert reason == nvidia.NO_NVIDIA_GPU
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)


def test_one_gpu_is_read_in_full(bare: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(1)
    gpus, reason = detect_gpus(nvml, **bare)
    assert reason is None
    assert len(gpus) == 1
    gpu = gpus[0]
    assert (gpu.index, gpu.vendor, gpu.name) == (0, "nvidia", "NVIDIA GeForce RTX 3090")
    assert gpu.vram_mb == 24 * 1024
    assert gpu.uuid == "GPU-00000000-1111-2222-3333-444444444444"
    assert nvml.initialised == 0


def test_eight_gpus_keep_their_order_and_identities(bare: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(8)
    gpus, reason = detect_gpus(nvml, **bare)
    assert reason is None
    assert [g.index for g in gpus] == list(range(8))
    assert len({g.uuid for g in gpus}) == 8
    assert all(g.vram_mb == 80 * 1024 for g in gpus)
    assert nvml.initialised == 0


def test_not_supported_values_become_defaults(bare: dict[str, Path]) -> None:
    board = FakeGpu(
        not_supported=frozenset(
            {"nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo"}
        )
    )
    nvml = FakeNvml(gpus=[FakeGpu(uuid="GPU-a"), board])
    gpus, reason = detect_gpus(nvml, **bare)
    assert reason is None
    assert gpus[1].name == "NVIDIA GPU"
    assert gpus[1].vram_mb == 0
    # Onboarding selects by UUID, so the fallback must be present and distinct.
    assert gpus[1].uuid == "nvidia:1"
    assert gpus[0].uuid == "GPU-a"
    assert nvml.initialised == 0


def test_a_lost_gpu_is_left_out(bare: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(8)
    nvml.gpus[3].lost = True
    gpus, _ = detect_gpus(nvml, **bare)
    assert [g.index for g in gpus] == [0, 1, 2, 4, 5, 6, 7]


def test_all_gpus_lost_says_so(bare: dict[str, Path]) -> None:
    nvml = FakeNvml(gpus=[FakeGpu(lost=True)])
    gpus, reason = detect_gpus(nvml, **bare)
    assert gpus == ()
    assert reason == "1 NVIDIA GPU(s) reported but none could be opened"


def test_driver_not_loaded(bare: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(1, init_error=NVML_ERROR_DRIVER_NOT_LOADED)
    gpus, reason = detect_gpus(nvml, **bare)
    assert gpus == ()
    assert reason is not None and reason.startswith("NVIDIA driver not loaded")
    # Init failed, so there is nothing to shut down.
    assert "nvmlShutdown" not in nvml.calls


def test_library_missing(bare: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(1, init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    assert detect_gpus(nvml, **bare) == ((), "no NVIDIA driver library (libnvidia-ml.so) found")


def test_library_missing_with_a_card_on_the_bus_says_install_the_driver(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    add_card(sysfs, 0, "0x10de", "0x2204", "0000:01:00.0", driver=False)
    nvml = FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    _, reason = detect_gpus(nvml, sysfs_root=sysfs, kfd=tmp_path / "kfd")
    assert reason is not None
    assert reason.startswith(nvidia.LIBRARY_MISSING)
    assert "install the NVIDIA driver" in reason


def test_permission_error_has_its_own_advice(bare: dict[str, Path]) -> None:
    nvml = FakeNvml(init_error=NVML_ERROR_NO_PERMISSION)
    _, reason = detect_gpus(nvml, **bare)
    assert reason is not None and "/dev/nvidia*" in reason


def test_an_unexpected_failure_still_shuts_nvml_down(bare: dict[str, Path]) -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise RuntimeError("ctypes went wrong")

    nvml = Broken()
    gpus, reason = detect_gpus(nvml, **bare)
    assert gpus == ()
    assert reason == "NVIDIA GPU probe failed: RuntimeError: ctypes went wrong"
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)


def test_driver_version_is_kept_for_later_views() -> None:
    result = nvidia.probe_nvidia(FakeNvml.with_gpus(1, driver_version="535.104.05"))
    assert result.driver_version == "535.104.05"


@pytest.mark.skipif(
    Path("/proc/driver/nvidia/version").exists(), reason="this machine has an NVIDIA driver"
)
def test_real_nvml_on_a_machine_without_driver(bare: dict[str, Path]) -> None:
    gpus, reason = detect_gpus(**bare)
    assert gpus == ()
    assert reason == nvidia.LIBRARY_MISSING


# --- AMD and Intel -----------------------------------------------------------------------


def test_intel_cards_come_from_sysfs(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    add_card(
        sysfs, 0, "0x8086", "0x56a0", "0000:03:00.0", files={"lmem_total_bytes": "17179869184"}
    )
    add_card(sysfs, 1, "0x8086", "0x46a6", "0000:00:02.0")
    nvml = FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    gpus, reason = detect_gpus(nvml, sysfs_root=sysfs, kfd=tmp_path / "kfd")
    assert reason is None
    assert [(g.vendor, g.index, g.vram_mb, g.uuid) for g in gpus] == [
        ("intel", 0, 16384, "intel-pci:0000:03:00.0"),
        ("intel", 1, 0, "intel-pci:0000:00:02.0"),
    ]
    assert gpus[0].name == "Intel GPU (PCI 8086:56a0)"


def test_intel_card_without_driver_is_not_offered(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    add_card(sysfs, 0, "0x8086", "0x56a0", "0000:03:00.0", driver=False)
    result = probe_intel(sysfs_root=sysfs)
    assert result.gpus == ()
    assert result.reason is not None and "no driver" in result.reason


def test_amd_falls_back_to_amdgpu_sysfs_without_pyrsmi(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    files = {
        "mem_info_vram_total": str(16 * 1024**3),
        "product_name": "Radeon RX 6800",
        "unique_id": "c2a5b0d1e3f4a7b8",
    }
    add_card(sysfs, 1, "0x1002", "0x73bf", "0000:0a:00.0", files=files)
    # pyrsmi is not installed here: the real import fails and sysfs answers.
    result = probe_amd(sysfs_root=sysfs, kfd=tmp_path / "kfd")
    assert [(g.vendor, g.name, g.vram_mb, g.uuid) for g in result.gpus] == [
        ("amd", "Radeon RX 6800", 16384, "GPU-c2a5b0d1e3f4a7b8")
    ]


def test_amd_through_rocm_smi(bare: dict[str, Path]) -> None:
    rsmi = FakeRocml(gpus=[FakeAmdGpu(), FakeAmdGpu(uuid="GPU-2")])
    gpus, reason = detect_gpus(FakeNvml(), rsmi, **bare)
    assert reason is None
    assert [(g.vendor, g.index, g.vram_mb, g.uuid) for g in gpus] == [
        ("amd", 0, 65536, "GPU-5f1a2b3c4d5e6f70"),
        ("amd", 1, 65536, "GPU-2"),
    ]
    assert (rsmi.init_calls, rsmi.shutdown_calls) == (1, 1)


def test_old_pyrsmi_without_uuid_uses_the_unique_id(bare: dict[str, Path]) -> None:
    rsmi = FakeRocml(gpus=[FakeAmdGpu(unique_id=0xABC)], has_uuid_function=False)
    gpus, _ = detect_gpus(FakeNvml(), rsmi, **bare)
    assert gpus[0].uuid == "GPU-0000000000000abc"


def test_rocm_library_missing_is_a_reason(bare: dict[str, Path]) -> None:
    nvml = FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    gpus, reason = detect_gpus(nvml, FakeRocml(library_missing=True), **bare)
    assert gpus == ()
    assert reason == (
        "no NVIDIA driver library (libnvidia-ml.so) found; "
        "no ROCm SMI library found (install ROCm or set ROCM_PATH)"
    )


def test_mixed_vendors_are_all_listed_nvidia_first(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    add_card(sysfs, 0, "0x8086", "0x46a6", "0000:00:02.0")
    gpus, reason = detect_gpus(FakeNvml.with_gpus(1), sysfs_root=sysfs, kfd=tmp_path / "kfd")
    assert reason is None
    assert [g.vendor for g in gpus] == ["nvidia", "intel"]


def test_drm_cards_skips_connectors_and_unknown_vendors(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    add_card(sysfs, 0, "0x1234", "0x1111", "0000:00:01.0")  # a virtual display adapter
    add_card(sysfs, 2, "0x10de", "0x2204", "0000:01:00.0")
    cards = drm_cards(sysfs)
    assert [(c.number, c.vendor, c.pci_address) for c in cards] == [(2, "nvidia", "0000:01:00.0")]


def test_combine_reasons_without_any_is_no_gpu_found() -> None:
    assert combine_reasons([ProbeResult(), ProbeResult()]) == NO_GPU
    assert combine_reasons([ProbeResult(reason="a"), ProbeResult(reason="a")]) == "a"


def test_value_helpers() -> None:
    assert bytes_to_mb(None) == 0
    assert bytes_to_mb(-5) == 0
    assert bytes_to_mb(3 * 1024**2 + 5) == 3
    assert as_text(b"Tesla T4\x00 ".rstrip(b"\x00 "), "x") == "Tesla T4"
    assert as_text(None, "default") == "default"
