"""Moving a tunnel's bytes: the :class:`Pipe` protocol (a byte stream both ways), its
libp2p-stream and trio-stream forms, what an executor offers for tunnels
(:class:`TunnelExecutor`), and :func:`relay`, which copies both ways until both ends finish,
one breaks, or nothing moved for the idle time.

Separate from both sides, which use it alike (tunnel_provider.py: the stream to the job's port or
shell; tunnel_consumer.py: a local TCP connection or the CLI's shell socket to the stream),
and from the executors (docker.py, process.py), which hand back Pipes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import trio

from engine.domain.tunnel_frames import CHUNK
from engine.ports import wait_for_credit_up_to

# One logger for the tunnels, whichever of their modules writes the line.
log = logging.getLogger("nunet.jobs.tunnel")

CREDIT_GRACE_S = 5.0  # a write waits for window credit this much past the idle timeout


class Pipe(Protocol):
    """A byte stream both ways: what the relays move bytes between."""

    async def receive(self, max_bytes: int) -> bytes: ...  # b"" at the end
    async def send(self, data: bytes) -> None: ...
    async def send_eof(self) -> None: ...
    async def close(self) -> None: ...


@runtime_checkable
class ShellPipe(Pipe, Protocol):
    async def resize(self, rows: int, cols: int) -> None: ...
    async def exit_code(self) -> int | None: ...


@runtime_checkable
class TunnelExecutor(Protocol):
    """What an executor offers for tunnels (docker.py, process.py)."""

    name: str

    async def open_tunnel(self, run: Any, port: int) -> Pipe: ...
    async def exec_shell(
        self, run: Any, command: tuple[str, ...], rows: int, cols: int, term: str
    ) -> ShellPipe: ...


_EOF_NAMES = ("StreamEOF", "EOFError", "IncompleteReadError", "MuxedStreamEOF")


class StreamPipe:
    """A libp2p stream as a Pipe (its EOF errors read as the end).

    ``idle_s``: the relay's idle timeout. A write waits that long for the peer's window credit
    (a local client that paused reading), where py-libp2p gave up after 5 s and reset the
    tunnel; the relay ends a tunnel idle that long itself, with its reason ("idle"). The
    write's own bound, a little later, is only a backstop: were both due at once, the write's
    error could end the tunnel first as "broken"."""

    def __init__(self, stream: Any, idle_s: float | None = None) -> None:
        self.stream = stream
        if idle_s is not None:
            wait_for_credit_up_to(stream, idle_s + CREDIT_GRACE_S)

    async def receive(self, max_bytes: int) -> bytes:
        try:
            return bytes(await self.stream.read(max_bytes))
        except Exception as exc:
            if type(exc).__name__ in _EOF_NAMES:
                return b""
            raise

    async def send(self, data: bytes) -> None:
        await self.stream.write(data)

    async def send_eof(self) -> None:
        with contextlib.suppress(Exception):
            await self.stream.close()

    async def close(self) -> None:
        await reset(self.stream)


class TrioPipe:
    """A trio stream (TCP or Unix socket) as a Pipe."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream

    async def receive(self, max_bytes: int) -> bytes:
        try:
            return bytes(await self.stream.receive_some(max_bytes))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return b""

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send_eof(self) -> None:
        if isinstance(self.stream, trio.abc.HalfCloseableStream):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await self.stream.send_eof()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.stream.aclose()


async def reset(stream: Any) -> None:
    with contextlib.suppress(Exception), trio.move_on_after(1.0):
        await stream.reset()


@dataclass
class Activity:
    """When a relay last moved a byte, and how many it moved each way."""

    at: float = field(default_factory=trio.current_time)
    up: int = 0  # a -> b
    down: int = 0  # b -> a


async def relay(
    a: Pipe,
    b: Pipe,
    *,
    idle_s: float,
    activity: Activity | None = None,
    on_up: Callable[[int], None] | None = None,
    on_down: Callable[[int], None] | None = None,
) -> str:
    """Bytes both ways until both ends have finished (each end's EOF is passed on), one
    breaks, or nothing moved for ``idle_s``; returns why it ended ("closed", "idle",
    "broken")."""
    seen = activity or Activity()
    ended = ["closed"]

    async def pump(src: Pipe, dst: Pipe, up: bool) -> None:
        while True:
            data = await src.receive(CHUNK)
            if not data:
                await dst.send_eof()
                return
            seen.at = trio.current_time()
            await dst.send(data)
            if up:
                seen.up += len(data)
                if on_up is not None:
                    on_up(len(data))
            else:
                seen.down += len(data)
                if on_down is not None:
                    on_down(len(data))

    async def guarded(src: Pipe, dst: Pipe, up: bool, scope: trio.CancelScope) -> None:
        try:
            await pump(src, dst, up)
        except Exception as exc:  # one end broke: the other has nothing left to talk to
            log.debug("tunnel relay: %s", exc)
            ended[0] = "broken"
            scope.cancel()

    with trio.CancelScope() as everything:
        async with trio.open_nursery() as outer:
            outer.start_soon(idle_watch, seen, idle_s, everything, ended)
            async with trio.open_nursery() as pumps:
                pumps.start_soon(guarded, a, b, True, everything)
                pumps.start_soon(guarded, b, a, False, everything)
            outer.cancel_scope.cancel()  # both ends finished: stop the watchdog
    return ended[0]


async def idle_watch(
    seen: Activity, idle_s: float, scope: trio.CancelScope, ended: list[str]
) -> None:
    while True:
        left = seen.at + idle_s - trio.current_time()
        if left <= 0:
            ended[0] = "idle"
            scope.cancel()
            return
        await trio.sleep(left)
