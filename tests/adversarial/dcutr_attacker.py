"""A hostile peer of the DCUtR amplification test; run inside a NAT lab namespace.

    python -m tests.adversarial.dcutr_attacker relayed CIRCUIT_ADDR COUNT ADDR...
    python -m tests.adversarial.dcutr_attacker direct  PEER_ADDR    COUNT ADDR...

Connects to the target (through the relay of CIRCUIT_ADDR, or directly to PEER_ADDR), then
sends COUNT DCUtR CONNECT messages, one stream each, naming ADDR... (a third party's
addresses, not ours) and a SYNC after each answer, as a peer that wants the target to flood
someone else would. Prints {"event": "done", "answers": [...]} ("connect": the target
answered and will dial; "refused": the stream was reset or closed unanswered), then stays
connected until killed (the target dials after the SYNC). ATTACK_PACE_S: seconds between
CONNECTs (0: at once).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.relay.circuit_v2.config import RelayConfig, RelayRole
from libp2p.relay.circuit_v2.pb.dcutr_pb2 import HolePunch
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.transport import CircuitV2Transport
from libp2p.tools.anyio_service import background_trio_service
from libp2p.utils.varint import encode_varint_prefixed, read_varint_prefixed_bytes_limited

from engine.network.dcutr import PROTOCOL
from tests.network.relay_probe import emit, limits

ANY_PORT = multiaddr.Multiaddr("/ip4/0.0.0.0/tcp/0")


def _message(kind: int, addrs: list[str]) -> bytes:
    msg = HolePunch()
    msg.type = kind  # type: ignore[assignment]
    msg.ObsAddrs.extend(multiaddr.Multiaddr(a).to_bytes() for a in addrs)
    return bytes(encode_varint_prefixed(msg.SerializeToString()))


async def attack(mode: str, target_addr: str, count: int, addrs: list[str]) -> None:
    host = new_host(key_pair=create_new_key_pair())
    protocol = CircuitV2Protocol(host, limits=limits(), allow_hop=False)
    transport = CircuitV2Transport(
        host, protocol, RelayConfig(roles=RelayRole.STOP | RelayRole.CLIENT, limits=limits())
    )
    async with host.run([ANY_PORT]), background_trio_service(protocol):
        await protocol.event_started.wait()
        if mode == "relayed":
            relay_part = target_addr.partition("/p2p-circuit")[0]
            await host.connect(info_from_p2p_addr(multiaddr.Multiaddr(relay_part)))
            with trio.fail_after(30):
                conn = await transport.dial(multiaddr.Multiaddr(target_addr))
            target = conn.muxed_conn.peer_id
        else:
            info = info_from_p2p_addr(multiaddr.Multiaddr(target_addr))
            await host.connect(info)
            target = info.peer_id
        answers = []
        pace = float(os.environ.get("ATTACK_PACE_S", "0"))
        for n in range(count):
            if n:
                await trio.sleep(pace)
            answer = "refused"
            stream = None
            try:
                with trio.fail_after(15):
                    stream = await host.new_stream(target, [PROTOCOL])
                    await stream.write(_message(HolePunch.CONNECT, addrs))
                    data = await read_varint_prefixed_bytes_limited(stream, 4096)
                    reply = HolePunch()
                    reply.ParseFromString(data)
                    if reply.type == HolePunch.CONNECT:
                        answer = "connect"
                        await stream.write(_message(HolePunch.SYNC, []))
                        await trio.sleep(1.0)  # the target dials now
            except (Exception, trio.TooSlowError):
                pass
            finally:
                if stream is not None:
                    with contextlib.suppress(Exception):
                        await stream.close()
            answers.append(answer)
        emit("done", answers=answers)
        await trio.sleep_forever()


def main(argv: list[str]) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    mode, target, count, *addrs = argv
    try:
        trio.run(attack, mode, target, int(count), addrs)
    except Exception as exc:
        emit("error", kind=type(exc).__name__, message=str(exc)[:500])
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
