"""Many identities dialling one node from one source address, each holding its connection:
``python -m tests.adversarial.sybil_dialer TARGET COUNT SOURCE_IP`` prints, every half
second, ``held N`` (how many of its connections are open) until stdin closes.

A process of its own: it binds every outbound TCP connection to SOURCE_IP (trio's
``open_tcp_stream`` is wrapped), which must not leak into the test process."""

from __future__ import annotations

import functools
import sys
from typing import Any

import trio
from nacl.signing import SigningKey

from engine.identity import Identity
from engine.network.host import build_host, parse_peer_addr


async def _hold(host: Any, target: Any, ready: list[int]) -> None:
    async with host.run(listen_addrs=[]):
        try:
            with trio.fail_after(20):
                await host.connect(target)
        except BaseException:  # refused, closed, timed out: this identity holds nothing
            if isinstance(sys.exc_info()[1], trio.Cancelled):
                raise
        ready.append(1)
        await trio.sleep_forever()


async def main(target_addr: str, count: int, source: str) -> None:
    trio.open_tcp_stream = functools.partial(trio.open_tcp_stream, local_address=source)  # type: ignore[assignment]
    target = parse_peer_addr(target_addr)
    hosts = [build_host(Identity(SigningKey.generate()), []) for _ in range(count)]
    tried: list[int] = []
    async with trio.open_nursery() as nursery:
        for host in hosts:
            nursery.start_soon(_hold, host, target, tried)

        async def report() -> None:
            while True:
                held = sum(1 for h in hosts if h.get_network().connections.get(target.peer_id))
                print(f"held {held} tried {len(tried)}", flush=True)
                await trio.sleep(0.5)

        nursery.start_soon(report)
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]), sys.argv[3])
