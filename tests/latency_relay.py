"""A slow, lossy link between two network namespaces: this kernel has no ``netem``, so the
delay and the losses are made here, in user space (tests/adversarial/test_slow_link.py,
bench/money_chaos.py).

Each route listens on a TCP address inside one namespace and forwards every connection to a
target inside another (the root namespace is ``""``). Each chunk read on either side is held
``delay`` seconds (drawn per chunk from the route's range, never reordering the stream) before
it is written on; each connection is cut at a random moment (an exponential lifetime of mean
``drop_s``) with a reset on both sides: everything in flight is lost, as when a home router's
NAT entry or a mobile link goes away. A peer that wants its frames through must dial again.

Run as a process::

    python -m tests.latency_relay ROUTE [ROUTE ...] [--seed N]

    ROUTE = LISTEN_NS:LISTEN_PORT=TARGET_NS:TARGET_HOST:TARGET_PORT
            [,delay=LO-HI][,stall=GAP:LO-HI][,drop=S]

``delay``: every chunk's hold, seconds; ``stall``: every GAP seconds on average the link
stalls LO-HI seconds (what crosses meanwhile arrives at its end); ``drop``: the mean lifetime
of a connection, seconds.

It prints one JSON line, ``{"ports": [...]}`` (the listening ports, in the routes' order; a
port of 0 is chosen by the kernel), once every route listens, then forwards until it is
terminated.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import random
import socket
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import trio

CLONE_NEWNET = 0x40000000
CHUNK = 64 * 1024
MAX_HELD_CHUNKS = 128  # per direction of one connection: 8 MiB at most in flight
_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def netns(name: str) -> Iterator[None]:
    """Sockets made inside this block belong to namespace ``name`` ("": the current one)."""
    if not name:
        yield
        return
    with open("/proc/self/ns/net", "rb") as here, open(f"/run/netns/{name}", "rb") as there:
        if _libc.setns(there.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name}")
        try:
            yield
        finally:
            if _libc.setns(here.fileno(), CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")


@dataclass(frozen=True)
class Route:
    listen_ns: str
    listen_port: int
    target_ns: str
    target_host: str
    target_port: int
    delay: tuple[float, float] = (0.0, 0.0)
    drop_s: float = 0.0  # mean lifetime of a connection; 0: never cut
    # Every ``stall_gap_s`` on average (per direction of a connection) the link stalls for
    # ``stall`` seconds: what crosses it meanwhile arrives at the stall's end (a congested
    # uplink, a radio link fading): a link mostly usable and now and then seconds late.
    stall_gap_s: float = 0.0
    stall: tuple[float, float] = (0.0, 0.0)

    @classmethod
    def parse(cls, text: str) -> Route:
        spec, *options = text.split(",")
        listen, target = spec.split("=")
        listen_ns, listen_port = listen.rsplit(":", 1)
        target_ns, target_host, target_port = target.split(":")
        delay, drop_s, stall_gap_s, stall = (0.0, 0.0), 0.0, 0.0, (0.0, 0.0)
        for option in options:
            key, value = option.split("=")
            if key == "delay":
                delay = _range(value)
            elif key == "drop":
                drop_s = float(value)
            elif key == "stall":
                gap, _, seconds = value.partition(":")
                stall_gap_s, stall = float(gap), _range(seconds)
            else:
                raise ValueError(f"unknown route option {key!r}")
        return cls(
            listen_ns,
            int(listen_port),
            target_ns,
            target_host,
            int(target_port),
            delay,
            drop_s,
            stall_gap_s,
            stall,
        )


def _range(text: str) -> tuple[float, float]:
    low, high = text.split("-")
    return float(low), float(high)


def _hard_close(sock: trio.socket.SocketType) -> None:
    """Close with a reset (SO_LINGER 0): the peer sees its connection die, not a clean end."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class Relay:
    def __init__(self, routes: list[Route], rng: random.Random) -> None:
        self.routes = routes
        self.rng = rng

    async def serve(
        self, task_status: trio.TaskStatus[list[int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        listeners = []
        for route in self.routes:
            with netns(route.listen_ns):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", route.listen_port))
            sock.listen(128)
            sock.setblocking(False)
            listeners.append((route, trio.socket.from_stdlib_socket(sock)))
        async with trio.open_nursery() as nursery:
            for route, listener in listeners:
                nursery.start_soon(self._accept, route, listener)
            task_status.started([listener.getsockname()[1] for _, listener in listeners])

    async def _accept(self, route: Route, listener: trio.socket.SocketType) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                client, _ = await listener.accept()
                nursery.start_soon(self._connection, route, client)

    async def _connection(self, route: Route, client: trio.socket.SocketType) -> None:
        with netns(route.target_ns):
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setblocking(False)
        upstream = trio.socket.from_stdlib_socket(raw)
        try:
            await upstream.connect((route.target_host, route.target_port))
        except OSError:
            _hard_close(client)
            upstream.close()
            return
        lifetime = self.rng.expovariate(1 / route.drop_s) if route.drop_s > 0 else math.inf
        with trio.move_on_after(lifetime):
            async with trio.open_nursery() as nursery:
                for source, sink in ((client, upstream), (upstream, client)):
                    nursery.start_soon(self._direction, route, source, sink, nursery.cancel_scope)
        _hard_close(client)
        _hard_close(upstream)

    async def _direction(
        self,
        route: Route,
        source: trio.socket.SocketType,
        sink: trio.socket.SocketType,
        both: trio.CancelScope,
    ) -> None:
        # Bounded: a full link stops reading (back-pressure), it never drops for lack of room.
        send, receive = trio.open_memory_channel[tuple[float, bytes]](MAX_HELD_CHUNKS)

        def gap() -> float:
            return self.rng.expovariate(1 / route.stall_gap_s) if route.stall_gap_s else math.inf

        async def read() -> None:
            last, stalled_until = 0.0, 0.0
            next_stall = trio.current_time() + gap()
            async with send:
                while True:
                    try:
                        data = await source.recv(CHUNK)
                    except OSError:
                        data = b""
                    now = trio.current_time()
                    if now >= next_stall:
                        stalled_until = now + self.rng.uniform(*route.stall)
                        next_stall = stalled_until + gap()
                    # Never earlier than the chunk before: a link delays, it does not reorder.
                    held = max(now, stalled_until) + self.rng.uniform(*route.delay)
                    last = max(last, held)
                    await send.send((last, data))
                    if not data:
                        return

        async def write() -> None:
            async with receive:
                async for at, data in receive:
                    await trio.sleep_until(at)
                    if not data:  # that side closed: close this one's sending side too
                        with contextlib.suppress(OSError):
                            sink.shutdown(socket.SHUT_WR)
                        return
                    try:
                        await _send_all(sink, data)
                    except OSError:
                        both.cancel()
                        return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            nursery.start_soon(write)


async def _send_all(sock: trio.socket.SocketType, data: bytes) -> None:
    view = memoryview(data)
    while view:
        sent = await sock.send(view)
        view = view[sent:]


async def _main(routes: list[Route], seed: int) -> None:
    relay = Relay(routes, random.Random(seed))
    async with trio.open_nursery() as nursery:
        ports = await nursery.start(relay.serve)
        print(json.dumps({"ports": ports}), flush=True)


def main(argv: list[str]) -> int:
    seed = int.from_bytes(os.urandom(4), "big")
    routes = []
    args = iter(argv)
    for arg in args:
        if arg == "--seed":
            seed = int(next(args))
        else:
            routes.append(Route.parse(arg))
    if not routes:
        print(__doc__, file=sys.stderr)
        return 2
    trio.run(_main, routes, seed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
