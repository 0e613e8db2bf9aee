"""``docker exec`` sessions as byte pipes: the tunnels into a container that has no network.

A TCP tunnel runs ``FORWARDER`` in the job's container: it connects to 127.0.0.1:PORT on the
container's own loopback and copies its stdin to the connection and the connection to its
stdout; the exec's hijacked socket (docker-py ``exec_start(socket=True)``) is that stdin and
stdout. Without a TTY, Docker multiplexes stdout and stderr on it (8-byte headers: stream,
0, 0, 0, length), which ``ExecPipe`` takes apart; with a TTY (shells) the bytes are raw.

The hijacked socket is duplicated and handed to trio; docker-py's own objects are closed. The
HTTP response's buffer may already hold the first bytes after the headers: they are taken out
before the socket is read directly, so a service's greeting or a shell's prompt is never lost.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import time
from typing import Any

import trio

from engine.domain.tunnel_frames import JOB_CONNECT_S
from engine.errors import EngineError

# Runs as `python3 -c FORWARDER PORT` in the job's container. One byte 0 says "connected";
# on failure it writes the reason to stderr and exits 1. Blocking I/O, one thread a way.
FORWARDER = r"""
import os, socket, sys, threading
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
except OSError as e:
    sys.stderr.write(f"{e.strerror or e}\n"); sys.exit(1)
s.settimeout(None)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
os.write(1, b"\0")
def up():
    while True:
        d = os.read(0, 65536)
        if not d:
            break
        s.sendall(d)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while True:
    d = s.recv(65536)
    if not d:
        break
    v = memoryview(d)
    while v:
        v = v[os.write(1, v):]
"""

# A shell without a command: bash, else sh, else Python's own prompt (the jobs' images all
# have Python; the scikit-learn test image has no shell at all).
DEFAULT_SHELL = (
    "python3",
    "-c",
    "import os, shutil\n"
    "s = shutil.which('bash') or shutil.which('sh')\n"
    "os.execv(s, [s]) if s else os.execvp('python3', ['python3', '-q'])",
)
CONNECT_S = JOB_CONNECT_S
EXIT_WAIT_S = 5.0
STDERR_KEEP = 2048


def _take_socket(hijacked: Any) -> tuple[socket.socket, bytes]:
    """A socket of our own for docker-py's hijacked exec socket, and the bytes its HTTP
    response had already buffered. Blocking; docker-py's objects are closed."""
    raw = getattr(hijacked, "_sock", hijacked)  # SocketIO wraps the socket (unix, http)
    pending = b""
    response = getattr(hijacked, "_response", None)
    buffered = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    raw.setblocking(False)
    if buffered is not None and hasattr(buffered, "peek"):
        # Non-blocking underneath: peek returns what is buffered and never waits.
        with contextlib.suppress(BlockingIOError, OSError, ValueError):
            pending = bytes(buffered.peek(1 << 16) or b"")
    mine = socket.socket(fileno=os.dup(raw.fileno()))
    with contextlib.suppress(Exception):
        if response is not None:
            response.close()
    with contextlib.suppress(Exception):
        hijacked.close()
    with contextlib.suppress(Exception):
        raw.close()
    mine.setblocking(False)
    return mine, pending


class ExecPipe:
    """One ``docker exec`` session: its stdin and stdout as a Pipe (engine/jobs/tunnel_relay.py);
    resize and exit status for shells."""

    def __init__(
        self, api: Any, exec_id: str, sock: socket.socket, pending: bytes, *, multiplexed: bool
    ) -> None:
        self._api = api
        self.exec_id = exec_id
        self._sock = trio.socket.from_stdlib_socket(sock)
        self._buffer = bytearray(pending)
        self._multiplexed = multiplexed
        self._frame_left = 0
        self._frame_stream = 1
        self.stderr = bytearray()
        self._closed = False

    @classmethod
    async def start(cls, api: Any, exec_id: str, *, tty: bool) -> ExecPipe:
        hijacked = await trio.to_thread.run_sync(
            functools.partial(api.exec_start, exec_id, socket=True, tty=tty)
        )
        sock, pending = await trio.to_thread.run_sync(_take_socket, hijacked)
        return cls(api, exec_id, sock, pending, multiplexed=not tty)

    async def _recv(self) -> bytes:
        try:
            return bytes(await self._sock.recv(1 << 16))
        except OSError:
            return b""

    async def receive(self, max_bytes: int) -> bytes:
        if not self._multiplexed:
            if self._buffer:
                chunk = bytes(self._buffer[:max_bytes])
                del self._buffer[:max_bytes]
                return chunk
            return await self._recv()
        while True:
            if self._frame_left and self._buffer:
                take = min(self._frame_left, len(self._buffer), max_bytes)
                chunk = bytes(self._buffer[:take])
                del self._buffer[:take]
                self._frame_left -= take
                if self._frame_stream == 1:
                    return chunk
                self.stderr = (self.stderr + chunk)[-STDERR_KEEP:]
                continue
            if not self._frame_left and len(self._buffer) >= 8:
                self._frame_stream = self._buffer[0]
                self._frame_left = int.from_bytes(self._buffer[4:8], "big")
                del self._buffer[:8]
                continue
            data = await self._recv()
            if not data:
                return b""
            self._buffer += data

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            sent = await self._sock.send(view)
            view = view[sent:]

    async def send_eof(self) -> None:
        if not self._multiplexed:
            # A terminal says "end of input" with Ctrl-D; closing a TTY session's stdin makes
            # Docker drop the output not yet sent.
            await self.send(b"\x04")
            return
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._sock.close()

    async def resize(self, rows: int, cols: int) -> None:
        with contextlib.suppress(Exception):  # a session that just ended cannot be resized
            await trio.to_thread.run_sync(
                functools.partial(self._api.exec_resize, self.exec_id, height=rows, width=cols)
            )

    async def exit_code(self) -> int | None:
        deadline = time.monotonic() + EXIT_WAIT_S
        while True:
            try:
                info = await trio.to_thread.run_sync(self._api.exec_inspect, self.exec_id)
            except Exception:
                return None
            if not info.get("Running") or time.monotonic() > deadline:
                code = info.get("ExitCode")
                return int(code) if isinstance(code, int) else None
            await trio.sleep(0.05)


async def open_forwarder(api: Any, container_id: str, port: int, user: str) -> ExecPipe:
    """A pipe to 127.0.0.1:``port`` inside the container; EngineError when nothing answers."""
    exec_id = (
        await trio.to_thread.run_sync(
            functools.partial(
                api.exec_create,
                container_id,
                ["python3", "-c", FORWARDER, str(port)],
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                user=user,
                workdir="/workspace",
            )
        )
    )["Id"]
    pipe = await ExecPipe.start(api, exec_id, tty=False)
    with trio.move_on_after(CONNECT_S):
        first = await pipe.receive(1)
        if first == b"\0":
            return pipe
    await pipe.close()
    why = pipe.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no answer"]
    raise EngineError("tunnel", f"nothing answers on port {port} inside the job ({why[0][:200]})")


async def open_shell(
    api: Any,
    container_id: str,
    command: tuple[str, ...],
    rows: int,
    cols: int,
    term: str,
    user: str,
    environment: dict[str, str],
) -> ExecPipe:
    exec_id = (
        await trio.to_thread.run_sync(
            functools.partial(
                api.exec_create,
                container_id,
                list(command or DEFAULT_SHELL),
                stdin=True,
                stdout=True,
                stderr=True,
                tty=True,
                user=user,
                workdir="/workspace",
                environment={**environment, "TERM": term or "xterm"},
            )
        )
    )["Id"]
    pipe = await ExecPipe.start(api, exec_id, tty=True)
    await pipe.resize(rows, cols)
    return pipe
