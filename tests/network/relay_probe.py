"""A plain py-libp2p host in one role of a circuit relay v2 probe; run inside a lab namespace.

    python -m tests.network.relay_probe relay    LISTEN_IP
    python -m tests.network.relay_probe listener RELAY_ADDR       (…/p2p/RELAY)
    python -m tests.network.relay_probe dialer   CIRCUIT_ADDR     (…/p2p-circuit/p2p/LISTENER)

Each prints JSON lines on stdout ({"event": ...}) for the test to read, and nothing else;
libp2p's own logging goes to stderr. The relay and the listener run until killed; the
dialer exits 0 once an echo through the circuit came back intact.

Only py-libp2p 0.8.1's own pieces are used (new_host with its defaults plus
`libp2p.relay.circuit_v2`), so this measures the library, not our guards.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.relay.circuit_v2.config import RelayConfig, RelayRole
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL_ID
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.resources import RelayLimits
from libp2p.relay.circuit_v2.transport import CircuitV2Transport
from libp2p.tools.anyio_service import background_trio_service

ECHO = TProtocol("/nunet-probe/echo/1")
PORT = 4001
ANY_PORT = multiaddr.Multiaddr("/ip4/0.0.0.0/tcp/0")
MESSAGE = b"through the relay " * 64  # 1,152 bytes: more than one read on the far side


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


async def echo(stream: Any) -> None:
    try:
        while data := await stream.read(65536):
            await stream.write(data)
    finally:
        await stream.close()


def limits() -> RelayLimits:
    return RelayLimits(
        duration=int(os.environ.get("PROBE_DURATION_S", "120")),
        data=1 << 20,
        max_circuit_conns=4,
        max_reservations=8,
    )


async def relay(listen_ip: str) -> None:
    host = new_host(key_pair=create_new_key_pair())
    protocol = CircuitV2Protocol(host, limits=limits(), allow_hop=True)
    listen = multiaddr.Multiaddr(f"/ip4/{listen_ip}/tcp/{PORT}")
    async with host.run([listen]), background_trio_service(protocol):
        await protocol.event_started.wait()
        emit("ready", addr=f"/ip4/{listen_ip}/tcp/{PORT}/p2p/{host.get_id()}")
        await trio.sleep_forever()


async def listener(relay_addr: str) -> None:
    host = new_host(key_pair=create_new_key_pair())
    config = RelayConfig(roles=RelayRole.STOP | RelayRole.CLIENT, limits=limits())
    protocol = CircuitV2Protocol(host, limits=limits(), allow_hop=False)
    transport = CircuitV2Transport(host, protocol, config)
    info = info_from_p2p_addr(multiaddr.Multiaddr(relay_addr))
    host.set_stream_handler(ECHO, echo)
    async with (
        host.run([ANY_PORT]),
        background_trio_service(protocol),
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
    async with host.run([ANY_PORT]), background_trio_service(protocol):
        await protocol.event_started.wait()
        with trio.fail_after(30):
            conn = await transport.dial(target)
        emit("dialled", remote=str(conn.muxed_conn.peer_id))
        peer_id = conn.muxed_conn.peer_id
        with trio.fail_after(30):
            stream = await host.new_stream(peer_id, [ECHO])
            await stream.write(MESSAGE)
            got = b""
            while len(got) < len(MESSAGE):
                chunk = await stream.read(65536)
                if not chunk:
                    break
                got += chunk
        emit("echo", ok=got == MESSAGE, bytes=len(got))
        await stream.close()
        os._exit(0 if got == MESSAGE else 1)  # skip the library's slow teardown


def main(argv: list[str]) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    role, arg = argv
    roles = {"relay": relay, "listener": listener, "dialer": dialer}
    try:
        trio.run(roles[role], arg)
    except Exception as exc:
        emit("error", kind=type(exc).__name__, message=str(exc)[:500])
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
