"""Greedy and lying peers against a real daemon that relays ([network] relay_service).

py-libp2p 0.8.1's circuit relay, as shipped (docs/network-nat.md): reservations are capped in
all only, so one address with a few identities takes every slot; a RESERVE may name another
peer and the relay believes it; a circuit's duration is checked between reads only, so an
idle circuit holds its slot for ever; and any peer may send a node a STOP, each one a nested
connection. engine/network/relay.py bounds each of these; here each bound holds against a
real daemon, which then still relays for an honest peer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import multiaddr
import pytest
import trio
from libp2p.host.exceptions import StreamFailure
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage, StopMessage
from libp2p.relay.circuit_v2.pb.circuit_pb2 import PeerId as CircuitPeerId
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.utils.varint import encode_varint_prefixed, read_varint_prefixed_bytes_limited

from engine.network.host import is_relayed_conn, peer_id_of
from engine.network.relay import HOP_PROTOCOL, STOP_PROTOCOL
from tests.adversarial.hostile import HostilePeer
from tests.daemon_harness import Daemon, wait_for

CIRCUIT_S = 3
CIRCUIT_BYTES = 1 << 18  # relay_circuit_mb = 0.25
PUSHED = 4 << 20
RELAY_ENV = {
    "NUNET_NETWORK_RELAY_SERVICE": "true",
    "NUNET_NETWORK_RELAY_RESERVATIONS_PER_IP": "2",
    "NUNET_NETWORK_RELAY_CIRCUITS_PER_PEER": "1",
    "NUNET_NETWORK_RELAY_CIRCUIT_S": str(CIRCUIT_S),
    "NUNET_NETWORK_RELAY_CIRCUIT_MB": "0.25",
}


def _hop(peer: HostilePeer, relay: Daemon, msg: HopMessage) -> HopMessage:
    """One HOP message to the relay and its answer (a STATUS)."""
    stream = peer.open(relay.peer_id, str(HOP_PROTOCOL))

    async def exchange() -> HopMessage:
        await stream.stream.write(encode_varint_prefixed(msg.SerializeToString()))
        with trio.fail_after(10):
            data = await read_varint_prefixed_bytes_limited(stream.stream, 4096)
        answer = HopMessage()
        answer.ParseFromString(data)
        return answer

    try:
        return peer.call(exchange)
    finally:
        stream.reset()


def _reserve(peer: HostilePeer, relay: Daemon, *, naming: str | None = None) -> int:
    msg = HopMessage(type=HopMessage.RESERVE)
    if naming is not None:
        msg.peer.CopyFrom(CircuitPeerId(id=peer_id_of(naming).to_bytes()))
    return int(_hop(peer, relay, msg).status)


RESET = -1  # the relay tried the circuit and reset our stream when the target refused it


def _connect_status(peer: HostilePeer, relay: Daemon, target: str) -> int:
    msg = HopMessage(type=HopMessage.CONNECT, peer=CircuitPeerId(id=peer_id_of(target).to_bytes()))
    try:
        return int(_hop(peer, relay, msg).status)
    except Exception as exc:  # a reset HOP stream (StreamReset, or the read failing on it)
        if "reset" in f"{type(exc).__name__} {exc}".lower():
            return RESET
        raise


def _relay_addr(relay: Daemon) -> str:
    return relay.addrs()[0]


def _reserve_for_real(peer: HostilePeer, relay: Daemon) -> None:
    """A reservation through the peer's own RelayClient, whose STOP handler then accepts
    circuits from this relay."""
    client = peer.service.relay_client
    client.relays = [_relay_addr(relay)]

    async def keep() -> None:
        await client._keep(_relay_addr(relay))

    peer.call(keep)
    assert client.addrs(), "the honest reservation was refused"


def _dial_through(dialer: HostilePeer, relay: Daemon, target: HostilePeer) -> bool:
    """A connection from dialer to target through the relay (True once there is one)."""
    circuit = multiaddr.Multiaddr(f"{_relay_addr(relay)}/p2p-circuit/p2p/{target.peer_id}")

    async def dial() -> None:
        await dialer.service.relay_client.dial(peer_id_of(target.peer_id), [circuit])

    dialer.call(dial)
    return _relayed(dialer, target)


def _relayed(dialer: HostilePeer, target: HostilePeer) -> bool:
    """Whether dialer holds a relayed connection to target (hostile peers on one machine
    may also find each other directly; those do not count)."""
    conns = dialer.host.get_network().get_connections(peer_id_of(target.peer_id))
    return any(is_relayed_conn(conn) for conn in conns)


@pytest.fixture
def relay(daemons: Callable[..., Daemon]) -> Daemon:
    return daemons("relay", 70, env=RELAY_ENV)


def test_reservations_per_address_and_for_the_sender_only(
    relay: Daemon, hostile: Callable[..., HostilePeer]
) -> None:
    boot = [_relay_addr(relay)]
    first, second, third, victim = (hostile(bootstrap=boot) for _ in range(4))
    for peer in (first, second, third):
        peer.wait_connected(relay.peer_id)
    # A RESERVE naming another peer reserves for its sender: the victim gets no slot.
    assert _reserve(first, relay, naming=victim.peer_id) == StatusCode.OK
    assert _connect_status(second, relay, victim.peer_id) == StatusCode.NO_RESERVATION
    assert _reserve(second, relay) == StatusCode.OK
    # Two identities hold this address's share; a third is refused, a refresh is not.
    assert _reserve(third, relay) == StatusCode.RESERVATION_REFUSED
    assert _reserve(first, relay) == StatusCode.OK
    # The first one's slot is real: a circuit to it is set up (then refused by the hostile
    # peer's own STOP handler, which holds no reservation of its own, or bounded by this
    # address's circuits: any answer but NO_RESERVATION, or the HOP stream reset as the relay
    # ends both halves of the refused circuit).
    assert _connect_status(second, relay, first.peer_id) != StatusCode.NO_RESERVATION


def _stop_sink(target: HostilePeer) -> dict[str, int]:
    """target answers every STOP with OK, then counts what the circuit brings: a raw end
    of a circuit, no Noise or yamux inside (only the relay's bounds are measured)."""
    got = {"bytes": 0, "circuits": 0}

    async def sink(stream: Any) -> None:
        await read_varint_prefixed_bytes_limited(stream, 4096)
        ok = StopMessage(type=StopMessage.STATUS, status=StatusCode.OK)  # type: ignore[arg-type]
        await stream.write(encode_varint_prefixed(ok.SerializeToString()))
        got["circuits"] += 1
        while chunk := await stream.read(65536):
            got["bytes"] += len(chunk)

    target.serve(str(STOP_PROTOCOL), sink)
    return got


def _open_circuit(dialer: HostilePeer, relay: Daemon, target: HostilePeer) -> Any:
    """A raw circuit: a HOP stream whose CONNECT the relay answered OK."""
    stream = dialer.open(relay.peer_id, str(HOP_PROTOCOL))
    connect = HopMessage(
        type=HopMessage.CONNECT, peer=CircuitPeerId(id=peer_id_of(target.peer_id).to_bytes())
    )

    async def exchange() -> int:
        await stream.stream.write(encode_varint_prefixed(connect.SerializeToString()))
        with trio.fail_after(10):
            data = await read_varint_prefixed_bytes_limited(stream.stream, 4096)
        answer = HopMessage()
        answer.ParseFromString(data)
        return int(answer.status)

    assert dialer.call(exchange) == StatusCode.OK
    return stream


def _ended(stream: Any, timeout: float) -> bool:
    """Whether the circuit ends (EOF or reset) within ``timeout``."""

    async def drain() -> bool:
        with trio.move_on_after(timeout):
            try:
                while await stream.stream.read(65536):
                    pass
            except Exception:
                pass
            return True
        return False

    ended: bool = stream._peer.call(drain)
    return ended


def test_idle_circuits_end_and_a_peer_gets_few(
    relay: Daemon, hostile: Callable[..., HostilePeer]
) -> None:
    boot = [_relay_addr(relay)]
    target, dialer = hostile(bootstrap=boot), hostile(bootstrap=boot)
    for peer in (target, dialer):
        peer.wait_connected(relay.peer_id)
    got = _stop_sink(target)
    assert _reserve(target, relay) == StatusCode.OK
    circuit = _open_circuit(dialer, relay, target)
    # A second circuit from the same peer while the first is open: over its share.
    assert _connect_status(dialer, relay, target.peer_id) == StatusCode.RESOURCE_LIMIT_EXCEEDED
    # Left idle, the circuit is reset at its deadline (the library kept it for ever).
    assert _ended(circuit, CIRCUIT_S + 10), "an idle circuit outlived relay_circuit_s"
    # The slot came back: the same peer sets up a new circuit.
    _open_circuit(dialer, relay, target).reset()
    assert got["circuits"] == 2


def test_a_circuit_past_its_data_is_reset(
    relay: Daemon, hostile: Callable[..., HostilePeer]
) -> None:
    boot = [_relay_addr(relay)]
    target, dialer = hostile(bootstrap=boot), hostile(bootstrap=boot)
    for peer in (target, dialer):
        peer.wait_connected(relay.peer_id)
    got = _stop_sink(target)
    assert _reserve(target, relay) == StatusCode.OK
    circuit = _open_circuit(dialer, relay, target)

    async def push() -> int:
        sent = 0
        with trio.move_on_after(30):
            try:
                while sent < PUSHED:
                    await circuit.stream.write(b"x" * 16384)
                    sent += 16384
            except Exception:
                pass
        return sent

    sent = dialer.call(push)
    assert sent < PUSHED, "the relay let 4 MiB through a circuit allowed 0.25 MiB"
    wait_for(lambda: got["bytes"] > 0, "nothing went through the circuit")
    assert got["bytes"] <= CIRCUIT_BYTES


def test_a_stop_from_a_peer_we_hold_no_reservation_on_is_refused(
    relay: Daemon, hostile: Callable[..., HostilePeer]
) -> None:
    """The library answers any STOP with OK and upgrades the stream to a connection; ours
    resets it unread unless it comes from a relay we reserved on."""
    stranger = hostile(bootstrap=[_relay_addr(relay)])
    stranger.wait_connected(relay.peer_id)
    try:
        stream = stranger.open(relay.peer_id, str(STOP_PROTOCOL))
    except StreamFailure:
        stream = None  # reset while the protocol was still being agreed: refused all the same
    if stream is not None:
        stop = StopMessage(
            type=StopMessage.CONNECT,
            peer=CircuitPeerId(id=peer_id_of(stranger.peer_id).to_bytes()),
        )
        with contextlib.suppress(Exception):  # reset before or while we write: refused
            stream.write(encode_varint_prefixed(stop.SerializeToString()))
        assert stream.read() == b""
    # The relay still relays for an honest pair.
    target, dialer = hostile(bootstrap=[_relay_addr(relay)]), stranger
    target.wait_connected(relay.peer_id)
    _reserve_for_real(target, relay)
    assert _dial_through(dialer, relay, target)
