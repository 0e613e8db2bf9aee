"""Many identities dialling one node from one source address, each holding its connection:
``python -m tests.adversarial.sybil_dialer TARGET COUNT SOURCE_IP [PROTOCOL STREAMS]``
prints, every half second, ``held N tried T streams S`` (connections open, identities that
finished dialling, streams of PROTOCOL open now) until stdin closes. With PROTOCOL, each
identity keeps STREAMS idle streams of it open, opening a new one whenever one is closed.

A process of its own: it binds every outbound TCP connection to SOURCE_IP (trio's
``open_tcp_stream`` is wrapped), which must not leak into the test process."""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any

import trio
from nacl.signing import SigningKey

from engine.identity import Identity
from engine.network.host import build_host, parse_peer_addr


class Counts:
    tried = 0
    streams = 0


async def _stream(host: Any, target: Any, protocol: str) -> None:
    from libp2p.custom_types import TProtocol

    while True:
        try:
            with trio.fail_after(10):
                stream = await host.new_stream(target.peer_id, [TProtocol(protocol)])
        except Exception:
            await trio.sleep(0.5)
            continue
        Counts.streams += 1
        try:
            with contextlib.suppress(Exception):
                await stream.read(1)  # idle until the victim ends it
        finally:
            Counts.streams -= 1
        await trio.sleep(0.1)


async def _hold(host: Any, target: Any, protocol: str, streams: int) -> None:
    async with host.run(listen_addrs=[]):
        connected = False
        try:
            with trio.fail_after(20):
                await host.connect(target)
            connected = True
        except Exception:  # refused, closed, timed out: this identity holds nothing
            pass
        Counts.tried += 1
        if connected and protocol:
            async with trio.open_nursery() as nursery:
                for _ in range(streams):
                    nursery.start_soon(_stream, host, target, protocol)
        await trio.sleep_forever()


async def main(target_addr: str, count: int, source: str, protocol: str, streams: int) -> None:
    trio.open_tcp_stream = functools.partial(trio.open_tcp_stream, local_address=source)  # type: ignore[assignment]
    target = parse_peer_addr(target_addr)
    hosts = [build_host(Identity(SigningKey.generate()), []) for _ in range(count)]
    async with trio.open_nursery() as nursery:
        for host in hosts:
            nursery.start_soon(_hold, host, target, protocol, streams)

        async def report() -> None:
            while True:
                held = sum(1 for h in hosts if h.get_network().connections.get(target.peer_id))
                print(f"held {held} tried {Counts.tried} streams {Counts.streams}", flush=True)
                await trio.sleep(0.5)

        nursery.start_soon(report)
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    extra = sys.argv[4:6] if len(sys.argv) > 5 else ["", "0"]
    trio.run(main, sys.argv[1], int(sys.argv[2]), sys.argv[3], extra[0], int(extra[1]))
