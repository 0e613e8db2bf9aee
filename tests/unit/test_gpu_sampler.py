"""Live GPU samples: NVML through the pynvml double, AMD/Intel through built sysfs trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.resources.gpu import nvidia
from engine.resources.gpu.amd_live import AmdReader
from engine.resources.gpu.intel_live import IntelReader
from engine.resources.gpu.nvidia_live import NvidiaReader
from engine.resources.gpu.sampler import GpuSampler, sample_gpus
from tests.doubles.fake_pynvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    FakeGpu,
    FakeNvml,
    FakeProcess,
)
from tests.doubles.fake_pyrsmi import FakeAmdGpu, FakeRocml
from tests.unit.test_gpu_detect import add_card


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    """No sysfs GPUs, no /dev/kfd, an empty /proc: only the injected modules report."""
    (tmp_path / "proc").mkdir()
    return {
        "sysfs_root": tmp_path / "sys",
        "kfd": tmp_path / "dev" / "kfd",
        "proc_root": tmp_path / "proc",
        "rocm_root": tmp_path / "rocm",
    }


def test_no_nvidia_gpu_is_an_empty_list_with_a_reason(roots: dict[str, Path]) -> None:
    status = sample_gpus(FakeNvml.with_gpus(0), **roots)
    assert status.gpus == ()
    assert status.reason == nvidia.NO_NVIDIA_GPU
    assert status.at > 0


def test_one_gpu_has_every_field(roots: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.gpus[0].processes = [
        FakeProcess(pid=4242, name="/usr/bin/python3.11", used_memory=2048 * 1024**2),
        FakeProcess(pid=77, name="/usr/lib/xorg/Xorg", used_memory=None, graphics=True),
    ]
    status = sample_gpus(nvml, **roots)
    assert status.reason is None
    (gpu,) = status.gpus
    assert (gpu.index, gpu.vendor, gpu.name) == (0, "nvidia", "NVIDIA GeForce RTX 3090")
    assert gpu.uuid == "GPU-00000000-1111-2222-3333-444444444444"
    assert (gpu.memory_total_mb, gpu.memory_used_mb, gpu.memory_free_mb) == (24576, 512, 24064)
    assert (gpu.utilization_gpu, gpu.utilization_memory) == (37.0, 12.0)
    assert (gpu.temperature_c, gpu.temperature_limit_c) == (61.0, 90.0)
    assert (gpu.power_draw_w, gpu.power_limit_w) == (215.0, 350.0)
    assert gpu.compute_capability == "8.6"
    assert (gpu.driver_version, gpu.cuda_version, gpu.rocm_version) == ("550.54.15", "12.4", None)
    assert [(p.pid, p.name, p.used_memory_mb) for p in gpu.processes] == [
        (4242, "python3.11", 2048),
        (77, "Xorg", None),
    ]
    assert gpu.memory_percent == pytest.approx(100 * 512 / 24576)
    assert nvml.initialised == 0  # sample_gpus closes what it opened


def test_eight_gpus(roots: dict[str, Path]) -> None:
    status = sample_gpus(FakeNvml.with_gpus(8), **roots)
    assert [g.index for g in status.gpus] == list(range(8))
    assert len({g.uuid for g in status.gpus}) == 8
    assert all(g.memory_total_mb == 80 * 1024 for g in status.gpus)


def test_nvml_stays_initialised_and_static_facts_are_read_once(roots: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(2)
    with GpuSampler(nvml, **roots) as sampler:
        for _ in range(5):
            assert len(sampler.sample().gpus) == 2
        assert nvml.init_calls == 1 and nvml.initialised == 1
        assert nvml.calls.count("nvmlDeviceGetName") == 2
        assert nvml.calls.count("nvmlDeviceGetCudaComputeCapability") == 2
        assert nvml.calls.count("nvmlDeviceGetMemoryInfo") == 10
    assert nvml.initialised == 0


def test_not_supported_fields_are_none_and_not_asked_again(roots: dict[str, Path]) -> None:
    board = FakeGpu(
        uuid="GPU-geforce",
        not_supported=frozenset(
            {
                "nvmlDeviceGetPowerUsage",
                "nvmlDeviceGetEnforcedPowerLimit",
                "nvmlDeviceGetTemperatureThreshold",
                "nvmlDeviceGetUtilizationRates",
                "nvmlDeviceGetComputeRunningProcesses",
                "nvmlDeviceGetGraphicsRunningProcesses",
                "nvmlDeviceGetMemoryInfo",
            }
        ),
    )
    nvml = FakeNvml(gpus=[board])
    with GpuSampler(nvml, **roots) as sampler:
        gpu = sampler.sample().gpus[0]
        sampler.sample()
    assert gpu.power_draw_w is None and gpu.power_limit_w is None
    assert gpu.temperature_limit_c is None and gpu.temperature_c == 61.0
    assert gpu.utilization_gpu is None and gpu.utilization_memory is None
    assert gpu.memory_total_mb is None and gpu.memory_percent is None
    assert gpu.processes == ()
    assert nvml.calls.count("nvmlDeviceGetPowerUsage") == 1
    assert nvml.calls.count("nvmlDeviceGetTemperature") == 2


def test_a_gpu_that_disappears_between_samples(roots: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(3)
    with GpuSampler(nvml, **roots) as sampler:
        assert len(sampler.sample().gpus) == 3
        nvml.gpus[1].lost = True  # fell off the bus: its handle answers GpuIsLost
        status = sampler.sample()
        assert [g.index for g in status.gpus] == [0, 2]
        assert status.reason is None
        del nvml.gpus[1]  # the driver stops counting it
        status = sampler.sample()
        assert [g.index for g in status.gpus] == [0, 1]
        del nvml.gpus[:]
        status = sampler.sample()
        assert status.gpus == () and status.reason == nvidia.NO_NVIDIA_GPU


def test_every_gpu_lost_says_so(roots: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(1)
    with GpuSampler(nvml, **roots) as sampler:
        sampler.sample()
        nvml.gpus[0].lost = True
        status = sampler.sample()
    assert status.gpus == ()
    assert status.reason == "1 NVIDIA GPU(s) reported but none could be read"


def test_driver_not_loaded(roots: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(1, init_error=NVML_ERROR_DRIVER_NOT_LOADED)
    status = sample_gpus(nvml, **roots)
    assert status.gpus == ()
    assert status.reason is not None and status.reason.startswith("NVIDIA driver not loaded")


def test_init_is_retried_with_a_back_off() -> None:
    now = [0.0]
    nvml = FakeNvml.with_gpus(1, init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    reader = NvidiaReader(nvml, retry_s=10.0, clock=lambda: now[0])
    assert reader.read().reason == nvidia.LIBRARY_MISSING
    reader.read()
    assert nvml.calls.count("nvmlInit") == 1  # not hammered at 1 Hz
    nvml.init_error = None  # the driver got installed
    now[0] = 11.0
    assert len(reader.read().gpus) == 1
    reader.close()


def test_driver_going_away_mid_run_shuts_down_and_recovers(roots: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(2)
    with GpuSampler(nvml, **roots) as sampler:
        assert len(sampler.sample().gpus) == 2
        nvml.fail_all = NVML_ERROR_DRIVER_NOT_LOADED  # rmmod nvidia
        status = sampler.sample()
        assert status.gpus == ()
        assert status.reason is not None and "driver not loaded" in status.reason
        assert nvml.initialised == 0
        nvml.fail_all = None  # modprobe nvidia
        assert len(sampler.sample().gpus) == 2
        assert nvml.init_calls == 2


def test_an_unexpected_library_failure_is_a_reason_not_a_crash(roots: dict[str, Path]) -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise RuntimeError("ctypes went wrong")

    status = sample_gpus(Broken(), **roots)
    assert status.gpus == ()
    assert status.reason == "NVIDIA GPU read failed: RuntimeError: ctypes went wrong"


def test_process_names_fall_back_to_proc(roots: dict[str, Path]) -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.gpus[0].processes = [FakeProcess(pid=99, name="")]  # NVML hides the name
    comm = roots["proc_root"] / "99"
    comm.mkdir()
    (comm / "comm").write_text("trainer\n")
    gpu = sample_gpus(nvml, **roots).gpus[0]
    assert gpu.processes[0].name == "trainer"


# --- AMD ----------------------------------------------------------------------------------


def amd_sysfs(sysfs: Path, *, hwmon: bool = True) -> Path:
    files = {
        "mem_info_vram_total": str(16 * 1024**3),
        "mem_info_vram_used": str(1024**3),
        "gpu_busy_percent": "42",
        "mem_busy_percent": "7",
        "product_name": "Radeon RX 6800",
        "unique_id": "c2a5b0d1e3f4a7b8",
    }
    if hwmon:
        files |= {
            "hwmon/hwmon3/temp1_input": "54000",
            "hwmon/hwmon3/temp1_crit": "100000",
            "hwmon/hwmon3/power1_average": "187000000",
            "hwmon/hwmon3/power1_cap": "203000000",
        }
    add_card(sysfs, 1, "0x1002", "0x73bf", "0000:0a:00.0", files=files)
    pci = sysfs / "devices" / "pci0000:00" / "0000:0a:00.0"
    (pci / "drm" / "renderD129").mkdir(parents=True)
    return pci


def test_amd_from_sysfs_only(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    amd_sysfs(sysfs)
    (tmp_path / "rocm" / ".info").mkdir(parents=True)
    (tmp_path / "rocm" / ".info" / "version").write_text("6.2.0-66\n")
    (tmp_path / "proc").mkdir()
    reader = AmdReader(
        None,
        sysfs_root=sysfs,
        kfd=tmp_path / "kfd",
        proc_root=tmp_path / "proc",
        rocm_root=tmp_path / "rocm",
    )
    (gpu,) = reader.read().gpus
    assert (gpu.vendor, gpu.name, gpu.uuid) == ("amd", "Radeon RX 6800", "GPU-c2a5b0d1e3f4a7b8")
    assert (gpu.memory_total_mb, gpu.memory_used_mb, gpu.memory_free_mb) == (16384, 1024, 15360)
    assert (gpu.utilization_gpu, gpu.utilization_memory) == (42.0, 7.0)
    assert (gpu.temperature_c, gpu.temperature_limit_c) == (54.0, 100.0)
    assert (gpu.power_draw_w, gpu.power_limit_w) == (187.0, 203.0)
    assert gpu.rocm_version == "6.2.0"
    assert gpu.compute_capability is None and gpu.cuda_version is None


def test_amd_through_rocm_smi_with_hwmon_and_kfd_processes(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    amd_sysfs(sysfs)
    node = sysfs / "class" / "kfd" / "kfd" / "topology" / "nodes" / "1"
    node.mkdir(parents=True)
    (node / "gpu_id").write_text("51234\n")
    (node / "properties").write_text("cpu_cores_count 0\ndrm_render_minor 129\n")
    proc = sysfs / "class" / "kfd" / "kfd" / "proc" / "3131"
    proc.mkdir(parents=True)
    (proc / "vram_51234").write_text(str(3 * 1024**3))
    (tmp_path / "proc" / "3131").mkdir(parents=True)
    (tmp_path / "proc" / "3131" / "comm").write_text("torchrun\n")
    rsmi = FakeRocml(gpus=[FakeAmdGpu()])
    status = sample_gpus(
        FakeNvml(),
        rsmi,
        sysfs_root=sysfs,
        kfd=tmp_path / "kfd",
        proc_root=tmp_path / "proc",
        rocm_root=tmp_path / "rocm",
    )
    (gpu,) = status.gpus
    assert (gpu.name, gpu.uuid) == ("AMD Instinct MI250X", "GPU-5f1a2b3c4d5e6f70")
    assert (gpu.memory_total_mb, gpu.memory_used_mb) == (65536, 4096)
    assert (gpu.utilization_gpu, gpu.utilization_memory, gpu.power_draw_w) == (55.0, 20.0, 310.0)
    # pyrsmi has no temperature or power cap: those came from the matched card's hwmon.
    assert (gpu.temperature_c, gpu.power_limit_w) == (54.0, 203.0)
    assert gpu.driver_version == "6.8.5"
    assert [(p.pid, p.name, p.used_memory_mb) for p in gpu.processes] == [(3131, "torchrun", 3072)]
    assert (rsmi.init_calls, rsmi.shutdown_calls) == (1, 1)


def test_amd_rocm_smi_initialised_once_across_samples(tmp_path: Path) -> None:
    rsmi = FakeRocml(gpus=[FakeAmdGpu(), FakeAmdGpu(uuid="GPU-2", pci_id=0x0B00)])
    reader = AmdReader(rsmi, sysfs_root=tmp_path / "sys", kfd=tmp_path / "kfd")
    for _ in range(3):
        assert len(reader.read().gpus) == 2
    assert rsmi.init_calls == 1
    rsmi.gpus[1].gone = True
    assert [g.uuid for g in reader.read().gpus] == ["GPU-5f1a2b3c4d5e6f70"]
    reader.close()
    assert rsmi.shutdown_calls == 1


def test_amd_card_without_driver_is_a_reason(tmp_path: Path) -> None:
    add_card(tmp_path / "sys", 0, "0x1002", "0x73bf", "0000:0a:00.0", driver=False)
    read = AmdReader(None, sysfs_root=tmp_path / "sys", kfd=tmp_path / "kfd").read()
    assert read.gpus == ()
    assert read.reason is not None and "amdgpu driver has not bound it" in read.reason


def test_amd_card_removed_between_samples(tmp_path: Path) -> None:
    pci = amd_sysfs(tmp_path / "sys")
    reader = AmdReader(None, sysfs_root=tmp_path / "sys", kfd=tmp_path / "kfd")
    assert len(reader.read().gpus) == 1
    import shutil

    shutil.rmtree(pci)
    read = reader.read()
    assert read.gpus == () and read.reason == "the AMD GPU(s) stopped answering"


# --- Intel --------------------------------------------------------------------------------


def test_intel_temperature_and_power_from_energy(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    hw = "hwmon/hwmon2/"
    add_card(
        sysfs,
        0,
        "0x8086",
        "0x56a0",
        "0000:03:00.0",
        files={
            "lmem_total_bytes": str(16 * 1024**3),
            hw + "temp1_input": "47000",
            hw + "power1_max": "190000000",
            hw + "energy1_input": "1000000000",
        },
    )
    now = [100.0]
    reader = IntelReader(sysfs_root=sysfs, clock=lambda: now[0])
    first = reader.read().gpus[0]
    assert (first.name, first.memory_total_mb) == ("Intel GPU (PCI 8086:56a0)", 16384)
    assert (first.temperature_c, first.power_limit_w) == (47.0, 190.0)
    assert first.power_draw_w is None  # needs two energy readings
    assert first.utilization_gpu is None and first.memory_used_mb is None
    energy = sysfs / "devices" / "pci0000:00" / "0000:03:00.0" / hw / "energy1_input"
    energy.write_text(str(1_000_000_000 + 90_000_000))  # 90 J in 2 s
    now[0] = 102.0
    assert reader.read().gpus[0].power_draw_w == 45.0


def test_mixed_vendors_nvidia_first(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    add_card(sysfs, 0, "0x8086", "0x46a6", "0000:00:02.0")
    status = sample_gpus(
        FakeNvml.with_gpus(1), sysfs_root=sysfs, kfd=tmp_path / "kfd", proc_root=tmp_path
    )
    assert [g.vendor for g in status.gpus] == ["nvidia", "intel"]


@pytest.mark.skipif(
    Path("/proc/driver/nvidia/version").exists(), reason="this machine has an NVIDIA driver"
)
def test_real_libraries_on_this_gpu_less_machine() -> None:
    status = sample_gpus()
    assert status.gpus == ()
    assert status.reason == nvidia.LIBRARY_MISSING
