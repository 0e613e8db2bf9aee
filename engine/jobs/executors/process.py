"""Jobs as local processes: a venv per job, resource limits, its own process group, and its
own sandbox (sandbox.py).

Each job runs in a bubblewrap sandbox where the host allows one: uid 65534 with no
capabilities, its own user, mount, PID, IPC, UTS and network namespaces; it sees the system's
/usr, a few /etc files, the provider's Python and its own venv, read-only, writes only its
workspace and a private /tmp, and is reached only through the tunnel. Where the host cannot
(no bwrap, user namespaces refused) it runs as the provider's own user with only the limits
below, and the provider's log and readiness say so loudly: nothing then stops a hostile script
from reading files the provider's user can read (``jobs.process_sandbox = "require"`` refuses
such jobs instead). Its environment is built from nothing (no NUNET_*, no keyring or D-Bus
variables, HOME = the workspace) either way.

The venv is made with --system-site-packages and also sees this interpreter's own
site-packages (a .pth file: a venv made from inside a venv otherwise only sees the base
Python's), so numpy, scikit-learn or torch installed for the provider are used as they are,
and a job's own dependencies, installed into its venv, come first.

Why one file of some 660 lines: one executor, ``ProcessExecutor``, whose methods are the
``Executor`` protocol's over one process group per job; the sandbox (sandbox.py), the disk
quota (disk_quota.py) and the shells (pty_shell.py) already live beside it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import trio

from engine.domain import safe_paths
from engine.domain.tunnel_frames import JOB_CONNECT_S
from engine.errors import EngineError
from engine.jobs.executors import sandbox
from engine.jobs.executors.base import (
    ORPHAN_GUARD,
    BaseExecutor,
    ExitStatus,
    JobRun,
    Outcome,
    RunState,
    failure_reason,
    provider_lifeline,
    signal_exit_code,
)
from engine.jobs.executors.disk_quota import file_too_large, wrote_too_large

INSTALL_TIMEOUT_S = 900
GRACE_S = 3.0  # SIGTERM, then SIGKILL after this long
SAMPLE_S = 1.0
log = logging.getLogger("nunet.jobs.process")
SandboxMode = Literal["auto", "require", "off"]
_OOM_MARKERS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "DefaultCPUAllocator")


# The module each framework's jobs import: a process job runs with the provider's own Python
# (its venv sees the host's site-packages), so it has a framework only if that Python has it.
FRAMEWORK_MODULES = {"pytorch": "torch", "tensorflow": "tensorflow", "scikit-learn": "sklearn"}
# How long what was found holds: the demo installs the frameworks in the background, and an
# operator may pip-install one while the node runs.
FRAMEWORKS_TTL_S = 10.0


def importable(python: str, modules: Sequence[str]) -> tuple[str, ...]:
    """Which of ``modules`` ``python`` can import (found, not imported: torch takes
    seconds to import, finding it a fraction of a millisecond)."""
    if python == sys.executable:
        importlib.invalidate_caches()  # a package installed since the last look
        return tuple(m for m in modules if importlib.util.find_spec(m) is not None)
    probe = "import importlib.util as u, sys; print(*[m for m in sys.argv[1:] if u.find_spec(m)])"
    try:
        found = subprocess.run(
            [python, "-c", probe, *modules], capture_output=True, text=True, timeout=30
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(m for m in modules if m in found)


class ProcessExecutor(BaseExecutor):
    name = "process"

    def __init__(
        self,
        *,
        python: str = sys.executable,
        pip_args: tuple[str, ...] = (),
        mhz_per_core: float | None = None,
        grace_s: float = GRACE_S,
        sandbox_mode: SandboxMode = "auto",
    ) -> None:
        super().__init__(mhz_per_core=mhz_per_core)
        self.python = python
        self.pip_args = pip_args  # e.g. ("--no-index", "--find-links", DIR) on offline rigs
        self.grace_s = grace_s
        self.sandbox_mode = sandbox_mode
        self._procs: dict[str, trio.Process] = {}
        self._frameworks: tuple[float, tuple[str, ...]] | None = None
        self._sandboxed: dict[str, bool] = {}  # by job: whether its run is in a sandbox

    def frameworks(self) -> tuple[str, ...]:
        """The frameworks the provider's Python has (a job without its framework would fail
        at its first import: "No module named 'sklearn'" after `pip install .`)."""
        now = time.monotonic()
        if self._frameworks is None or now - self._frameworks[0] > FRAMEWORKS_TTL_S:
            found = importable(self.python, tuple(FRAMEWORK_MODULES.values()))
            offered = tuple(f for f, module in FRAMEWORK_MODULES.items() if module in found)
            self._frameworks = (now, offered)
        return self._frameworks[1]

    def sandbox_status(self) -> sandbox.SandboxStatus:
        if self.sandbox_mode == "off":
            return sandbox.SandboxStatus(False, 'turned off (jobs.process_sandbox = "off")')
        return sandbox.probe()

    def _use_sandbox(self, run: JobRun) -> bool:
        """Whether ``run`` goes into a sandbox; refuses it when one is required but cannot be."""
        status = self.sandbox_status()
        if status.usable:
            return True
        if self.sandbox_mode == "require":
            raise EngineError(
                "sandbox",
                f"this provider runs process jobs only in a sandbox, and cannot: {status.detail}",
            )
        log.warning(
            "job %s runs UNSANDBOXED as the provider's own user (it can read what this user "
            "can read): %s",
            run.job_id,
            status.detail,
        )
        return False

    # --- prepare -------------------------------------------------------------------------

    def pid_file(self, run: JobRun) -> Path:
        name = f"process.{run.replica}.pid" if run.replica else "process.pid"  # one a replica
        return safe_paths.child(run.workspace.parent, name, what="pid file")

    def kill_orphan(self, run: JobRun) -> bool:
        """End a run's process group left behind by a provider that crashed; True if one was.

        The pid is only trusted when that process still runs in this run's workspace (a pid
        can be reused by an unrelated process after a reboot)."""
        try:
            pid = int(self.pid_file(run).read_text().strip())
        except (OSError, ValueError, EngineError):
            return False
        import psutil

        try:
            if Path(psutil.Process(pid).cwd()) != run.workspace:
                return False
        except (psutil.Error, OSError):
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        self.pid_file(run).unlink(missing_ok=True)
        return True

    def venv_dir(self, run: JobRun) -> Path:
        return safe_paths.child(run.workspace.parent, "venv", what="the job's venv")

    async def prepare(self, run: JobRun, script: bytes | None = None) -> None:
        await trio.to_thread.run_sync(self._make_venv, self.venv_dir(run))
        await super().prepare(run, script)

    def _make_venv(self, venv: Path) -> None:
        if (venv / "bin" / "python").exists():
            return
        # --without-pip: 0.1 s instead of 3 s; dependencies are installed with our pip.
        subprocess.run(
            [self.python, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        host = subprocess.run(
            [self.python, "-c", "import site, sys; print('\\n'.join(site.getsitepackages()))"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        lib = next((venv / "lib").glob("python3*")) / "site-packages"
        (lib / "_nunet_host_site.pth").write_text(host, encoding="utf-8")

    async def _install(self, state: RunState) -> None:
        venv = self.venv_dir(state.run)
        venv_python = venv / "bin" / "python"
        argv = [
            self.python,
            "-m",
            "pip",
            "--python",
            str(venv_python),
            "install",
            "--disable-pip-version-check",
            "--no-input",
            *self.pip_args,
            *state.run.spec.deps,
        ]
        env = _pip_env()
        scratch: Path | None = None
        if await trio.to_thread.run_sync(self._use_sandbox, state.run):
            # A package's build runs its publisher's code: in a sandbox like the job's own.
            scratch = safe_paths.child(state.run.workspace.parent, "pip-tmp", what="pip's tmp")
            scratch.mkdir(exist_ok=True)
            local = [*self.pip_args, *state.run.spec.deps, env.get("PIP_FIND_LINKS", "")]
            argv = sandbox.wrap_install(
                argv,
                venv=venv.resolve(),
                scratch=scratch.resolve(),
                read_only=[*sandbox.python_paths(self.python), *sandbox.local_paths(local)],
            )
            env.update(HOME="/tmp", TMPDIR="/tmp")
        try:
            with trio.move_on_after(INSTALL_TIMEOUT_S) as scope:
                done = await trio.run_process(
                    argv, capture_stdout=True, capture_stderr=True, check=False, env=env
                )
        finally:
            if scratch is not None:
                await trio.to_thread.run_sync(
                    functools.partial(shutil.rmtree, scratch, ignore_errors=True)
                )
        if scope.cancelled_caught:
            raise EngineError("deps", f"installing dependencies took over {INSTALL_TIMEOUT_S} s")
        for raw in (done.stdout + done.stderr).splitlines()[-40:]:
            state.logs.append("system", raw.decode("utf-8", "replace"))
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
            raise EngineError(
                "deps", f"installing dependencies failed: {tail[0] if tail else 'pip failed'}"
            )

    # --- run -----------------------------------------------------------------------------

    def environment(self, run: JobRun) -> dict[str, str]:
        venv = self.venv_dir(run)
        workspace = str(run.workspace)
        threads = str(max(1, int(run.limits.cpu_cores)))
        return {
            **run.spec.env,
            "PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin",
            "HOME": workspace,
            "WORKSPACE": workspace,
            "TMPDIR": str(run.workspace / ".tmp"),
            "VIRTUAL_ENV": str(venv),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",  # each line reaches the consumer as it is printed
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "MPLBACKEND": "Agg",
        }

    async def _start_one(self, run: JobRun) -> None:
        state = self.state(run)
        if state.started:
            raise EngineError("job", f"job {run.job_id} was already started")
        safe_paths.real_dir(run.workspace, what="the job's workspace")
        safe_paths.real_dir(run.workspace / ".tmp", what="the job's temporary folder").mkdir(
            exist_ok=True
        )
        job = list(state.command or (str(self.venv_dir(run) / "bin" / "python"), "-u", state.entry))
        sandboxed = await trio.to_thread.run_sync(self._use_sandbox, run)
        if sandboxed:
            job = sandbox.wrap(
                job,
                workspace=run.workspace.resolve(),
                read_only=[self.venv_dir(run).resolve(), *sandbox.python_paths(self.python)],
                tmp_mb=run.limits.tmp_mb,
                devices=sandbox.gpu_devices(run.gpus),
                inputs=[(src, run.workspace.resolve() / rel) for src, rel in run.inputs],
            )
        else:
            state.logs.append("system", "not sandboxed: it runs as the provider's own user")
            # No bind without a sandbox: a copy (read-only by its modes, which this user
            # could change: trusted networks only, as this executor is there).
            for source, target in run.inputs:
                await trio.to_thread.run_sync(_copy_input, source, run.workspace / target)
        # The group's leader ends the job and all it started if this provider dies (even
        # by SIGKILL); the provider's own signals reach the job as before (orphan_guard.py).
        lifeline = provider_lifeline()
        guard = [sys.executable, "-I", str(ORPHAN_GUARD), "group", str(os.getpid())]
        argv = [*guard, str(lifeline), *job]
        pid_file = self.pid_file(run)  # checked before anything runs
        process = await trio.lowlevel.open_process(
            argv,
            pass_fds=(lifeline,),
            cwd=str(run.workspace),
            env=self.environment(run),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: cancel kills children too
            preexec_fn=_limiter(run, sandboxed=sandboxed),
        )
        self._procs[run.job_id] = process
        self._sandboxed[run.job_id] = sandboxed
        # Recorded so a provider that died with kill -9 can end the orphaned group on restart.
        pid_file.write_text(f"{process.pid}\n")
        state.started = True
        state.meter.start()
        self._spawn(self._supervise, state, process)
        self._watch_disk(state)

    async def _supervise(self, state: RunState, process: trio.Process) -> None:
        run = state.run
        timed_out = False
        async with trio.open_nursery() as pumps:
            assert process.stdout is not None and process.stderr is not None
            pumps.start_soon(self._pump, state, "stdout", process.stdout)
            pumps.start_soon(self._pump, state, "stderr", process.stderr)
            sampler = trio.CancelScope()
            pumps.start_soon(self._sample, state, process, sampler)
            with trio.move_on_after(run.limits.timeout_s) as scope:
                await process.wait()
            if scope.cancelled_caught:
                timed_out = True
                _kill_group(process, signal.SIGKILL)
                await process.wait()
            # Grandchildren may still hold the pipes: the group goes with its leader.
            _kill_group(process, signal.SIGKILL)
            sampler.cancel()
        self._procs.pop(run.job_id, None)
        returncode = process.returncode
        if self._sandboxed.pop(run.job_id, False):
            returncode = sandbox.exit_code(returncode)
        with contextlib.suppress(OSError, EngineError):  # the run ends whatever the job left
            self.pid_file(run).unlink(missing_ok=True)
        state.logs.flush()
        status = self._status(state, returncode, timed_out)
        if returncode is None or returncode < 0:
            # Ended by a signal: the provider's log says which, and why as far as we know.
            signum = -(returncode or -signal.SIGKILL)
            name = signal.Signals(signum).name if signum in signal.valid_signals() else signum
            log.warning(
                "job %s ended by %s: %s, %s", run.job_id, name, status.outcome,
                status.reason or "sent by nobody this provider knows of",
            )  # fmt: skip
        self._finish(state, status)

    def _status(self, state: RunState, returncode: int | None, timed_out: bool) -> ExitStatus:
        code = signal_exit_code(returncode if returncode is not None else -signal.SIGKILL)
        if state.stop is not None:
            return ExitStatus(code, *state.stop)
        if timed_out:
            return ExitStatus(code, "timeout", self._timeout_reason(state.run))
        if returncode == 0:
            return ExitStatus(0, "completed", "")
        if returncode == -signal.SIGXCPU:
            return ExitStatus(code, "timeout", "used up its CPU time limit")
        disk_mb = state.run.limits.disk_mb
        if wrote_too_large(disk_mb, returncode == -signal.SIGXFSZ, state.stderr_tail.lines):
            return ExitStatus(code, "failed", file_too_large(disk_mb or 0))
        if any(marker in line for line in state.stderr_tail.lines for marker in _OOM_MARKERS):
            limit = state.run.limits.memory_mb
            return ExitStatus(code, "oom", f"out of memory: the limit is {limit} MB")
        return ExitStatus(code, "failed", failure_reason(code, state.stderr_tail.lines))

    async def _pump(self, state: RunState, stream: str, pipe: trio.abc.ReceiveStream) -> None:
        while chunk := await pipe.receive_some(65536):
            state.logs.feed(stream, chunk)  # type: ignore[arg-type]
            if stream == "stderr":
                state.stderr_tail.feed(bytes(chunk))

    async def _sample(
        self, state: RunState, process: trio.Process, scope: trio.CancelScope
    ) -> None:
        import psutil

        with scope:
            try:
                proc = psutil.Process(process.pid)
            except psutil.Error:
                return
            while process.returncode is None:
                try:
                    cpu, ram = await trio.to_thread.run_sync(
                        _tree_usage, proc, abandon_on_cancel=True
                    )
                except psutil.Error:
                    return
                state.meter.sample(cpu_s=cpu, ram_mb=ram)
                await trio.sleep(SAMPLE_S)

    async def _stop_one(self, state: RunState, outcome: Outcome, reason: str) -> None:
        process = self._procs.get(state.run.job_id)
        state.stop = (outcome, reason)
        if process is None:
            return
        _kill_group(process, signal.SIGCONT)  # a paused job cannot handle SIGTERM
        if self._sandboxed.get(state.run.job_id):
            # To the job's processes, not bwrap's: bwrap dies of a SIGTERM, and the sandbox
            # with it (its init dies with its parent), so the job had no grace time at all.
            await trio.to_thread.run_sync(_terminate_inside, process.pid)
        else:
            _kill_group(process, signal.SIGTERM)
        with trio.move_on_after(self.grace_s):
            await state.done.wait()
        _kill_group(process, signal.SIGKILL)
        await state.done.wait()

    # --- tunnels (engine/jobs/tunnel_provider.py, Pipes: tunnel_relay.py) -------------------------
    # A sandboxed job has a loopback of its own: the tunnel connects from inside its network
    # namespace (sandbox_connect.py), where nothing but the job listens. Unsandboxed, the
    # job's service listens on the provider's own loopback, and the tunnel connects there.

    async def open_tunnel(self, run: JobRun, port: int) -> Any:
        from engine.jobs.tunnel_relay import TrioPipe

        run = self.live_run(run)  # a job with steps: its first running replica's
        process = self._procs.get(run.job_id)
        if process is None:
            raise EngineError("tunnel", f"job {run.job_id} is not running here")
        # The host's 127.0.0.1 has other services too (an sshd, a database, our own
        # daemons): a tunnel reaches a port only while the job's own processes listen on it.
        # And the connection goes to the very address found to be the job's: a job on
        # [::1]:PORT must not lend its check to a provider service on 127.0.0.1:PORT.
        found = await trio.to_thread.run_sync(_job_listener, process.pid, port)
        if found is None:
            raise EngineError(
                "tunnel", f"the job does not listen on 127.0.0.1:{port} (not yet, or not at all)"
            )
        address, holder = found
        try:
            with trio.fail_after(JOB_CONNECT_S):
                if self._sandboxed.get(run.job_id):
                    # Only ever inside: a listener outside the sandbox is none of the job's.
                    if not sandbox.inside(holder):
                        raise OSError(0, "the listener is outside the job's sandbox")
                    stream = await _connect_inside(holder, address, port)
                else:
                    stream = await trio.open_tcp_stream(address, port)
        except (OSError, trio.TooSlowError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "no answer"
            raise EngineError(
                "tunnel", f"nothing answers on port {port} of the job ({why})"
            ) from None
        return TrioPipe(stream)

    async def exec_shell(
        self, run: JobRun, command: tuple[str, ...], rows: int, cols: int, term: str
    ) -> Any:
        from engine.jobs.executors.pty_shell import default_shell, open_pty_shell

        run = self.live_run(run)  # a job with steps: its first running replica's
        process = self._procs.get(run.job_id)
        if process is None:
            raise EngineError("tunnel", f"job {run.job_id} is not running here")
        env = {**self.environment(run), "TERM": term or "xterm"}
        argv = list(command) or default_shell()
        sandboxed = self._sandboxed.get(run.job_id, False)
        if sandboxed:
            # Into the job's own sandbox, as the job's user: the shell sees what the job sees.
            target = await trio.to_thread.run_sync(_sandbox_member, process.pid)
            if target is None:
                raise EngineError("tunnel", f"job {run.job_id} has ended")
            argv = sandbox.shell_argv(target, run.workspace.resolve(), argv)
        limits = _limiter(run, sandboxed=sandboxed)
        try:
            return await open_pty_shell(
                argv, cwd=run.workspace, env=env, rows=rows, cols=cols, limits=limits
            )
        except OSError as exc:
            raise EngineError(
                "tunnel", f"cannot start {argv[0][:100]!r}: {exc.strerror or exc}"
            ) from None

    async def _pause_one(self, state: RunState) -> None:
        if process := self._procs.get(state.run.job_id):
            _kill_group(process, signal.SIGSTOP)

    async def _resume_one(self, state: RunState) -> None:
        if process := self._procs.get(state.run.job_id):
            _kill_group(process, signal.SIGCONT)


# A listening address of the job's, and the loopback address that reaches exactly that
# listener (a wildcard one is reached through its own family's loopback).
_LOOPBACK_FOR = {
    "127.0.0.1": "127.0.0.1",
    "0.0.0.0": "127.0.0.1",
    "::1": "::1",
    "::": "::1",
    "::ffff:127.0.0.1": "::ffff:127.0.0.1",
}


def _job_listener(pid: int, port: int) -> tuple[str, int] | None:
    """The loopback address to connect to for a listener on TCP ``port`` held by a process
    of the job's tree (``pid`` and its descendants), and that process's pid (in a sandbox,
    its network namespace is the one to connect in); None if it holds none there."""
    import psutil

    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    for proc in tree:
        try:
            # Read from the process's own /proc/PID/net (psutil reads ours: a sandboxed
            # job's sockets are in a network namespace of their own).
            listening = _listening(proc.pid, _socket_inodes(proc.pid))
        except OSError:
            continue
        for ip, bound_port in listening:
            if bound_port == port and (found := _LOOPBACK_FOR.get(ip)):
                return found, proc.pid
    return None


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        with contextlib.suppress(OSError):
            target = os.readlink(f"{fds}/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


def _listening(pid: int, inodes: set[str]) -> list[tuple[str, int]]:
    """The (address, port) of the TCP listeners among ``inodes``, in ``pid``'s namespace."""
    import ipaddress

    found = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            hex_ip, hex_port = fields[1].split(":")
            # The kernel prints each 32-bit word of the address in host (little-endian) order.
            raw = b"".join(bytes.fromhex(hex_ip[i : i + 8])[::-1] for i in range(0, len(hex_ip), 8))
            found.append((str(ipaddress.ip_address(raw)), int(hex_port, 16)))
    return found


def _sandbox_member(pid: int) -> int | None:
    """A process of the job's tree (under the group leader ``pid``) inside its sandbox."""
    import psutil

    try:
        tree = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return None
    return next((proc.pid for proc in tree if sandbox.inside(proc.pid)), None)


def _terminate_inside(pid: int) -> None:
    """SIGTERM to every process of the job's tree (under the group leader ``pid``) inside
    its sandbox: the job's own, those that left its process group included."""
    import psutil

    with contextlib.suppress(psutil.Error):
        for proc in psutil.Process(pid).children(recursive=True):
            if sandbox.inside(proc.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(proc.pid, signal.SIGTERM)


async def _connect_inside(pid: int, address: str, port: int) -> trio.SocketStream:
    """A TCP connection to ``address``:``port`` made in ``pid``'s network namespace."""
    import socket

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with theirs:
            helper = await trio.lowlevel.open_process(
                sandbox.connect_argv(pid, address, port, theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        try:
            await helper.wait()
        finally:
            helper.kill()  # only if cancelled: it has ended otherwise
        ours.setblocking(False)
        message, fds, _, _ = socket.recv_fds(ours, 256, 1)
    finally:
        ours.close()
    if not fds:
        why = message.decode("utf-8", "replace") or "the connecting helper failed"
        raise OSError(0, why)
    for extra in fds[1:]:
        os.close(extra)
    return trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=fds[0])))


def _tree_usage(proc: object) -> tuple[float, float]:
    """The CPU seconds and MB of RAM of the job under the group leader ``proc``: what its
    processes use and used, not the leader's own few MB and no CPU. A process's time moves
    to its parent's ``children_*`` when it is reaped, so each second is counted once."""
    import psutil

    assert isinstance(proc, psutil.Process)
    times = proc.cpu_times()
    cpu = times.children_user + times.children_system
    ram = 0
    for child in proc.children(recursive=True):
        try:
            t = child.cpu_times()
            cpu += t.user + t.system + t.children_user + t.children_system
            ram += child.memory_info().rss
        except psutil.Error:
            continue
    return cpu, ram / (1 << 20)


def _kill_group(process: trio.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _limiter(run: JobRun, *, sandboxed: bool = False) -> Callable[[], None]:
    """The preexec function: limits set in the child between fork and exec."""
    memory = run.limits.memory_mb << 20
    # CPU seconds: the wall limit times the cores it may use (+ slack for the interpreter).
    cpu_s = int(run.limits.timeout_s * max(1.0, run.limits.cpu_cores)) + 5
    fsize = (run.limits.disk_mb or 0) << 20
    nproc: int | None = None
    if os.getuid() != 0:  # RLIMIT_NPROC counts all of the user's processes; root ignores it
        import psutil

        uid = os.getuid()
        mine = sum(1 for p in psutil.process_iter(["uids"]) if p.info["uids"].real == uid)
        nproc = mine + run.limits.pids + 1  # and the group's leader
    elif sandboxed:
        # Root ignores RLIMIT_NPROC, but not inside a user namespace of its own (the kernel
        # counts per namespace and user): there it counts this job's processes alone, and
        # bwrap's init.
        nproc = run.limits.pids + 2

    def apply() -> None:
        # RLIMIT_DATA, not RLIMIT_AS: torch and OpenBLAS reserve far more address space than
        # they use, and an address-space limit breaks them; DATA counts what is written to.
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if fsize:  # one file past the spec's disk, between two walks (disk_quota.py)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


def _pip_env() -> dict[str, str]:
    keep = ("PATH", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "PIP_INDEX_URL", "PIP_FIND_LINKS")
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("PIP_")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _copy_input(source: Path, target: Path) -> None:
    if target.is_dir() and not any(target.iterdir()):
        target.rmdir()
    elif target.is_file() and target.stat().st_size == 0:
        target.unlink()
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copy2(source, target)
