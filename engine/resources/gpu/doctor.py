"""GPU doctor (NuNet's ``onboard-gpu``): what stands between this machine and GPU jobs.

Each finding says ok or what is wrong, and the exact Debian/Ubuntu commands that fix it.
Reading is side-effect free; ``apply_fixes`` runs the commands only after the person typed
"yes", through an injected runner (tests pass one that records, and assert it is not called
without the confirmation). Every root (/proc, /dev, /sys, /etc) is injectable for tests.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.api import DoctorFinding, DoctorReport, GpuInfo, GpuVendor
from engine.resources.gpu.base import drm_cards
from engine.resources.readiness import (
    DOCKER_NOT_USED,
    NVIDIA_RUNTIME_TOOLS,
    DockerStatus,
    Which,
    docker_url,
    probe_docker,
)

SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

NVIDIA_TOOLKIT_INSTALL = (
    "curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | sudo gpg --dearmor "
    "--yes -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg",
    "curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/"
    "nvidia-container-toolkit.list | sed 's#deb https://#deb [signed-by=/usr/share/keyrings/"
    "nvidia-container-toolkit-keyring.gpg] https://#g' | sudo tee "
    "/etc/apt/sources.list.d/nvidia-container-toolkit.list",
    "sudo apt-get update",
    "sudo apt-get install -y nvidia-container-toolkit",
)
NVIDIA_RUNTIME_CONFIGURE = (
    "sudo nvidia-ctk runtime configure --runtime=docker",
    "sudo systemctl restart docker",
)

CommandRunner = Callable[[list[str]], tuple[int, str]]


def _run_quiet(argv: list[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, str(exc)
    return done.returncode, (done.stdout + done.stderr).strip()


@dataclass(frozen=True)
class DoctorEnv:
    """Where the doctor looks; tests point every root at a folder they built."""

    proc_root: Path = Path("/proc")
    dev_root: Path = Path("/dev")
    sys_root: Path = Path("/sys")
    etc_root: Path = Path("/etc")
    wsl_lib: Path = Path("/usr/lib/wsl/lib")
    which: Which = shutil.which
    run: CommandRunner = _run_quiet
    docker_probe: Callable[[], DockerStatus] | None = None
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    is_root: bool = field(default_factory=lambda: os.geteuid() == 0)


def run_doctor(
    env: DoctorEnv | None = None,
    gpus: tuple[GpuInfo, ...] = (),
    executors: Sequence[str] = ("docker",),
) -> DoctorReport:
    """Every finding, in the order a person fixes them; never raises. Without Docker among
    ``executors`` (the node's [jobs] executors), Docker and its GPU runtime are not needed."""
    env = env or DoctorEnv()
    distro = _distro(env.etc_root)
    wsl = _is_wsl(env.proc_root)
    modules = _modules(env.proc_root)
    vendors = _vendors(env, gpus, wsl, modules)
    findings: list[DoctorFinding] = [_vendor_finding(vendors, wsl)]
    findings.append(_wsl_finding(env, wsl, vendors))
    for vendor in vendors:
        if vendor == "nvidia" and not wsl:
            findings += _nvidia_driver(env, modules, distro)
        elif vendor == "amd":
            findings += _amd_driver(env, modules, distro)
        elif vendor == "intel":
            findings += _intel_driver(env, modules)
    if "docker" not in executors:
        findings.append(DoctorFinding(check="docker", ok=True, summary=DOCKER_NOT_USED))
    else:
        docker = _docker_status(env)
        findings.append(_docker_finding(docker))
        if "nvidia" in vendors:
            findings.append(_nvidia_runtime(env, docker))
    findings.append(_secure_boot(env, vendors, modules, wsl))
    return DoctorReport(vendors=tuple(vendors), distro=distro, findings=tuple(findings))


# --- what is there --------------------------------------------------------------------------


def _distro(etc_root: Path) -> str:
    try:
        text = (etc_root / "os-release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown"
    values = dict(
        (key, value.strip().strip('"'))
        for key, _, value in (line.partition("=") for line in text.splitlines())
    )
    ids = f"{values.get('ID', '')} {values.get('ID_LIKE', '')}".lower()
    if "ubuntu" in ids:
        return "ubuntu"
    if "debian" in ids:
        return "debian"
    return values.get("ID", "unknown") or "unknown"


def _is_wsl(proc_root: Path) -> bool:
    try:
        return "microsoft" in (proc_root / "version").read_text(errors="replace").lower()
    except OSError:
        return False


def _modules(proc_root: Path) -> set[str]:
    try:
        text = (proc_root / "modules").read_text(errors="replace")
    except OSError:
        return set()
    return {line.split(" ", 1)[0] for line in text.splitlines() if line.strip()}


def _vendors(
    env: DoctorEnv, gpus: tuple[GpuInfo, ...], wsl: bool, modules: set[str]
) -> list[GpuVendor]:
    found: set[GpuVendor] = {gpu.vendor for gpu in gpus}
    with contextlib.suppress(Exception):
        found |= {card.vendor for card in drm_cards(env.sys_root)}
    if (env.proc_root / "driver" / "nvidia").exists() or "nvidia" in modules:
        found.add("nvidia")
    if wsl and (env.wsl_lib / "libnvidia-ml.so.1").exists():
        found.add("nvidia")
    order: list[GpuVendor] = ["nvidia", "amd", "intel"]
    return [vendor for vendor in order if vendor in found]


def _docker_status(env: DoctorEnv) -> DockerStatus:
    try:
        return (env.docker_probe or (lambda: probe_docker(env.environ)))()
    except Exception as exc:
        return DockerStatus(docker_url(env.environ), False, error=f"{type(exc).__name__}: {exc}")


# --- findings -------------------------------------------------------------------------------

_LABEL = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}


def _vendor_finding(vendors: list[GpuVendor], wsl: bool) -> DoctorFinding:
    if vendors:
        names = ", ".join(_LABEL[v] for v in vendors)
        return DoctorFinding(check="vendor", ok=True, summary=f"GPU vendor: {names}")
    detail = (
        "WSL shows no GPU: install the Windows NVIDIA driver and run `wsl --update` in Windows"
        if wsl
        else "no NVIDIA, AMD or Intel GPU on the PCI bus (in a VM, pass the GPU through); "
        "CPU-only jobs still work"
    )
    return DoctorFinding(check="vendor", ok=False, summary="no GPU found", detail=detail)


def _wsl_finding(env: DoctorEnv, wsl: bool, vendors: list[GpuVendor]) -> DoctorFinding:
    if not wsl:
        return DoctorFinding(check="wsl", ok=True, summary="not running under WSL")
    if "nvidia" in vendors or not vendors:
        dxg = (env.dev_root / "dxg").exists()
        lib = (env.wsl_lib / "libnvidia-ml.so.1").exists()
        if dxg and lib:
            return DoctorFinding(
                check="wsl",
                ok=True,
                summary="WSL 2 with GPU paravirtualisation (/dev/dxg)",
                detail="the driver is the Windows one: do not install a Linux NVIDIA driver",
            )
        return DoctorFinding(
            check="wsl",
            ok=False,
            summary="WSL without GPU access (no /dev/dxg or /usr/lib/wsl/lib/libnvidia-ml.so.1)",
            detail="install the current NVIDIA driver for Windows and run `wsl --update` in "
            "Windows PowerShell; never install a Linux NVIDIA driver inside WSL",
        )
    return DoctorFinding(check="wsl", ok=True, summary="WSL 2")


def _nvidia_driver(env: DoctorEnv, modules: set[str], distro: str) -> list[DoctorFinding]:
    version = _nvidia_version(env.proc_root)
    if "nvidia" not in modules and version is None:
        if env.which("nvidia-smi"):
            fix: tuple[str, ...] = ("sudo modprobe nvidia", "sudo modprobe nvidia_uvm")
            detail = (
                "the driver is installed but its kernel module is not loaded (a kernel update "
                "without rebuilt DKMS modules, or Secure Boot refusing an unsigned module)"
            )
        else:
            fix = _nvidia_install(distro)
            detail = "no NVIDIA driver installed; reboot after installing it"
            if distro == "debian":
                detail += (
                    " (Debian: enable the contrib, non-free and non-free-firmware components "
                    "in your APT sources first)"
                )
        return [
            DoctorFinding(
                check="driver",
                ok=False,
                summary="NVIDIA kernel module not loaded (nvidia missing from /proc/modules)",
                detail=detail,
                fix=fix,
            )
        ]
    extras = [m for m in ("nvidia_uvm", "nvidia_drm") if m in modules]
    summary = f"NVIDIA driver {version} loaded" if version else "NVIDIA kernel module loaded"
    findings = [
        DoctorFinding(
            check="driver",
            ok=True,
            summary=summary,
            detail=f"modules: nvidia{''.join(', ' + m for m in extras)}"
            + ("" if "nvidia_uvm" in modules else " (nvidia_uvm loads on first CUDA use)"),
        )
    ]
    nodes = sorted(p.name for p in _glob(env.dev_root, "nvidia[0-9]*"))
    ctl = (env.dev_root / "nvidiactl").exists()
    if ctl and nodes:
        findings.append(
            DoctorFinding(
                check="devices",
                ok=True,
                summary=f"device nodes present: nvidiactl, {', '.join(nodes)}",
            )
        )
    else:
        findings.append(
            DoctorFinding(
                check="devices",
                ok=False,
                summary="NVIDIA device nodes missing (/dev/nvidiactl, /dev/nvidia0...)",
                detail="the module is loaded but nothing created its device files",
                fix=("sudo nvidia-modprobe -c 0 -u",)
                if env.which("nvidia-modprobe")
                else ("sudo modprobe nvidia_uvm", "sudo apt-get install -y nvidia-modprobe"),
            )
        )
    return findings


def _nvidia_install(distro: str) -> tuple[str, ...]:
    if distro == "ubuntu":
        return (
            "sudo apt-get update",
            "sudo apt-get install -y ubuntu-drivers-common",
            "sudo ubuntu-drivers install",
        )
    return (
        "sudo apt-get update",
        "sudo apt-get install -y linux-headers-$(uname -r) nvidia-driver firmware-misc-nonfree",
    )


def _nvidia_version(proc_root: Path) -> str | None:
    try:
        text = (proc_root / "driver" / "nvidia" / "version").read_text(errors="replace")
    except OSError:
        return None
    match = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]*)", text)
    return match.group(1) if match else "(unknown version)"


def _amd_driver(env: DoctorEnv, modules: set[str], distro: str) -> list[DoctorFinding]:
    findings: list[DoctorFinding] = []
    if "amdgpu" not in modules and not (env.sys_root / "module" / "amdgpu").exists():
        firmware = "linux-firmware" if distro == "ubuntu" else "firmware-amd-graphics"
        return [
            DoctorFinding(
                check="driver",
                ok=False,
                summary="amdgpu kernel module not loaded",
                detail="reboot after installing the firmware if modprobe still fails",
                fix=(
                    "sudo apt-get update",
                    f"sudo apt-get install -y {firmware}",
                    "sudo modprobe amdgpu",
                ),
            )
        ]
    findings.append(DoctorFinding(check="driver", ok=True, summary="amdgpu kernel module loaded"))
    findings.append(_device_nodes(env, "AMD", ("kfd", "dri")))
    return findings


def _intel_driver(env: DoctorEnv, modules: set[str]) -> list[DoctorFinding]:
    loaded = [m for m in ("xe", "i915") if m in modules]
    if not loaded:
        return [
            DoctorFinding(
                check="driver",
                ok=False,
                summary="no Intel GPU kernel module loaded (i915 or xe)",
                fix=("sudo modprobe i915",),
            )
        ]
    return [
        DoctorFinding(check="driver", ok=True, summary=f"Intel {loaded[0]} module loaded"),
        _device_nodes(env, "Intel", ("dri",)),
    ]


def _device_nodes(env: DoctorEnv, label: str, names: tuple[str, ...]) -> DoctorFinding:
    nodes = [env.dev_root / name for name in names]
    missing = [str(n) for n in nodes if not n.exists()]
    if missing:
        return DoctorFinding(
            check="devices",
            ok=False,
            summary=f"{label} device nodes missing: {', '.join(missing)}",
            detail="ROCm needs /dev/kfd from the amdgpu driver (kernel built with HSA_AMD)"
            if label == "AMD"
            else "",
        )
    if not env.is_root and not all(os.access(n, os.R_OK | os.W_OK) for n in nodes):
        return DoctorFinding(
            check="devices",
            ok=False,
            summary=f"no access to {', '.join(str(n) for n in nodes)}",
            detail="log out and in again after adding the groups",
            fix=("sudo usermod -aG video,render $USER",),
        )
    return DoctorFinding(
        check="devices", ok=True, summary=f"{', '.join(str(n) for n in nodes)} usable"
    )


def _docker_finding(docker: DockerStatus) -> DoctorFinding:
    if docker.reachable:
        version = f" {docker.server_version}" if docker.server_version else ""
        return DoctorFinding(
            check="docker", ok=True, summary=f"Docker engine{version} reachable at {docker.url}"
        )
    if docker.error == "permission denied":
        return DoctorFinding(
            check="docker",
            ok=False,
            summary=f"no permission to use the Docker engine at {docker.url}",
            detail="log out and in again after adding the group",
            fix=("sudo usermod -aG docker $USER",),
        )
    return DoctorFinding(
        check="docker",
        ok=False,
        summary=f"no Docker engine at {docker.url}",
        detail=docker.error or "",
        fix=(
            "sudo apt-get update",
            "sudo apt-get install -y docker.io",
            "sudo systemctl enable --now docker",
        ),
    )


def _nvidia_runtime(env: DoctorEnv, docker: DockerStatus) -> DoctorFinding:
    tools = [tool for tool in NVIDIA_RUNTIME_TOOLS if env.which(tool)]
    if "nvidia" in docker.runtimes:
        return DoctorFinding(
            check="container_runtime", ok=True, summary="Docker has the nvidia runtime"
        )
    if tools:
        if docker.reachable:
            return DoctorFinding(
                check="container_runtime",
                ok=False,
                summary="nvidia-container-toolkit installed but not configured for Docker",
                detail=f"found {', '.join(tools)}; Docker lists runtimes: "
                f"{', '.join(docker.runtimes) or 'none'}",
                fix=NVIDIA_RUNTIME_CONFIGURE,
            )
        return DoctorFinding(
            check="container_runtime",
            ok=True,
            summary=f"nvidia-container-toolkit installed ({', '.join(tools)})",
            detail="configure Docker with it once the engine runs",
        )
    return DoctorFinding(
        check="container_runtime",
        ok=False,
        summary="no NVIDIA container runtime (nvidia-container-toolkit is not installed)",
        detail="containers cannot be given NVIDIA GPUs without it",
        fix=NVIDIA_TOOLKIT_INSTALL + NVIDIA_RUNTIME_CONFIGURE,
    )


def _secure_boot(
    env: DoctorEnv, vendors: list[GpuVendor], modules: set[str], wsl: bool
) -> DoctorFinding:
    state = _secure_boot_state(env)
    if wsl:
        return DoctorFinding(check="secure_boot", ok=True, summary="Secure Boot: n/a under WSL")
    if state is None:
        return DoctorFinding(
            check="secure_boot",
            ok=True,
            summary="Secure Boot: not applicable (legacy BIOS boot or state not readable)",
        )
    if not state:
        return DoctorFinding(check="secure_boot", ok=True, summary="Secure Boot disabled")
    if "nvidia" in vendors and "nvidia" not in modules:
        return DoctorFinding(
            check="secure_boot",
            ok=False,
            summary="Secure Boot enabled and the NVIDIA module is not loaded",
            detail="Secure Boot only loads signed modules: enroll the DKMS signing key "
            "(you choose a password now, then reboot and confirm it in the blue MOK manager), "
            "or disable Secure Boot in the firmware settings",
            fix=("sudo mokutil --import /var/lib/dkms/mok.pub",),
        )
    return DoctorFinding(
        check="secure_boot",
        ok=True,
        summary="Secure Boot enabled",
        detail="third-party kernel modules must be signed with an enrolled key",
    )


def _secure_boot_state(env: DoctorEnv) -> bool | None:
    """True/False when known; None when the machine did not boot with UEFI."""
    if env.which("mokutil"):
        _code, out = env.run(["mokutil", "--sb-state"])
        text = out.lower()
        if "enabled" in text:
            return True
        if "disabled" in text:
            return False
    efivar = env.sys_root / "firmware" / "efi" / "efivars" / SECURE_BOOT_VAR
    try:
        data = efivar.read_bytes()
    except OSError:
        return False if (env.sys_root / "firmware" / "efi").exists() else None
    # 4 bytes of attributes, then the one-byte value.
    return bool(data[4]) if len(data) >= 5 else None


def _glob(folder: Path, pattern: str) -> list[Path]:
    try:
        return list(folder.glob(pattern))
    except OSError:
        return []


# --- fixing ---------------------------------------------------------------------------------


Confirm = Callable[[str], str]
ShellRunner = Callable[[str], int]


def default_shell_runner(command: str) -> int:
    """Run one fix command through the shell (they use pipes, $(uname -r) and $USER)."""
    if os.geteuid() == 0 and command.startswith("sudo "):
        command = command[len("sudo ") :]
    print(f"$ {command}", flush=True)
    return subprocess.run(command, shell=True, check=False).returncode


def apply_fixes(
    report: DoctorReport,
    *,
    confirm: Confirm,
    runner: ShellRunner,
    out: Callable[[str], None] = print,
) -> int:
    """Show the commands, run them only if the answer is exactly "yes"; an exit status."""
    commands = report.fixes
    if not commands:
        out("nothing to fix: no finding has a command to run")
        return 0
    out("These commands would fix what the doctor found:")
    for command in commands:
        out(f"  {command}")
    try:
        answer = confirm(f"Type yes to run these {len(commands)} commands: ")
    except EOFError:
        answer = ""
    if answer.strip() != "yes":
        out("not confirmed: nothing was run")
        return 1
    for command in commands:
        code = runner(command)
        if code != 0:
            out(f"stopped: `{command}` exited with {code}")
            return code
    out("done; run `nunet-tui gpu doctor` again (some fixes need a reboot or a new login)")
    return 0
