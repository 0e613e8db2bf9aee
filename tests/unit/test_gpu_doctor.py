"""GPU doctor on built /proc, /dev, /sys and /etc trees; fixes only after a typed "yes"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engine import api
from engine.resources.gpu.doctor import (
    NVIDIA_RUNTIME_CONFIGURE,
    NVIDIA_TOOLKIT_INSTALL,
    SECURE_BOOT_VAR,
    DoctorEnv,
    apply_fixes,
    run_doctor,
)
from engine.resources.readiness import DockerStatus
from tests.unit.test_gpu_detect import add_card

UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n'
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
NVIDIA_VERSION = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
)
DOCKER_UP = DockerStatus(
    "unix:///run/docker.sock", True, "24.0.7", ("io.containerd.runc.v2", "runc")
)


def make_env(
    tmp_path: Path,
    *,
    os_release: str = UBUNTU,
    modules: tuple[str, ...] = (),
    devices: tuple[str, ...] = (),
    tools: tuple[str, ...] = (),
    docker: DockerStatus = DOCKER_UP,
    proc_version: str = "Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075)",
    mokutil: str | None = None,
) -> DoctorEnv:
    proc, dev, sys, etc = (tmp_path / name for name in ("proc", "dev", "sys", "etc"))
    for folder in (proc, dev, sys, etc):
        folder.mkdir(exist_ok=True)
    (etc / "os-release").write_text(os_release)
    (proc / "version").write_text(proc_version)
    (proc / "modules").write_text(
        "".join(f"{m} 12345 0 - Live 0x0000000000000000\n" for m in modules)
    )
    for name in devices:
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        if name.endswith("/"):
            (dev / name).mkdir(exist_ok=True)
        else:
            (dev / name).touch()
    available = set(tools) | ({"mokutil"} if mokutil is not None else set())
    return DoctorEnv(
        proc_root=proc,
        dev_root=dev,
        sys_root=sys,
        etc_root=etc,
        wsl_lib=tmp_path / "wsl-lib",
        which=lambda name: f"/usr/bin/{name}" if name in available else None,
        run=lambda argv: (0, mokutil or ""),
        docker_probe=lambda: docker,
        environ={},
        is_root=True,
    )


def finding(report: api.DoctorReport, check: str) -> api.DoctorFinding:
    return next(f for f in report.findings if f.check == check)


def nvidia_card(tmp_path: Path) -> None:
    add_card(tmp_path / "sys", 0, "0x10de", "0x2204", "0000:01:00.0")


def test_no_gpu_at_all(tmp_path: Path) -> None:
    report = run_doctor(make_env(tmp_path))
    assert report.vendors == ()
    assert report.distro == "ubuntu"
    vendor = finding(report, "vendor")
    assert not vendor.ok and "CPU-only jobs still work" in vendor.detail
    assert finding(report, "wsl").ok
    assert not report.ok
    assert report.fixes == ()


def test_nvidia_driver_not_installed_on_ubuntu(tmp_path: Path) -> None:
    nvidia_card(tmp_path)
    report = run_doctor(make_env(tmp_path))
    assert report.vendors == ("nvidia",)
    driver = finding(report, "driver")
    assert not driver.ok
    assert driver.fix == (
        "sudo apt-get update",
        "sudo apt-get install -y ubuntu-drivers-common",
        "sudo ubuntu-drivers install",
    )
    runtime = finding(report, "container_runtime")
    assert not runtime.ok
    assert runtime.fix == NVIDIA_TOOLKIT_INSTALL + NVIDIA_RUNTIME_CONFIGURE
    # Each command once, in the order the findings come.
    assert report.fixes[:3] == driver.fix
    assert len(report.fixes) == len(set(report.fixes))


def test_nvidia_driver_not_installed_on_debian(tmp_path: Path) -> None:
    nvidia_card(tmp_path)
    driver = finding(run_doctor(make_env(tmp_path, os_release=DEBIAN)), "driver")
    assert "nvidia-driver firmware-misc-nonfree" in driver.fix[1]
    assert "non-free" in driver.detail


def test_driver_installed_but_module_not_loaded(tmp_path: Path) -> None:
    nvidia_card(tmp_path)
    driver = finding(run_doctor(make_env(tmp_path, tools=("nvidia-smi",))), "driver")
    assert not driver.ok
    assert driver.fix == ("sudo modprobe nvidia", "sudo modprobe nvidia_uvm")


def test_nvidia_all_good(tmp_path: Path) -> None:
    nvidia_card(tmp_path)
    (tmp_path / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (tmp_path / "proc" / "driver" / "nvidia" / "version").write_text(NVIDIA_VERSION)
    docker = replace(DOCKER_UP, runtimes=("nvidia", "runc"))
    env = make_env(
        tmp_path,
        modules=("nvidia_uvm", "nvidia_drm", "nvidia"),
        devices=("nvidiactl", "nvidia0", "nvidia-uvm"),
        tools=("nvidia-ctk", "nvidia-container-runtime"),
        docker=docker,
    )
    report = run_doctor(env)
    assert report.ok, [f for f in report.findings if not f.ok]
    assert finding(report, "driver").summary == "NVIDIA driver 550.54.15 loaded"
    assert "nvidia0" in finding(report, "devices").summary


def test_toolkit_installed_but_docker_not_configured(tmp_path: Path) -> None:
    nvidia_card(tmp_path)
    env = make_env(
        tmp_path,
        modules=("nvidia",),
        devices=("nvidiactl", "nvidia0"),
        tools=("nvidia-ctk",),
    )
    runtime = finding(run_doctor(env), "container_runtime")
    assert not runtime.ok
    assert runtime.fix == NVIDIA_RUNTIME_CONFIGURE


def test_docker_missing(tmp_path: Path) -> None:
    docker = DockerStatus("unix:///var/run/docker.sock", False, error="no such socket")
    found = finding(run_doctor(make_env(tmp_path, docker=docker)), "docker")
    assert not found.ok
    assert "sudo apt-get install -y docker.io" in found.fix


def test_secure_boot_blocks_the_nvidia_module(tmp_path: Path) -> None:
    nvidia_card(tmp_path)
    efivars = tmp_path / "sys" / "firmware" / "efi" / "efivars"
    efivars.mkdir(parents=True)
    (efivars / SECURE_BOOT_VAR).write_bytes(b"\x06\x00\x00\x00\x01")
    secure = finding(run_doctor(make_env(tmp_path, tools=("nvidia-smi",))), "secure_boot")
    assert not secure.ok
    assert secure.fix == ("sudo mokutil --import /var/lib/dkms/mok.pub",)


def test_secure_boot_from_mokutil(tmp_path: Path) -> None:
    env = make_env(tmp_path, mokutil="SecureBoot disabled\n")
    assert finding(run_doctor(env), "secure_boot").summary == "Secure Boot disabled"


def test_legacy_bios_has_no_secure_boot(tmp_path: Path) -> None:
    assert "not applicable" in finding(run_doctor(make_env(tmp_path)), "secure_boot").summary


def test_wsl_uses_the_windows_driver(tmp_path: Path) -> None:
    (tmp_path / "wsl-lib").mkdir()
    (tmp_path / "wsl-lib" / "libnvidia-ml.so.1").touch()
    env = make_env(
        tmp_path,
        proc_version="Linux version 5.15.153.1-microsoft-standard-WSL2",
        devices=("dxg",),
        tools=("nvidia-ctk",),
    )
    report = run_doctor(env)
    assert report.vendors == ("nvidia",)
    wsl = finding(report, "wsl")
    assert wsl.ok and "do not install a Linux NVIDIA driver" in wsl.detail
    assert not any(f.check == "driver" for f in report.findings)


def test_wsl_without_gpu_access(tmp_path: Path) -> None:
    env = make_env(tmp_path, proc_version="Linux 5.15.153.1-microsoft-standard-WSL2")
    wsl = finding(run_doctor(env), "wsl")
    assert not wsl.ok and "wsl --update" in wsl.detail


def test_amd_driver_and_devices(tmp_path: Path) -> None:
    add_card(tmp_path / "sys", 0, "0x1002", "0x73bf", "0000:0a:00.0")
    missing = run_doctor(make_env(tmp_path, os_release=DEBIAN))
    assert finding(missing, "driver").fix[-1] == "sudo modprobe amdgpu"
    assert "firmware-amd-graphics" in finding(missing, "driver").fix[1]
    env = make_env(tmp_path, modules=("amdgpu",), devices=("kfd", "dri/"))
    report = run_doctor(env)
    assert finding(report, "driver").ok and finding(report, "devices").ok
    assert not any(f.check == "container_runtime" for f in report.findings)


def test_amd_without_kfd(tmp_path: Path) -> None:
    add_card(tmp_path / "sys", 0, "0x1002", "0x73bf", "0000:0a:00.0")
    devices = finding(
        run_doctor(make_env(tmp_path, modules=("amdgpu",), devices=("dri/",))), "devices"
    )
    assert not devices.ok and "/kfd" in devices.summary


def test_intel_module_missing(tmp_path: Path) -> None:
    add_card(tmp_path / "sys", 0, "0x8086", "0x46a6", "0000:00:02.0")
    driver = finding(run_doctor(make_env(tmp_path)), "driver")
    assert not driver.ok and driver.fix == ("sudo modprobe i915",)


def test_real_machine_does_not_raise() -> None:
    report = run_doctor(DoctorEnv(docker_probe=lambda: DockerStatus("x", False)))
    assert report.findings


# --- fixing -------------------------------------------------------------------------------


REPORT = api.DoctorReport(
    vendors=("nvidia",),
    distro="ubuntu",
    findings=(
        api.DoctorFinding(check="driver", ok=False, summary="x", fix=("sudo modprobe nvidia",)),
        api.DoctorFinding(check="docker", ok=True, summary="y", fix=("never run: ok finding",)),
        api.DoctorFinding(
            check="container_runtime", ok=False, summary="z", fix=NVIDIA_RUNTIME_CONFIGURE
        ),
    ),
)


class Recorder:
    def __init__(self, codes: dict[str, int] | None = None) -> None:
        self.ran: list[str] = []
        self.codes = codes or {}

    def __call__(self, command: str) -> int:
        self.ran.append(command)
        return self.codes.get(command, 0)


@pytest.mark.parametrize("answer", ["", "no", "y", "YES ", "yes please"])
def test_nothing_runs_without_a_typed_yes(answer: str) -> None:
    runner = Recorder()
    lines: list[str] = []
    code = apply_fixes(REPORT, confirm=lambda prompt: answer, runner=runner, out=lines.append)
    assert code == 1
    assert runner.ran == []
    assert "not confirmed: nothing was run" in lines
    assert "  sudo modprobe nvidia" in lines  # the person saw what would run


def test_end_of_input_is_no() -> None:
    def eof(prompt: str) -> str:
        raise EOFError

    runner = Recorder()
    assert apply_fixes(REPORT, confirm=eof, runner=runner, out=lambda s: None) == 1
    assert runner.ran == []


def test_yes_runs_the_problem_commands_in_order() -> None:
    runner = Recorder()
    assert apply_fixes(REPORT, confirm=lambda p: "yes", runner=runner, out=lambda s: None) == 0
    assert runner.ran == ["sudo modprobe nvidia", *NVIDIA_RUNTIME_CONFIGURE]


def test_a_failing_fix_stops_the_rest() -> None:
    runner = Recorder({"sudo modprobe nvidia": 1})
    assert apply_fixes(REPORT, confirm=lambda p: "yes", runner=runner, out=lambda s: None) == 1
    assert runner.ran == ["sudo modprobe nvidia"]


def test_nothing_to_fix_asks_nothing() -> None:
    ok = api.DoctorReport(vendors=(), distro="debian", findings=())

    def never(prompt: str) -> str:
        raise AssertionError("asked for confirmation with nothing to run")

    assert apply_fixes(ok, confirm=never, runner=Recorder(), out=lambda s: None) == 0
