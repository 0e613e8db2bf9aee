"""The swarm does not dial peerstore peers by itself (libp2p_guards.no_auto_dials).

py-libp2p 0.8.1's AutoConnector dials up to 32 peers of the peerstore at a time, whenever
the node is below its connection watermark, to the addresses the peerstore holds: those that
adverts taught it, which an attacker chooses. A real host as the node builds it
(host.build_host), with 40 peers taught an address this test listens on, asked to top up its
connections: nothing connects. Without the guard, the trap counted 32 connects at once.
"""

from __future__ import annotations

import socket

import multiaddr
import trio
from nacl.signing import SigningKey

from engine.identity import Identity
from engine.network import host as hostmod


def test_the_swarm_never_dials_what_the_peerstore_was_taught() -> None:
    trap = socket.socket()
    trap.bind(("127.0.0.1", 0))
    trap.listen(64)
    trap.setblocking(False)
    port = trap.getsockname()[1]

    async def main() -> int:
        host = hostmod.build_host(Identity(SigningKey.generate()), ["/ip4/127.0.0.1/tcp/0"])
        async with host.run([multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
            for _ in range(40):
                fake = Identity(SigningKey.generate()).peer_id
                addr = multiaddr.Multiaddr(f"/ip4/127.0.0.1/tcp/{port}/p2p/{fake}")
                host.get_peerstore().add_addrs(hostmod.peer_id_of(fake), [addr], 3600)
            await host.get_network().auto_connector.maybe_connect()
            await trio.sleep(1.0)  # the dials, had any started, reach the trap by now
        accepts = 0
        while True:
            try:
                conn, _ = trap.accept()
            except BlockingIOError:
                return accepts
            accepts += 1
            conn.close()

    try:
        assert trio.run(main) == 0
    finally:
        trap.close()
