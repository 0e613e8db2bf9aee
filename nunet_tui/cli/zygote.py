"""A fork server for the demo's sandbox: import the heavy modules once, fork each component.

Every sandbox process (ledger, oracle, node daemons) used to import pycardano, uplc and libp2p
itself: seconds of CPU each, ~20 s in all on two cores. A zygote imports them once, then forks
a child per component, which shares the imported modules copy-on-write and runs the component's
``python -m`` module exactly as a fresh interpreter would (``sys.argv``, environment, standard
streams, its own process group, fresh randomness).

``python -m nunet_tui.cli.zygote --fd N --preload a,b [--tag TEXT]``: ``N`` is one end of a
``SOCK_SEQPACKET`` socket pair. The zygote sends ``{"ready": …}`` once imported, then answers
each request ``{"module", "args", "env", "name"}`` (with the child's stdout and stderr as
passed descriptors) with ``{"pid": …}`` and a pidfd of the child, opened before it can be
reaped, so that the demo can wait for a process that is not its child without a pid race.

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
    if not isinstance(module, str) or not all(isinstance(a, str) for a in args):
        raise ValueError("module and args are strings")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError("env maps strings to strings")
    return ChildSpec(module=module, args=list(args), env=dict(env), name=str(name))


def _become_child(spec: ChildSpec, sock: socket.socket, stdout: int, stderr: int) -> None:
    """In the forked child: the process a fresh ``python -m spec.module`` would be."""
    os.setpgid(0, 0)  # its own group: the demo stops it (and the jobs it runs) by group
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the zygote died between fork and prctl
        os._exit(1)
    _prctl(_PR_SET_NAME, spec.name.encode()[:15])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sock.close()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    for fd in {devnull, stdout, stderr} - {0, 1, 2}:
        os.close(fd)
    os.environ.clear()
    os.environ.update(spec.env)
    # CPython re-seeds `random` after a fork already; said again here because every child
    # must differ (secrets and key generation read os.urandom, which never repeats).
    random.seed()
    sys.argv = [spec.module, *spec.args]


class Zygote:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.children: set[int] = set()

    def serve(self) -> ChildSpec | None:
        """Answer requests until the socket closes; in a forked child, return its spec."""
        while True:
            self._reap()
            readable, _, _ = select.select([self.sock], [], [], 1.0)
            if not readable:
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_MESSAGE, 2)
            except (ConnectionResetError, OSError):
                return None
            if not data:
                for fd in fds:
                    os.close(fd)
                return None
            try:
                spec = _parse_request(data)
                if len(fds) != 2:
                    raise ValueError("a request passes stdout and stderr")
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
                self.children.clear()
                _become_child(spec, self.sock, fds[0], fds[1])
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
                return spec
            self.children.add(pid)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            for fd in fds:
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            try:
                _send(self.sock, {"pid": pid}, [pidfd])
            finally:
                os.close(pidfd)

    def _reap(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                done, _status = os.waitpid(pid, os.WNOHANG)
                if not done:
                    continue
            self.children.discard(pid)

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
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            self.children.discard(pid)


class ForkedChild:
    """A process a zygote forked, as the demo sees it: the part of ``Popen`` it uses.

    Not the demo's child, so its exit status goes to the zygote: ``returncode`` is -1 once it
    ended. Liveness comes from a pidfd the zygote opened before it could reap the child, so a
    reused pid is never mistaken for it."""

    def __init__(self, pid: int, pidfd: int, stdout: IO[str] | None) -> None:
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._pidfd = pidfd

    def poll(self) -> int | None:
        return self.wait(0) if self._ended(0) else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        self.returncode = -1
        return self.returncode

    def _ended(self, timeout: float | None) -> bool:
        if self.returncode is not None:
            return True
        readable, _, _ = select.select([self._pidfd], [], [], timeout)
        return bool(readable)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._pidfd)


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
    ) -> tuple[int, int]:
        """``python -m module args`` forked from the zygote; (pid, pidfd)."""
        request = {"module": module, "args": list(args), "env": dict(env), "name": name}
        with self._lock:
            _send(self._sock, request, [stdout, stderr])
            message, fds = self._receive()
        if "pid" not in message or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError(f"the sandbox's zygote refused to start {name}: {message.get('error')}")
        return int(message["pid"]), fds[0]

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
# (tests/test_demo_start.py fails when pycardano changes it), only in the sandbox's chain
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
