"""A plain py-libp2p host in one role of an AutoNAT probe; run inside a lab namespace.

    python -m tests.network.autonat_probe server LISTEN_IP
    python -m tests.network.autonat_probe client SERVER_ADDR ROUTER_IP THIRD_PARTY_IP

Only py-libp2p 0.8.1's ``libp2p.host.autonat`` (``AutoNATService``) with ``new_host``'s
defaults: this measures the library, not our protocol (engine/network/autonat.py). The
client, behind a NAT that lets nothing in, asks the server to dial it back three ways and
prints each answer as a JSON line, then exits.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.host.autonat.autonat import AutoNATService
from libp2p.host.autonat.pb.autonat_pb2 import Message
from libp2p.peer.peerinfo import info_from_p2p_addr

PORT = 4001
CLIENT_PORT = 4002


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


async def server(listen_ip: str) -> None:
    host: Any = new_host(key_pair=create_new_key_pair())
    AutoNATService(host, serve=True)
    async with host.run([multiaddr.Multiaddr(f"/ip4/{listen_ip}/tcp/{PORT}")]):
        emit("ready", addr=f"/ip4/{listen_ip}/tcp/{PORT}/p2p/{host.get_id()}")
        await trio.sleep_forever()


async def client(server_addr: str, router_ip: str, third_party_ip: str) -> None:
    host: Any = new_host(key_pair=create_new_key_pair())
    service = AutoNATService(host, serve=False, confirmations=1)
    info = info_from_p2p_addr(multiaddr.Multiaddr(server_addr))
    async with host.run([multiaddr.Multiaddr(f"/ip4/0.0.0.0/tcp/{CLIENT_PORT}")]):
        await host.connect(info)
        asks = {
            "own listen addrs": None,  # the library's default: host.get_addrs()
            "router address": [f"/ip4/{router_ip}/tcp/{CLIENT_PORT}"],
            "third party": [f"/ip4/{third_party_ip}/tcp/{CLIENT_PORT}"],
        }
        for name, addrs in asks.items():
            raw = None if addrs is None else [multiaddr.Multiaddr(a).to_bytes() for a in addrs]
            status, got = await service.query_server(info.peer_id, raw, timeout=20)
            emit(
                "answer",
                ask=name,
                status=Message.ResponseStatus.Name(status),  # type: ignore[arg-type]
                addr=str(multiaddr.Multiaddr(got)) if got else None,
            )
        service.update_status()
        emit("status", status=service.get_status())


def main(argv: list[str]) -> int:
    role, *args = argv
    roles: dict[str, Any] = {"server": server, "client": client}
    trio.run(roles[role], *args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
