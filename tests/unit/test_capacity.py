"""Machine identity and the three capacity views, on this machine and on built /proc trees."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import psutil
import pytest

from engine.api import Capacity, GpuInfo, Onboarding
from engine.config import MachineSettings
from engine.resources import capacity
from engine.resources.capacity import (
    HostFiles,
    available_capacity,
    cgroup_cpu_quota,
    cgroup_memory,
    detect_machine,
    free_disk_mb,
    full_capacity,
    onboarded_capacity,
    usable_cores,
)
from engine.resources.gpu.detect import detect_gpus

MIB = 1024 * 1024
CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7543 32-Core Processor
cpu MHz\t\t: 2794.748

processor\t: 1
model name\t: AMD EPYC 7543 32-Core Processor
cpu MHz\t\t: 1500.000
"""
GPU = GpuInfo(index=0, vendor="nvidia", name="RTX 3090", vram_mb=24576, uuid="GPU-a")
GPU2 = GpuInfo(index=1, vendor="nvidia", name="RTX 3090", vram_mb=24576, uuid="GPU-b")


def fake_host(tmp_path: Path, cgroup_line: str = "0::/", **cgroup_files: str) -> HostFiles:
    """A /proc, /etc and /sys/fs/cgroup tree; cgroup file names use '__' for '/'."""
    host = HostFiles(proc=tmp_path / "proc", etc=tmp_path / "etc", cgroup=tmp_path / "cgroup")
    (host.proc / "self").mkdir(parents=True)
    (host.proc / "cpuinfo").write_text(CPUINFO)
    (host.proc / "self" / "cgroup").write_text(cgroup_line + "\n")
    host.etc.mkdir()
    (host.etc / "os-release").write_text('NAME="Debian GNU/Linux"\nPRETTY_NAME="Debian 12"\n')
    host.cgroup.mkdir()
    for name, text in cgroup_files.items():
        path = host.cgroup / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return host


# --- the machine ------------------------------------------------------------------------


def test_detects_this_machine() -> None:
    machine = detect_machine(MachineSettings())
    assert machine.hostname == socket.gethostname()
    assert machine.cpu_cores == len(os.sched_getaffinity(0))
    assert machine.cpu_mhz_per_core > 0
    assert machine.cpu_model
    assert machine.kernel == os.uname().release
    assert machine.arch == os.uname().machine
    release = Path("/etc/os-release")
    if release.exists():
        pretty = next(
            line.split("=", 1)[1].strip('"')
            for line in release.read_text().splitlines()
            if line.startswith("PRETTY_NAME=")
        )
        assert machine.os == pretty


def test_declared_values_replace_detection(tmp_path: Path) -> None:
    declared = MachineSettings(
        hostname="rig-01", cpu_model="Declared CPU", cpu_cores=16, cpu_mhz_per_core=3000
    )
    machine = detect_machine(declared, host=fake_host(tmp_path))
    assert (machine.hostname, machine.cpu_model, machine.cpu_cores, machine.cpu_mhz_per_core) == (
        "rig-01",
        "Declared CPU",
        16,
        3000,
    )


def test_reads_model_and_os_from_files(tmp_path: Path) -> None:
    machine = detect_machine(MachineSettings(), host=fake_host(tmp_path))
    assert machine.cpu_model == "AMD EPYC 7543 32-Core Processor"
    assert machine.os == "Debian 12"


def test_mhz_falls_back_to_cpuinfo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(capacity.psutil, "cpu_freq", lambda: None)
    machine = detect_machine(MachineSettings(), host=fake_host(tmp_path))
    assert machine.cpu_mhz_per_core == 2795  # rounded, from the first "cpu MHz"


def test_cgroup_v2_cpu_quota_caps_cores(tmp_path: Path) -> None:
    host = fake_host(tmp_path, "0::/job", **{"job__cpu.max": "50000 100000"})
    assert cgroup_cpu_quota(host) == 0.5
    assert usable_cores(host) == 1


def test_cgroup_v2_unlimited_quota(tmp_path: Path) -> None:
    host = fake_host(tmp_path, "0::/job", **{"job__cpu.max": "max 100000"})
    assert cgroup_cpu_quota(host) is None
    assert usable_cores(host) == len(os.sched_getaffinity(0))


def test_cgroup_v1_quota_on_an_ancestor_binds(tmp_path: Path) -> None:
    host = fake_host(
        tmp_path,
        "4:cpu,cpuacct:/outer/inner",
        **{
            "cpu__outer__cpu.cfs_quota_us": "150000",
            "cpu__outer__cpu.cfs_period_us": "100000",
            "cpu__outer__inner__cpu.cfs_quota_us": "-1",
            "cpu__outer__inner__cpu.cfs_period_us": "100000",
        },
    )
    assert cgroup_cpu_quota(host) == 1.5
    assert usable_cores(host) == min(2, len(os.sched_getaffinity(0)))


def test_cgroup_memory_v2_and_v1(tmp_path: Path) -> None:
    v2 = fake_host(
        tmp_path / "a",
        "0::/job",
        **{"job__memory.max": str(2048 * MIB), "job__memory.current": str(512 * MIB)},
    )
    assert cgroup_memory(v2) == (2048 * MIB, 512 * MIB)
    v1 = fake_host(
        tmp_path / "b",
        "9:memory:/docker/abc",
        **{
            "memory__docker__abc__memory.limit_in_bytes": "9223372036854771712",
            "memory__docker__memory.limit_in_bytes": str(1024 * MIB),
            "memory__docker__memory.usage_in_bytes": str(100 * MIB),
        },
    )
    assert cgroup_memory(v1) == (1024 * MIB, 100 * MIB)
    assert cgroup_memory(fake_host(tmp_path / "c", "0::/", **{"memory.max": "max"})) == (None, None)


# --- the views --------------------------------------------------------------------------


def test_full_capacity_on_this_machine(tmp_path: Path) -> None:
    machine = detect_machine(MachineSettings())
    full = full_capacity(machine, MachineSettings(), tmp_path, (), "no GPU found")
    assert full.view == "full"
    assert full.cpu_cores == machine.cpu_cores
    assert full.cpu_mhz == machine.cpu_cores * machine.cpu_mhz_per_core
    assert 0 < full.memory_mb <= psutil.virtual_memory().total // MIB
    assert abs(full.disk_mb - psutil.disk_usage(str(tmp_path)).free // MIB) < 512
    assert full.gpus == ()
    assert full.gpu_reason == "no GPU found"


def test_full_capacity_respects_a_memory_cgroup(tmp_path: Path) -> None:
    host = fake_host(tmp_path, "0::/job", **{"job__memory.max": str(3000 * MIB)})
    machine = detect_machine(MachineSettings(), host=host)
    full = full_capacity(machine, MachineSettings(), tmp_path, (), None, host=host)
    assert full.memory_mb == min(3000, psutil.virtual_memory().total // MIB)


def test_declared_values_replace_full_capacity(tmp_path: Path) -> None:
    declared = MachineSettings(cpu_cores=4, cpu_mhz_per_core=2500, memory_mb=16000, disk_mb=20000)
    machine = detect_machine(MachineSettings())
    full = full_capacity(machine, declared, tmp_path, (GPU,), "ignored when GPUs exist")
    assert (full.cpu_cores, full.cpu_mhz, full.memory_mb, full.disk_mb) == (4, 10000, 16000, 20000)
    assert full.gpus == (GPU,)
    assert full.gpu_reason is None


def test_disk_of_a_state_dir_not_yet_created(tmp_path: Path) -> None:
    later = tmp_path / "not" / "yet" / "there"
    assert abs(free_disk_mb(later) - free_disk_mb(tmp_path)) < 512


def test_available_never_exceeds_full(tmp_path: Path) -> None:
    declared = MachineSettings(memory_mb=1000, disk_mb=500)
    full = full_capacity(detect_machine(declared), declared, tmp_path, (GPU,), None)
    available = available_capacity(full, tmp_path, cpu_mhz_in_use=1000)
    assert available.view == "available"
    assert available.memory_mb == 1000  # this machine has far more available than declared
    assert available.disk_mb == 500
    assert available.cpu_mhz == full.cpu_mhz - 1000
    assert available.gpus == (GPU,)
    assert available.cpu_load_percent is not None and available.cpu_load_percent >= 0


def test_available_on_this_machine(tmp_path: Path) -> None:
    full = full_capacity(detect_machine(MachineSettings()), MachineSettings(), tmp_path, (), None)
    available = available_capacity(full, tmp_path)
    assert available.cpu_mhz == full.cpu_mhz  # time-shared: nothing committed yet
    assert 0 < available.memory_mb <= full.memory_mb
    assert abs(available.memory_mb - psutil.virtual_memory().available // MIB) < 1024
    load = os.getloadavg()[0] * 100 / full.cpu_cores
    assert available.cpu_load_percent == pytest.approx(load, abs=25)


def test_available_cpu_never_negative(tmp_path: Path) -> None:
    full = Capacity(view="full", cpu_cores=2, cpu_mhz=5000, memory_mb=100, disk_mb=100)
    assert available_capacity(full, tmp_path, cpu_mhz_in_use=9000).cpu_mhz == 0


def test_available_memory_inside_a_cgroup(tmp_path: Path) -> None:
    host = fake_host(
        tmp_path,
        "0::/job",
        **{"job__memory.max": str(4096 * MIB), "job__memory.current": str(3072 * MIB)},
    )
    full = Capacity(view="full", cpu_cores=2, cpu_mhz=5000, memory_mb=4096, disk_mb=100)
    assert available_capacity(full, tmp_path, host=host).memory_mb == 1024


def test_onboarded_is_zero_when_not_onboarded() -> None:
    full = Capacity(view="full", cpu_cores=2, cpu_mhz=5000, memory_mb=100, disk_mb=100, gpus=(GPU,))
    view = onboarded_capacity(None, full)
    assert (view.view, view.cpu_cores, view.cpu_mhz, view.memory_mb, view.disk_mb, view.gpus) == (
        "onboarded",
        0,
        0,
        0,
        0,
        (),
    )


def test_onboarded_offers_only_the_chosen_gpus() -> None:
    full = Capacity(
        view="full", cpu_cores=8, cpu_mhz=20000, memory_mb=64000, disk_mb=90000, gpus=(GPU, GPU2)
    )
    onboarding = Onboarding(
        memory_mb=16000, cpu_mhz=6000, channel="nunet-test", address="addr_test1x", gpus=("GPU-b",)
    )
    view = onboarded_capacity(onboarding, full)
    assert (view.cpu_mhz, view.memory_mb, view.disk_mb) == (6000, 16000, 90000)
    assert view.cpu_cores == 3  # 6,000 MHz at 2,500 MHz a core spans three cores
    assert view.gpus == (GPU2,)
    no_gpu = onboarded_capacity(Onboarding(memory_mb=1, cpu_mhz=1, channel="c", address="a"), full)
    assert no_gpu.gpus == ()
    assert no_gpu.gpu_reason == "no GPU offered in the onboarding"


def test_detection_is_cheap(tmp_path: Path) -> None:
    detect_gpus()  # the first call pays for importing pynvml
    started = time.perf_counter()
    machine = detect_machine(MachineSettings())
    gpus, reason = detect_gpus()
    full = full_capacity(machine, MachineSettings(), tmp_path, gpus, reason)
    available_capacity(full, tmp_path)
    assert time.perf_counter() - started < 0.25
