"""A fork server for the demo's sandbox: import the heavy modules once, fork each component.

Every sandbox process (ledger, oracle, node daemons) used to import pycardano, uplc and libp2p
itself: seconds of CPU each, ~20 s in all on two cores. A zygote imports them once, then forks
a child per component, which shares the imported modules copy-on-write and runs the component's
``python -m`` module exactly as a fresh interpreter would (``sys.argv``, environment, standard
streams, its own process group, fresh randomness).

``python -m nunet_tui.cli.zygote --fd N --preload a,b [--tag TEXT]``: ``N`` is one end of a
``SOCK_SEQPACKET`` socket pair. The zygote sends ``{"ready": …}`` once imported, then answers
each request ``{"module", "args", "env", "name", "cwd", "stdin"}`` (with the child's stdout,
stderr, the write end of a status pipe and, when ``stdin``, its stdin as passed descriptors)
with ``{"pid": …}`` and a pidfd of the child, opened before it can be reaped, so that the
caller can wait for and signal a process that is not its child without a pid race. When the
child ends, the zygote (its parent, the only one that can reap it) writes its exit code, as
``Popen.returncode`` would give it (negative for a signal), to the status pipe and closes it.

The zygote stays single-threaded (a fork copies only the calling thread: a lock held by
another thread would stay locked in the child forever); it refuses to fork if an import
started a thread. When its socket closes or it gets SIGTERM it stops its children
(SIGTERM to their groups, SIGKILL after a grace period) and exits; each child also gets
SIGTERM if the zygote dies without that (``PR_SET_PDEATHSIG``). ``--tag`` only puts the
sandbox's folder on the command line, which the children share, so ``pgrep -f ROOT`` finds
every process of a sandbox.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import gc
import importlib
import json
import os
import random
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

MAX_MESSAGE = 256 * 1024  # a request is argv and an environment: far below this
STOP_WAIT_S = 8.0
_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ChildSpec:
    module: str
    args: list[str]
    env: dict[str, str]
    name: str
    cwd: str | None = None
    stdin: bool = False  # a descriptor for stdin was passed (else /dev/null)


class _Stop(BaseException):
    pass


def _prctl(option: int, value: int | bytes) -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value, 0, 0, 0)


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], fds or [])


def _parse_request(data: bytes) -> ChildSpec:
    raw = json.loads(data)
    module, args, env, name = raw["module"], raw["args"], raw["env"], raw["name"]
    cwd, stdin = raw.get("cwd"), raw.get("stdin", False)
    if not isinstance(module, str) or not all(isinstance(a, str) for a in args):
        raise ValueError("module and args are strings")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError("env maps strings to strings")
    if not (cwd is None or isinstance(cwd, str)) or not isinstance(stdin, bool):
        raise ValueError("cwd is a string, stdin a boolean")
    return ChildSpec(
        module=module, args=list(args), env=dict(env), name=str(name), cwd=cwd, stdin=stdin
    )


def _become_child(
    spec: ChildSpec, sock: socket.socket, fds: list[int], inherited: set[int]
) -> None:
    """In the forked child: the process a fresh ``python -m spec.module`` would be.
    ``fds``: its stdout, stderr, status pipe and maybe stdin; ``inherited``: the zygote's
    descriptors of its other children, not this one's to keep."""
    os.setpgid(0, 0)  # its own group: the demo stops it (and the jobs it runs) by group
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the zygote died between fork and prctl
        os._exit(1)
    _prctl(_PR_SET_NAME, spec.name.encode()[:15])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sock.close()
    stdout, stderr, status = fds[0], fds[1], fds[2]
    stdin = fds[3] if spec.stdin else os.open(os.devnull, os.O_RDONLY)
    os.close(status)  # the zygote writes this child's status; the child holds no end of it
    for fd in inherited:
        with contextlib.suppress(OSError):
            os.close(fd)
    os.dup2(stdin, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    for fd in {stdin, stdout, stderr} - {0, 1, 2}:
        os.close(fd)
    if spec.cwd is not None:
        os.chdir(spec.cwd)
    os.environ.clear()
    os.environ.update(spec.env)
    # CPython re-seeds `random` after a fork already; said again here because every child
    # must differ (secrets and key generation read os.urandom, which never repeats).
    random.seed()
    sys.argv = [spec.module, *spec.args]


@dataclass
class _Child:
    pidfd: int  # readable once the child has ended: then it is reaped at once
    status: int  # the write end of its status pipe


class Zygote:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.children: dict[int, _Child] = {}

    def serve(self) -> ChildSpec | None:
        """Answer requests until the socket closes; in a forked child, return its spec."""
        while True:
            ended = [child.pidfd for child in self.children.values()]
            readable, _, _ = select.select([self.sock.fileno(), *ended], [], [], 5.0)
            if any(fd in ended for fd in readable):
                self._reap()
            if self.sock.fileno() not in readable:
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_MESSAGE, 4)
            except (ConnectionResetError, OSError):
                return None
            if not data:
                for fd in fds:
                    os.close(fd)
                return None
            try:
                spec = _parse_request(data)
                if len(fds) != 3 + spec.stdin:
                    raise ValueError("a request passes stdout, stderr, a status pipe (and stdin)")
            except (ValueError, KeyError, TypeError) as exc:
                for fd in fds:
                    os.close(fd)
                _send(self.sock, {"error": f"bad request: {exc}"})
                continue
            if threading.active_count() != 1:
                for fd in fds:
                    os.close(fd)
                _send(self.sock, {"error": "the zygote has threads: forking is unsafe"})
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            # SIGTERM held across the fork: the child must not run the zygote's handler
            # (it would stop its siblings); it resets the handlers, then lets it through.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            pid = os.fork()
            if pid == 0:
                inherited = {fd for c in self.children.values() for fd in (c.pidfd, c.status)}
                self.children.clear()
                _become_child(spec, self.sock, fds, inherited)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
                return spec
            # Opened before the child can be reaped (only we reap it): never another's pid.
            pidfd = os.pidfd_open(pid)
            os.set_inheritable(fds[2], False)
            self.children[pid] = _Child(pidfd=pidfd, status=fds[2])
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            for fd in fds[:2] + fds[3:]:
                os.close(fd)
            _send(self.sock, {"pid": pid}, [pidfd])

    def _reap(self, block: bool = False) -> None:
        """Reap each ended child (each child, waiting, when ``block``) and write its exit code
        to its status pipe."""
        for pid, child in list(self.children.items()):
            try:
                done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
                if not done:
                    continue
                code = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                code = -1
            del self.children[pid]
            with contextlib.suppress(OSError):  # the caller may have gone
                os.write(child.status, f"{code}\n".encode())
            os.close(child.status)
            os.close(child.pidfd)

    def stop_children(self) -> None:
        """SIGTERM to every child's group, SIGKILL to what is left after ``STOP_WAIT_S``."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut this short
        self._reap()
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        while self.children and time.monotonic() < deadline:
            time.sleep(0.05)
            self._reap()
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        self._reap(block=True)


class ForkedChild:
    """A process a zygote forked, as its caller sees it: the part of ``Popen`` it uses.

    Not the caller's child: its exit code comes from the zygote through the status pipe
    (``returncode`` as ``Popen`` gives it; -1 if the zygote died first). Signals go through
    a pidfd the zygote opened before it could reap the child, so a reused pid is never hit."""

    def __init__(self, pid: int, pidfd: int, status: int, stdout: IO[str] | None = None) -> None:
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._pidfd = pidfd
        self._status = status

    def poll(self) -> int | None:
        return self.wait(0) if self._ended(0) else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        if self.returncode is None:
            text = os.read(self._status, 64).decode(errors="replace").strip()
            if not text:  # the zygote died first: the child gets SIGTERM (PR_SET_PDEATHSIG)
                select.select([self._pidfd], [], [], 10.0)
            self.returncode = int(text) if text.lstrip("-").isdigit() else -1
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _ended(self, timeout: float | None) -> bool:
        if self.returncode is not None:
            return True
        readable, _, _ = select.select([self._status], [], [], timeout)
        return bool(readable)

    def close(self) -> None:
        for fd in (self._pidfd, self._status):
            with contextlib.suppress(OSError):
                os.close(fd)


class ZygoteClient:
    """The demo's end of one zygote: start it, wait until it has imported, ask for children."""

    def __init__(
        self,
        spawn: Callable[..., subprocess.Popen[Any]],
        preload: Sequence[str],
        *,
        env: Mapping[str, str],
        log: Path,
        tag: str,
        options: Sequence[str] = (),
    ) -> None:
        self.log = log
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        self._lock = threading.Lock()
        try:
            argv = [sys.executable, "-m", "nunet_tui.cli.zygote", "--fd", str(theirs.fileno())]
            argv += ["--preload", ",".join(preload), "--tag", tag, *options]
            with log.open("ab") as stderr:
                self.proc = spawn(
                    argv,
                    pass_fds=[theirs.fileno()],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    env=dict(env),
                )
        finally:
            theirs.close()
        self.ready_info: dict[str, Any] | None = None

    def poll_ready(self, timeout: float = 0.0) -> bool:
        """Whether the zygote has imported its modules; raises if it ended instead."""
        if self.ready_info is not None:
            return True
        readable, _, _ = select.select([self._sock], [], [], timeout)
        if readable:
            message = self._receive()[0]
            if "ready" not in message:
                raise OSError(f"the sandbox's zygote did not start; see {self.log}")
            self.ready_info = message
            return True
        if self.proc.poll() is not None:
            raise OSError(f"the sandbox's zygote did not start; see {self.log}")
        return False

    def fork(
        self,
        module: str,
        args: Sequence[str],
        env: Mapping[str, str],
        name: str,
        stdout: int,
        stderr: int,
        *,
        stdin: int | None = None,
        cwd: str | None = None,
    ) -> ForkedChild:
        """``python -m module args`` forked from the zygote, with these descriptors as its
        standard streams (stdin /dev/null when None); the caller keeps and closes its own."""
        request = {
            "module": module,
            "args": list(args),
            "env": dict(env),
            "name": name,
            "cwd": cwd,
            "stdin": stdin is not None,
        }
        status_read, status_write = os.pipe()
        passed = [stdout, stderr, status_write] + ([stdin] if stdin is not None else [])
        try:
            with self._lock:
                _send(self._sock, request, passed)
                message, fds = self._receive()
        except BaseException:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        if "pid" not in message or len(fds) != 1:
            for fd in [*fds, status_read]:
                os.close(fd)
            raise OSError(f"the sandbox's zygote refused to start {name}: {message.get('error')}")
        return ForkedChild(int(message["pid"]), fds[0], status_read)

    def _receive(self) -> tuple[dict[str, Any], list[int]]:
        data, fds, _flags, _addr = socket.recv_fds(self._sock, MAX_MESSAGE, 1)
        if not data:
            raise OSError(f"the sandbox's zygote stopped; see {self.log}")
        message: dict[str, Any] = json.loads(data)
        return message, fds

    def close(self) -> None:
        """The zygote stops its remaining children and exits when its socket closes."""
        self._sock.close()


# pycardano/backend/__init__.py imports its Ogmios backends unconditionally (from .ogmios_v5
# import *, from .ogmios_v6 import *): ~1 s of CPU, 40 % of `import pycardano`, for chain
# backends the sandbox never uses (its nodes, ledger and oracle talk Blockfrost to the local
# ledger). A chain zygote may put empty modules in their place before importing pycardano. A
# hack on a library's internals, so: only for the version whose backend/__init__.py is known
# (tests/daemons/test_demo_start.py fails when pycardano changes it), only in the sandbox's chain
# zygote and its children, and never with pycardano's run-time type checks turned off.
PYCARDANO_OGMIOS_SKIP_VERSIONS = ("0.19.2",)
PYCARDANO_OGMIOS_MODULES = ("pycardano.backend.ogmios_v5", "pycardano.backend.ogmios_v6")


def skip_pycardano_ogmios() -> bool:
    """Empty stand-ins for pycardano's Ogmios backends; False (nothing done) for a pycardano
    version not known to import them only from backend/__init__.py, or already imported."""
    from importlib import metadata

    try:
        version = metadata.version("pycardano")
    except metadata.PackageNotFoundError:
        return False
    if version not in PYCARDANO_OGMIOS_SKIP_VERSIONS or "pycardano" in sys.modules:
        return False
    for name in PYCARDANO_OGMIOS_MODULES:
        stand_in = types.ModuleType(name, "not imported by the sandbox (nunet_tui/cli/zygote.py)")
        stand_in.__all__ = []  # type: ignore[attr-defined]
        sys.modules[name] = stand_in
    return True


def _on_term(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nunet_tui.cli.zygote")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--preload", default="", help="modules to import, comma-separated")
    parser.add_argument("--tag", default="", help="shown on the command line only")
    parser.add_argument(
        "--skip-pycardano-ogmios", action="store_true", help="see skip_pycardano_ogmios"
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the demo decides; SIGTERM stops us
    sock = socket.socket(fileno=args.fd)
    zygote = Zygote(sock)
    spec: ChildSpec | None = None
    try:
        started = time.monotonic()
        modules = [name for name in args.preload.split(",") if name]
        if args.skip_pycardano_ogmios and skip_pycardano_ogmios():
            print("zygote: pycardano's Ogmios backends not imported", file=sys.stderr, flush=True)
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError as exc:  # a renamed module: slower children, not a failure
                print(f"zygote: cannot preload {name}: {exc}", file=sys.stderr, flush=True)
        # What is imported now is shared by every child: out of the collector's sight, a
        # collection in a child neither walks it nor copies its pages.
        gc.freeze()
        took = time.monotonic() - started
        cpu = time.process_time()
        print(
            f"zygote: imported {len(modules)} modules in {took:.2f} s ({cpu:.2f} s CPU)",
            file=sys.stderr,
            flush=True,
        )
        _send(
            sock,
            {
                "ready": modules,
                "import_s": round(time.monotonic() - started, 3),
                "threads": threading.active_count(),
            },
        )
        spec = zygote.serve()
    except _Stop:
        pass
    finally:
        if spec is None:
            zygote.stop_children()
    if spec is None:
        return 0
    _run_child(spec)
    return 0  # not reached: _run_child ends the process


def _run_child(spec: ChildSpec) -> None:
    """Run the component, then end as an interpreter would, less its finalization.

    Tearing down every module the zygote imported costs a child seconds of CPU at exit (the
    refcount writes copy the shared pages too): after its main returns, the other threads are
    joined and the atexit functions (logging's flush among them) run, then ``os._exit``."""
    code = 0
    try:
        runpy.run_module(spec.module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    finally:
        os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
