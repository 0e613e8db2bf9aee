"""The process executor's sandbox: each job in its own bubblewrap (``bwrap``) namespaces.

Before, a process job ran as the provider's own user with nothing but rlimits around it:
`job shell` was a root shell on a root provider, and the job read the provider's identity key,
every other job's folder, and drove the provider's control socket. Now each job (its script,
and every `job shell` into it) runs as uid/gid 65534 with no capabilities, in new user, mount,
PID, IPC, UTS, cgroup and network namespaces, and cannot make user namespaces of its own:

- its filesystem is built from nothing: the system's /usr (with the /bin, /lib... links), a
  short list of /etc files (no shadow, no ssh keys), the Python the provider runs and its
  site-packages, its own venv, all read-only; its workspace, the one thing it may write; a
  fresh /dev, a /proc of its own PID namespace, a private /tmp (a tmpfs of ``tmp_mb``). The
  provider's home, data and keys, its control socket, other jobs' folders and the host's
  /tmp are simply not there;
- its network is a loopback of its own: nothing on the provider's 127.0.0.1, no LAN, no
  internet. The tunnel reaches the job's listener from inside that namespace
  (``connect_argv``), so `job forward` still works and nothing else can be reached by it;
- it sees only its own processes; when the sandbox's first process (bwrap's init) dies, the
  kernel kills everything in it, so a job that escaped its process group still goes;
- installing its dependencies (pip, which runs an sdist's build code) gets a sandbox of its
  own (``wrap_install``): the same, but with the host's network for the package index, its
  venv writable and a scratch folder on disk as /tmp.

The provider's uid outside: on a root provider the job's uid 65534 maps to root outside (what
bwrap does when root runs it: mapping another uid needs newuidmap, and an unprivileged bwrap
could not reach a provider's Python under /root). It has no capabilities in any namespace and
sees only what is bound in, read-only but its workspace, so a file's owner outside grants it
nothing more. On a non-root provider it is the provider's uid, as with any unprivileged bwrap.

Where the host cannot (no bwrap, or user namespaces refused), jobs run unsandboxed with a loud
warning, or not at all when the provider asks for ``jobs.process_sandbox = "require"``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from engine.api import GpuInfo

JOB_UID = 65534
JOB_GID = 65534
HOSTNAME = "nunet-job"
PROBE_TIMEOUT_S = 20.0
# /etc files a job may read: names, resolution, certificates, the dynamic linker, locales.
# An allow-list: /etc/shadow, /etc/ssh, sudoers and whatever else a host keeps there stay out.
ETC_FILES = (
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
    "mime.types",
    "bash.bashrc",
    "profile",
    "inputrc",
    "terminfo",
    "os-release",
    "debian_version",
    "matplotlibrc",
)
# ... and for the one step that uses the network (installing a job's dependencies).
NETWORK_ETC_FILES = ("resolv.conf", "gai.conf", "pip.conf")
# The links a merged-/usr system has at its root; real folders elsewhere are bound as they are.
ROOT_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# The NVIDIA driver's nodes every CUDA job opens besides its own card's.
NVIDIA_SHARED = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


@dataclass(frozen=True)
class SandboxStatus:
    usable: bool
    detail: str  # what works, or why not and what to do


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def probe() -> SandboxStatus:
    """Whether a job sandbox can be made here: bwrap found and a trial sandbox runs (a
    container without user namespaces, or a kernel that refuses them, fails here)."""
    bwrap = bwrap_path()
    if bwrap is None:
        return SandboxStatus(
            False, "bwrap not found: install bubblewrap (apt-get install bubblewrap)"
        )
    argv = [bwrap, *_namespaces(), *_system_binds(), "--", "/bin/true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxStatus(False, f"bwrap cannot run: {exc}")
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["failed"]
        return SandboxStatus(
            False, f"bwrap cannot make a sandbox here ({why[0][:200]}): user namespaces refused?"
        )
    return SandboxStatus(True, "process jobs run in a bubblewrap sandbox")


def _namespaces(network: bool = False) -> list[str]:
    return [
        "--unshare-user",
        "--unshare-ipc",
        "--unshare-pid",
        *([] if network else ["--unshare-net"]),
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--disable-userns",  # no nested user namespace, and so no capabilities, ever
        "--uid",
        str(JOB_UID),
        "--gid",
        str(JOB_GID),
        "--hostname",
        HOSTNAME,
        "--die-with-parent",
        "--cap-drop",
        "ALL",
    ]


def _system_binds(network: bool = False) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ROOT_DIRS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in (*ETC_FILES, *(NETWORK_ETC_FILES if network else ())):
        path = Path("/etc") / name
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--dev", "/dev", "--proc", "/proc"]
    return args


def python_paths(python: str = sys.executable) -> list[Path]:
    """What a job's venv needs to run: the interpreter's installation and the provider's own
    site-packages (listed in the venv's _nunet_host_site.pth), read-only."""
    import site

    paths = {Path(sys.base_prefix), Path(sys.prefix), *map(Path, site.getsitepackages())}
    real = Path(os.path.realpath(python)).parent.parent
    paths.add(real)
    return sorted(p for p in paths if p.is_dir() and str(p) != "/")


def wrap(
    argv: list[str],
    *,
    workspace: Path,
    read_only: Iterable[Path],
    tmp_mb: int,
    devices: Iterable[str] = (),
    inputs: Iterable[tuple[Path, Path]] = (),
) -> list[str]:
    """``argv`` run inside a new sandbox whose only writable folder is ``workspace``. Paths
    keep their names inside (the venv's own paths, HOME = the workspace, stay valid).
    ``inputs``: (source, a path in the workspace) bound read-only over it."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise FileNotFoundError("bwrap")
    args = [bwrap, *_namespaces(), *_system_binds()]
    args += ["--size", str(max(1, tmp_mb) << 20), "--tmpfs", "/tmp"]
    for path in read_only:
        args += ["--ro-bind", str(path), str(path)]
    for name in devices:
        if (Path("/dev") / name).exists():
            args += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    args += ["--bind", str(workspace), str(workspace), "--chdir", str(workspace)]
    for source, target in inputs:  # after the workspace: bound over paths inside it
        args += ["--ro-bind", str(source), str(target)]
    # bwrap's root is a tmpfs holding the folders it made for the binds (the workspace's
    # parents among them): read-only too, so the workspace and /tmp are all a job writes.
    args += ["--remount-ro", "/"]
    return [*args, "--", *argv]


def wrap_install(
    argv: list[str], *, venv: Path, scratch: Path, read_only: Iterable[Path]
) -> list[str]:
    """``argv`` (pip installing a job's dependencies) in a sandbox of its own: a package's
    build runs code of whoever published it, so it gets what a job gets, but the network
    (the package index), its venv writable and ``scratch`` as its /tmp and HOME (downloads
    are too big for a tmpfs)."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise FileNotFoundError("bwrap")
    args = [bwrap, *_namespaces(network=True), *_system_binds(network=True)]
    args += ["--bind", str(scratch), "/tmp"]
    for path in read_only:
        args += ["--ro-bind", str(path), str(path)]
    args += ["--bind", str(venv), str(venv), "--chdir", "/tmp", "--remount-ro", "/"]
    return [*args, "--", *argv]


def local_paths(args: Iterable[str]) -> list[Path]:
    """The provider's own local folders and files among pip's arguments (``--find-links
    DIR``, a ``file://`` wheel): read-only in the install's sandbox, so they still serve."""
    from urllib.parse import unquote, urlsplit

    found = []
    for arg in args:
        for part in arg.replace(" @ ", " ").split():
            text = unquote(urlsplit(part).path) if part.startswith("file:") else part
            path = Path(text)
            if path.is_absolute() and path.exists():
                found.append(path if path.is_dir() else path.parent)
    return found


def gpu_devices(gpus: Iterable[GpuInfo]) -> tuple[str, ...]:
    """The /dev names a job given ``gpus`` needs: its own NVIDIA cards (``nvidiaN`` by index,
    as the driver numbers them) and the driver's shared nodes; AMD's kfd and dri; Intel's dri.
    Nothing for a CPU job: bwrap's /dev has no GPU at all."""
    names: list[str] = []
    for gpu in gpus:
        if gpu.vendor == "nvidia":
            names += [f"nvidia{gpu.index}", *NVIDIA_SHARED]
        else:
            names += ["kfd", "dri"] if gpu.vendor == "amd" else ["dri"]
    return tuple(dict.fromkeys(names))


# --- reaching into a running sandbox ---------------------------------------------------------


def inside(pid: int) -> bool:
    """Whether ``pid`` runs in another network namespace than ours (inside a sandbox)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return False


def _enter_user() -> list[str]:
    # Root may enter the job's namespaces as it is; another provider enters the job's user
    # namespace (its own: it owns it) first, which gives it the right to enter the others.
    return [] if os.geteuid() == 0 else ["--user", "--preserve-credentials"]


CONNECT_HELPER = Path(__file__).with_name("sandbox_connect.py")


def connect_argv(pid: int, address: str, port: int, fd: int) -> list[str]:
    """A helper that connects to ``address``:``port`` in ``pid``'s network namespace and
    hands the connected socket back on ``fd`` (a Unix socket), then exits."""
    return [
        shutil.which("nsenter") or "nsenter",
        f"--target={pid}",
        *_enter_user(),
        "--net",
        "--",
        sys.executable,
        "-I",
        str(CONNECT_HELPER),
        address,
        str(port),
        str(fd),
    ]


def shell_argv(pid: int, workspace: Path, command: list[str]) -> list[str]:
    """``command`` run in every namespace of the sandbox ``pid`` is in, as the job's user."""
    return [
        shutil.which("nsenter") or "nsenter",
        f"--target={pid}",
        "--user",
        "--mount",
        "--net",
        "--pid",
        "--ipc",
        "--uts",
        "--root",
        f"--setuid={JOB_UID}",
        f"--setgid={JOB_GID}",
        "--",
        # Into the workspace once inside: nsenter's --wd opens its folder before it enters the
        # mount namespace, and the shell's getcwd() then fails.
        "/bin/sh",
        "-c",
        'cd -- "$0" && exec "$@"',
        str(workspace),
        *command,
    ]


def exit_code(returncode: int | None) -> int | None:
    """bwrap reports a job killed by signal N as exit code 128 + N: read it back as -N, as the
    executor reads a signal (its SIGXCPU and SIGXFSZ are how CPU and file limits show)."""
    if returncode is not None and 128 < returncode < 128 + 65:
        return -(returncode - 128)
    return returncode
