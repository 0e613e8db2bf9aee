"""A plain py-libp2p host in one role of a DCUtR (hole punching) probe; run inside a lab namespace.

    python -m tests.network.relay_probe relay    LISTEN_IP       (the relay: relay_probe.py's)
    python -m tests.network.dcutr_probe listener RELAY_ADDR      (…/p2p/RELAY)
    python -m tests.network.dcutr_probe dialer   CIRCUIT_ADDR    (…/p2p-circuit/p2p/LISTENER)

Both ends run ``libp2p.relay.circuit_v2.dcutr.DCUtRProtocol`` as shipped (its auto-drive loop
included) on ``new_host()`` defaults; the dialer connects through the relay, asks for the
upgrade (``initiate_hole_punch``) and reports whether a direct connection came up, how long
it took, and which connection a new stream then uses. JSON lines on stdout, as relay_probe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.relay.circuit_v2.config import RelayConfig, RelayRole
from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL_ID
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.transport import CircuitV2Transport
from libp2p.tools.anyio_service import background_trio_service

from engine.network.dcutr import HolePunch
from tests.network.relay_probe import ECHO, MESSAGE, echo, emit, limits

LISTEN = multiaddr.Multiaddr(f"/ip4/0.0.0.0/tcp/{os.environ.get('PROBE_PORT', '4002')}")
UPGRADE_S = float(os.environ.get("PROBE_UPGRADE_S", "30"))
# "library": py-libp2p's DCUtRProtocol as shipped; "ours": engine/network/dcutr.py's HolePunch.
IMPL = os.environ.get("PROBE_IMPL", "library")


class Ours:
    """engine/network/dcutr.py on a plain host, shaped like the library's service."""

    def __init__(self, host: Any) -> None:
        self.punch = HolePunch(host)
        self.punch.install()

    async def initiate_hole_punch(self, peer_id: Any) -> bool:
        return await self.punch.upgrade(peer_id)


@contextlib.asynccontextmanager
async def hole_punching(host: Any) -> AsyncIterator[Any]:
    if IMPL == "ours":
        yield Ours(host)
        return
    dcutr = DCUtRProtocol(host)
    async with background_trio_service(dcutr):
        await dcutr.event_started.wait()
        yield dcutr


def _relayed(conn: object) -> bool:
    addrs: list[Any] = getattr(conn, "get_transport_addresses", list)()
    return any("/p2p-circuit" in str(a) for a in addrs)


async def listener(relay_addr: str) -> None:
    host = new_host(key_pair=create_new_key_pair())
    config = RelayConfig(roles=RelayRole.STOP | RelayRole.CLIENT, limits=limits())
    protocol = CircuitV2Protocol(host, limits=limits(), allow_hop=False)
    transport = CircuitV2Transport(host, protocol, config)
    info = info_from_p2p_addr(multiaddr.Multiaddr(relay_addr))
    host.set_stream_handler(ECHO, echo)
    async with (
        host.run([LISTEN]),
        background_trio_service(protocol),
        hole_punching(host),
        trio.open_nursery() as nursery,
    ):
        await protocol.event_started.wait()
        await host.connect(info)
        stream = await host.new_stream(info.peer_id, [HOP_PROTOCOL_ID])
        reserved = await transport.reserve(stream, info.peer_id, nursery)
        emit(
            "reserved" if reserved else "reservation-failed",
            peer_id=str(host.get_id()),
            circuit=f"{relay_addr}/p2p-circuit/p2p/{host.get_id()}",
        )
        await trio.sleep_forever()


async def dialer(circuit_addr: str) -> None:
    host = new_host(key_pair=create_new_key_pair())
    config = RelayConfig(roles=RelayRole.STOP | RelayRole.CLIENT, limits=limits())
    protocol = CircuitV2Protocol(host, limits=limits(), allow_hop=False)
    transport = CircuitV2Transport(host, protocol, config)
    target = multiaddr.Multiaddr(circuit_addr)
    relay_part = circuit_addr.partition("/p2p-circuit")[0]
    async with (
        host.run([LISTEN]),
        background_trio_service(protocol),
        hole_punching(host) as dcutr,
    ):
        await protocol.event_started.wait()
        # Connected to the relay first, as a node is (its bootstrap peer): identify there
        # gives us our observed address, which the CONNECT message carries.
        await host.connect(info_from_p2p_addr(multiaddr.Multiaddr(relay_part)))
        started = time.monotonic()
        with trio.fail_after(30):
            conn = await transport.dial(target)
        peer_id = conn.muxed_conn.peer_id
        emit("dialled", remote=str(peer_id), relayed=_relayed(conn))
        direct = False
        with trio.move_on_after(UPGRADE_S):
            while not direct:
                direct = await dcutr.initiate_hole_punch(peer_id)
                if not direct:
                    await trio.sleep(1.0)
        conns = host.get_network().get_connections(peer_id)
        emit(
            "upgrade",
            direct=direct,
            seconds=round(time.monotonic() - started, 3),
            conns=sorted(str(a) for c in conns for a in c.get_transport_addresses()),
        )
        with trio.fail_after(30):
            stream = await host.new_stream(peer_id, [ECHO])
            await stream.write(MESSAGE)
            got = b""
            while len(got) < len(MESSAGE):
                chunk = await stream.read(65536)
                if not chunk:
                    break
                got += chunk
        emit("echo", ok=got == MESSAGE, relayed=_relayed(stream.muxed_conn))
        os._exit(0 if got == MESSAGE else 1)  # skip the library's slow teardown


def main(argv: list[str]) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    for name in ("libp2p.relay.circuit_v2.dcutr", "nunet.network.dcutr"):
        logging.getLogger(name).setLevel(os.environ.get("PROBE_LOG", "WARNING"))
    role, arg = argv
    roles = {"listener": listener, "dialer": dialer}
    try:
        trio.run(roles[role], arg)
    except Exception as exc:
        emit("error", kind=type(exc).__name__, message=str(exc)[:500])
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
