"""Can this machine run ML jobs? Docker, the GPU driver and the GPU container runtime.

Each check says what is missing and what to do. The probes are bounded in time (the Docker
call runs in a worker thread that is abandoned after its deadline) and never raise: a
readiness panel must appear even on a machine where everything is broken. Whether the process
executor can sandbox its jobs is the jobs room's to say: its probe is handed in
(``sandbox_probe``, engine/ports.py ``SandboxProbe``; engine/probes.py passes the real one).
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from engine.api import Check, GpuInfo, Readiness
from engine.ports import SandboxProbe
from engine.resources.container_engine import EngineFacts, probe_facts

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
# Podman answers /info in ~0.7 s on two busy cores (it sums its store); Docker in ~10 ms.
DOCKER_TIMEOUT_S = 2.0
NO_GPU = "no GPU detected (CPU-only jobs)"
NVIDIA_RUNTIME_TOOLS = (
    "nvidia-container-runtime",
    "nvidia-container-toolkit",
    "nvidia-container-runtime-hook",
    "nvidia-ctk",
)

_NVIDIA_VERSION = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]*)")


@dataclass(frozen=True)
class DockerStatus:
    """What one look at the Docker engine found."""

    url: str
    reachable: bool
    server_version: str | None = None
    runtimes: tuple[str, ...] = ()
    error: str | None = None
    facts: EngineFacts | None = None  # Docker or Podman, rootless, the limits it ignores


DockerProbe = Callable[[], DockerStatus]
Which = Callable[[str], str | None]


def check_readiness(
    gpus: tuple[GpuInfo, ...],
    *,
    docker_probe: DockerProbe | None = None,
    sandbox_probe: SandboxProbe | None = None,
    proc_root: Path = Path("/proc"),
    dev_root: Path = Path("/dev"),
    which: Which = shutil.which,
    environ: Mapping[str, str] | None = None,
) -> Readiness:
    """The checks for ``gpus`` (as detected); never raises, 2.5 s at worst. Without
    ``sandbox_probe`` the process executor's sandbox is not judged (``sandbox`` is None)."""
    env = os.environ if environ is None else environ
    probe = docker_probe or (lambda: probe_docker(env))
    docker = _bounded(probe, docker_url(env), DOCKER_TIMEOUT_S + 0.5)
    return Readiness(
        docker=_docker_check(docker),
        gpu_driver=_guarded(lambda: gpu_driver_check(gpus, proc_root, dev_root)),
        gpu_runtime=_guarded(lambda: gpu_runtime_check(gpus, docker, dev_root, which)),
        sandbox=None if sandbox_probe is None else _guarded(lambda: sandbox_check(sandbox_probe)),
    )


# What a node that runs no container jobs hears instead of a Docker problem.
DOCKER_NOT_USED = "not used: jobs run with the process executor here ([jobs] executors)"
GPU_RUNTIME_NOT_USED = (
    "not used: GPU jobs need the docker executor, which this node does not run ([jobs] executors)"
)


def for_executors(readiness: Readiness, executors: Sequence[str]) -> Readiness:
    """The checks that matter for the executors this node runs: without Docker among them, a
    missing Docker engine (or GPU container runtime) is nothing to fix; without the process
    executor, neither is its sandbox."""
    if "docker" not in executors:
        readiness = msgspec.structs.replace(
            readiness,
            docker=Check(ok=True, detail=DOCKER_NOT_USED),
            gpu_runtime=Check(ok=True, detail=GPU_RUNTIME_NOT_USED),
        )
    if "process" not in executors and readiness.sandbox is not None:
        readiness = msgspec.structs.replace(readiness, sandbox=None)  # no process jobs here
    return readiness


def sandbox_check(probe: SandboxProbe) -> Check:
    """The process executor's job sandbox, as its ``probe`` finds it: usable here, or why not
    (a loud line: without it a process job runs as this user and reads what it can read)."""
    status = probe()
    if status.usable:
        return Check(ok=True, detail=status.detail)
    return Check(ok=False, detail=f"process jobs would run UNSANDBOXED: {status.detail}")


def docker_url(environ: Mapping[str, str]) -> str:
    return environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


def probe_docker(environ: Mapping[str, str] | None = None) -> DockerStatus:
    """Ask the Docker engine (DOCKER_HOST or the default socket) for its version and runtimes."""
    env = os.environ if environ is None else environ
    url = docker_url(env)
    if url.startswith("unix://"):
        # Skip the SDK (a 0.2 s import) when there is plainly no socket to talk to.
        socket_path = Path(url.removeprefix("unix://"))
        if not socket_path.exists():
            return DockerStatus(url, False, error="no such socket")
        if not os.access(socket_path, os.R_OK | os.W_OK):
            return DockerStatus(url, False, error="permission denied")
    try:
        import docker

        client = docker.DockerClient(base_url=url, timeout=DOCKER_TIMEOUT_S, version="auto")
        try:
            info = client.info()
            try:
                facts: EngineFacts | None = probe_facts(client)
            except Exception:  # an engine that answers /info but not /version: still there
                facts = None
        finally:
            client.close()
    except Exception as exc:
        text = str(exc)
        if "Permission denied" in text or "PermissionError" in text:
            return DockerStatus(url, False, error="permission denied")
        return DockerStatus(url, False, error=text[:200])
    runtimes = info.get("Runtimes") or {}
    return DockerStatus(
        url,
        True,
        server_version=str(info.get("ServerVersion") or "") or None,
        runtimes=tuple(sorted(runtimes)) if isinstance(runtimes, dict) else (),
        facts=facts,
    )


def gpu_driver_check(gpus: tuple[GpuInfo, ...], proc_root: Path, dev_root: Path) -> Check:
    if not gpus:
        return Check(ok=False, detail=NO_GPU)
    checks: list[Check] = []
    vendors = {gpu.vendor for gpu in gpus}
    if "nvidia" in vendors:
        checks.append(_nvidia_driver(proc_root, dev_root))
    if "amd" in vendors:
        checks.append(
            Check(ok=True, detail="AMD amdgpu/ROCm driver loaded (/dev/kfd)")
            if (dev_root / "kfd").exists()
            else Check(ok=False, detail="AMD GPU found but no /dev/kfd: install ROCm's amdgpu")
        )
    if "intel" in vendors:
        checks.append(
            Check(ok=True, detail="Intel GPU driver loaded (/dev/dri)")
            if (dev_root / "dri").is_dir()
            else Check(ok=False, detail="Intel GPU found but no /dev/dri: load i915 or xe")
        )
    return _combine(checks)


def gpu_runtime_check(
    gpus: tuple[GpuInfo, ...], docker: DockerStatus, dev_root: Path, which: Which
) -> Check:
    if not gpus:
        return Check(ok=False, detail=NO_GPU)
    checks: list[Check] = []
    vendors = {gpu.vendor for gpu in gpus}
    if "nvidia" in vendors:
        checks.append(_nvidia_runtime(docker, which))
    if "amd" in vendors:
        checks.append(_device_access("AMD", (dev_root / "kfd", dev_root / "dri")))
    if "intel" in vendors:
        checks.append(_device_access("Intel", (dev_root / "dri",)))
    return _combine(checks)


def _nvidia_driver(proc_root: Path, dev_root: Path) -> Check:
    try:
        text = (proc_root / "driver" / "nvidia" / "version").read_text(errors="replace")
    except OSError:
        text = ""
    match = _NVIDIA_VERSION.search(text)
    if match:
        return Check(ok=True, detail=f"NVIDIA driver {match.group(1)} loaded")
    if text or (dev_root / "nvidiactl").exists():
        return Check(ok=True, detail="NVIDIA driver loaded (/dev/nvidiactl)")
    return Check(
        ok=False,
        detail="NVIDIA driver not loaded (no /proc/driver/nvidia/version): install the driver",
    )


def _nvidia_runtime(docker: DockerStatus, which: Which) -> Check:
    found = _nvidia_runtime_found(docker, which)
    if found.ok and docker.facts is not None and docker.facts.rootless:
        # The toolkit's hook sets up device cgroups, which a rootless engine may not touch.
        return Check(
            ok=found.ok,
            detail=f"{found.detail}; {docker.facts.name} is rootless: give containers the "
            "GPUs through CDI (`nvidia-ctk cdi generate`) and set no-cgroups = true in "
            "/etc/nvidia-container-runtime/config.toml",
        )
    return found


def _nvidia_runtime_found(docker: DockerStatus, which: Which) -> Check:
    if "nvidia" in docker.runtimes:
        return Check(ok=True, detail="Docker has the nvidia runtime")
    for tool in NVIDIA_RUNTIME_TOOLS:
        path = which(tool)
        if path:
            return Check(ok=True, detail=f"NVIDIA container toolkit found ({path})")
    return Check(
        ok=False,
        detail="no NVIDIA container runtime: install nvidia-container-toolkit, "
        "run `nvidia-ctk runtime configure --runtime=docker` and restart dockerd",
    )


def _device_access(vendor: str, devices: tuple[Path, ...]) -> Check:
    missing = [str(d) for d in devices if not d.exists()]
    if missing:
        return Check(ok=False, detail=f"{vendor} GPU devices missing: {', '.join(missing)}")
    denied = [str(d) for d in devices if not _usable(d)]
    if denied:
        groups = "add your user to the video and render groups"
        return Check(ok=False, detail=f"no access to {', '.join(denied)}: {groups}")
    names = " and ".join(str(d) for d in devices)
    return Check(ok=True, detail=f"{vendor} containers can be given {names}")


def _usable(device: Path) -> bool:
    # A device node needs read+write; the /dev/dri folder also needs search (x) to reach nodes.
    mode = os.R_OK | os.W_OK | (os.X_OK if device.is_dir() else 0)
    return os.access(device, mode)


def _docker_check(status: DockerStatus) -> Check:
    if status.reachable:
        facts = status.facts
        if facts is None or (facts.name == "Docker" and not facts.rootless):
            version = f" (server {status.server_version})" if status.server_version else ""
            reached = f"Docker engine reachable at {status.url}{version}"
        else:
            reached = f"{facts.label} reachable at {status.url}"
        problem = facts.limits_problem() if facts is not None else ""
        if problem:
            # A provider cannot sell a spec it cannot bound: not ready until this is fixed.
            return Check(ok=False, detail=f"{reached}, but {problem}")
        return Check(ok=True, detail=reached)
    if status.error == "permission denied":
        return Check(
            ok=False,
            detail=f"no permission to use the Docker engine at {status.url}: "
            "add your user to the docker group and log in again",
        )
    if status.error and status.error.startswith("timed out"):
        return Check(ok=False, detail=f"Docker engine at {status.url} {status.error}")
    return Check(
        ok=False, detail=f"no Docker engine at {status.url}: start dockerd or set DOCKER_HOST"
    )


def _bounded(probe: DockerProbe, url: str, deadline_s: float) -> DockerStatus:
    """Run ``probe`` in a daemon thread; a hung engine costs ``deadline_s``, not forever."""
    box: list[DockerStatus] = []

    def run() -> None:
        try:
            box.append(probe())
        except Exception as exc:
            box.append(DockerStatus(url, False, error=f"{type(exc).__name__}: {exc}"[:200]))

    worker = threading.Thread(target=run, name="readiness-docker", daemon=True)
    worker.start()
    worker.join(deadline_s)
    if box:
        return box[0]
    return DockerStatus(url, False, error=f"timed out: no answer within {deadline_s:.1f} s")


def _guarded(check: Callable[[], Check]) -> Check:
    try:
        return check()
    except Exception as exc:
        return Check(ok=False, detail=f"check failed: {type(exc).__name__}: {exc}")


def _combine(checks: list[Check]) -> Check:
    if len(checks) == 1:
        return checks[0]
    return Check(ok=all(c.ok for c in checks), detail="; ".join(c.detail for c in checks))
