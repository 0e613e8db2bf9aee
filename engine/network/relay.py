"""Circuit relay v2 for nodes behind NAT: py-libp2p 0.8.1's protocol, behind our own handlers.

A node behind a home router cannot be dialled; a publicly reachable node with
``[network] relay_service`` relays for it. The private node reserves a slot on a relay it is
connected to (its configured ``relays``, and its bootstrap peers that offer the service) and
advertises ``…/p2p/RELAY/p2p-circuit/p2p/SELF``; a peer that wants to reach it and is itself
connected to that relay asks the relay to CONNECT, and the relay opens a STOP stream to the
private node and copies bytes between the two. Noise and yamux run end to end inside.

``libp2p.relay.circuit_v2`` does the wire protocol; its handlers are never registered as they
ship, because (docs/network-nat.md, measured in the NAT lab):

- a RESERVE names the peer it is for, and the library believes it over the connection's
  authenticated peer (protocol.py:510): we clear that field;
- it bounds reservations in all only, never per address, and circuits per reservation only
  (config.py's per-IP limits are read by nothing): we count both per address and per peer;
- a circuit's duration is checked between reads only, so an idle circuit held its slot for
  ever (protocol.py:846): each circuit runs under a deadline here, and its streams are reset
  when it passes;
- any peer may send a STOP, and each costs a whole nested connection: we accept STOP only
  from relays we hold a reservation on, a few handshakes at a time per relay.

The swarm never dials a ``/p2p-circuit`` address (swarm.py:824), so relayed peers are
dialled here, explicitly, and only through a relay we are already connected to: an advert
can make us talk to no machine we did not already talk to (issue 21).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import multiaddr
import trio
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.config import RelayConfig, RelayRole
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL
from libp2p.relay.circuit_v2.protocol import STOP_PROTOCOL_ID as STOP_PROTOCOL
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode, to_proto_status
from libp2p.relay.circuit_v2.resources import RelayLimits
from libp2p.relay.circuit_v2.transport import CircuitV2Transport
from libp2p.relay.circuit_v2.utils import write_delimited_msg
from libp2p.utils.varint import read_varint_prefixed_bytes_limited

from engine.config import NetworkSettings
from engine.domain.ratelimit import address_scopes
from engine.network.host import has_open_connection, is_relayed_conn

log = logging.getLogger("nunet.network.relay")

# A RESERVE or CONNECT is a type, a peer id and perhaps a voucher: well under 1 KiB.
MAX_HOP_MESSAGE = 4096
HOP_READ_S = 10.0  # for the first message of a HOP stream
RESERVATION_TTL_S = 3600
RESERVE_TIMEOUT_S = 10.0
RESERVE_CHECK_S = 5.0  # how often the client looks at its reservations
REFRESH_BEFORE_S = 300.0  # a reservation is renewed this long before it expires
STOP_HANDSHAKES_PER_RELAY = 8  # relayed connections being set up at once, per relay
DIAL_TIMEOUT_S = 10.0
CIRCUIT = "/p2p-circuit"


class _Circuit:
    """The reads of one circuit's two directions (RelayService._relay_data), ended together
    when one direction ends on a reset stream (issue 24: the library's data cap resets both
    streams, and the other direction's read of a stream reset here never returned, so the
    circuit held its peer's share until relay_circuit_s; a fetch in parts was then refused
    its next circuits). Only reads are cancelled: a write cut mid-frame would break the
    whole connection under it."""

    def __init__(self) -> None:
        self.ended = False
        self.reads: set[trio.CancelScope] = set()

    def end(self) -> None:
        self.ended = True
        for scope in self.reads:
            scope.cancel()


class _EndableReads:
    """A circuit's stream whose reads return b"" (the end) once the circuit ended."""

    def __init__(self, stream: Any, circuit: _Circuit) -> None:
        self._stream = stream
        self._circuit = circuit

    async def read(self, n: int | None = None) -> bytes:
        if self._circuit.ended:
            return b""
        with trio.CancelScope() as scope:
            self._circuit.reads.add(scope)
            try:
                return bytes(await self._stream.read(n))
            finally:
                self._circuit.reads.discard(scope)
        return b""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


_circuit: contextvars.ContextVar[_Circuit | None] = contextvars.ContextVar(
    "relay_circuit", default=None
)
_stop_streams: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "relay_stop_streams", default=None
)


@dataclass(frozen=True)
class RelayBounds:
    max_reservations: int
    reservations_per_ip: int
    max_circuits: int
    circuits_per_peer: int
    circuits_per_ip: int
    circuit_s: float
    circuit_bytes: int

    @classmethod
    def of(cls, settings: NetworkSettings) -> RelayBounds:
        return cls(
            max_reservations=settings.relay_max_reservations,
            reservations_per_ip=settings.relay_reservations_per_ip,
            max_circuits=settings.relay_max_circuits,
            circuits_per_peer=settings.relay_circuits_per_peer,
            circuits_per_ip=settings.relay_circuits_per_ip,
            circuit_s=settings.relay_circuit_s,
            circuit_bytes=max(1, int(settings.relay_circuit_mb * (1 << 20))),
        )

    def limits(self) -> RelayLimits:
        return RelayLimits(
            duration=max(1, int(self.circuit_s)),
            data=self.circuit_bytes,
            max_circuit_conns=self.circuits_per_peer,
            max_reservations=self.max_reservations,
            reservation_ttl=RESERVATION_TTL_S,
        )


def _stream_is_relayed(stream: Any) -> bool:
    muxed = getattr(stream, "muxed_conn", None)
    if muxed is None:
        return False
    if is_relayed_conn(muxed):
        return True
    secured = getattr(muxed, "secured_conn", None)
    raw = getattr(secured, "conn", None)
    return raw is not None and is_relayed_conn(raw)


def _remote_ip(stream: Any) -> str:
    with contextlib.suppress(Exception):
        remote = stream.muxed_conn.get_remote_address()
        if remote:
            return address_scopes(str(remote[0]))[0]
    return "?"


async def _status(stream: Any, code: StatusCode) -> None:
    with contextlib.suppress(Exception), trio.move_on_after(2):
        await write_delimited_msg(
            stream, HopMessage(type=HopMessage.STATUS, status=to_proto_status(code))
        )


async def _reset(stream: Any) -> None:
    with trio.CancelScope(shield=True), contextlib.suppress(Exception), trio.move_on_after(2):
        await stream.reset()


async def _finish(stream: Any) -> None:
    """Close (what we wrote, a status, still reaches the peer), or reset if that fails."""
    with trio.CancelScope(shield=True), trio.move_on_after(2):
        try:
            await stream.close()
            return
        except Exception:
            pass
    await _reset(stream)


class _RecordingHost:
    """The host as the library's relay sees it: the STOP streams it opens are recorded for
    the circuit being set up in this task, so that a circuit past its deadline can reset
    both of its streams (the library keeps them by source peer only, one per peer)."""

    def __init__(self, host: Any) -> None:
        self._host = host

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    async def new_stream(self, peer_id: Any, protocols: Sequence[Any]) -> Any:
        stream = await self._host.new_stream(peer_id, protocols)
        recorded = _stop_streams.get()
        if recorded is not None:
            recorded.append(stream)
        return stream


class RelayService:
    """The relay (hop) side, on a publicly reachable node with ``relay_service = true``."""

    def __init__(self, host: Any, bounds: RelayBounds) -> None:
        self.host = host
        self.bounds = bounds
        recording: Any = _RecordingHost(host)
        self.protocol = CircuitV2Protocol(recording, limits=bounds.limits(), allow_hop=True)
        self._relay_direction = self.protocol._relay_data
        self.protocol._relay_data = self._relay_data  # type: ignore[method-assign,assignment]
        self._reserved_from: dict[str, set[ID]] = {}  # address -> peers that reserved from it
        self._reserving: set[ID] = set()  # being answered right now
        self._circuits_of_peer: dict[ID, int] = {}
        self._circuits_of_ip: dict[str, int] = {}
        self.refused = 0

    def install(self) -> None:
        self.host.set_stream_handler(HOP_PROTOCOL, self._handle)

    def circuits(self) -> int:
        return sum(self._circuits_of_peer.values())

    def reservations(self) -> int:
        self._prune()
        return sum(len(peers) for peers in self._reserved_from.values())

    async def _handle(self, stream: Any) -> None:
        try:
            if _stream_is_relayed(stream):  # the spec: no hop over a relayed connection
                await _status(stream, StatusCode.PERMISSION_DENIED)
                return
            with trio.fail_after(HOP_READ_S):
                data = await read_varint_prefixed_bytes_limited(stream, MAX_HOP_MESSAGE)
            msg = HopMessage()
            msg.ParseFromString(data)
            if msg.type == HopMessage.RESERVE:
                await self._reserve(stream, msg)
            elif msg.type == HopMessage.CONNECT:
                await self._connect(stream, msg)
            else:
                await _status(stream, StatusCode.UNEXPECTED_MESSAGE)
        except (Exception, trio.TooSlowError) as exc:
            log.debug("hop stream from %s: %s", _peer(stream), exc)
            await _reset(stream)
        finally:
            await _finish(stream)

    async def _reserve(self, stream: Any, msg: HopMessage) -> None:
        peer = stream.muxed_conn.peer_id
        ip = _remote_ip(stream)
        self._prune()
        held = self._reserved_from.setdefault(ip, set())
        if peer not in held and len(held) >= self.bounds.reservations_per_ip:
            self.refused += 1
            log.info("relay: reservation refused to %s (%s holds %d)", peer, ip, len(held))
            await _status(stream, StatusCode.RESERVATION_REFUSED)
            return
        # Counted before the library answers: the answer reaches the peer before the
        # library's handler returns, and the next RESERVE must already see this one.
        held.add(peer)
        self._reserving.add(peer)
        try:
            # The reservation is for the authenticated peer, never one the message names.
            msg.ClearField("peer")
            await self.protocol._handle_reserve(stream, msg)
        finally:
            self._reserving.discard(peer)
            if self.protocol.resource_manager.get_reservation(peer) is None:
                held.discard(peer)

    def _prune(self) -> None:
        """Forget reservations that expired or whose peer disconnected."""
        manager = self.protocol.resource_manager
        for ip, peers in list(self._reserved_from.items()):
            peers.intersection_update(
                {p for p in peers if p in self._reserving or manager.get_reservation(p)}
            )
            if not peers:
                del self._reserved_from[ip]

    async def _connect(self, stream: Any, msg: HopMessage) -> None:
        source = stream.muxed_conn.peer_id
        ip = _remote_ip(stream)
        if (
            self.circuits() >= self.bounds.max_circuits
            or self._circuits_of_peer.get(source, 0) >= self.bounds.circuits_per_peer
            or self._circuits_of_ip.get(ip, 0) >= self.bounds.circuits_per_ip
        ):
            self.refused += 1
            await _status(stream, StatusCode.RESOURCE_LIMIT_EXCEEDED)
            return
        self._circuits_of_peer[source] = self._circuits_of_peer.get(source, 0) + 1
        self._circuits_of_ip[ip] = self._circuits_of_ip.get(ip, 0) + 1
        recorded: list[Any] = []
        token = _stop_streams.set(recorded)
        circuit_token = _circuit.set(_Circuit())
        try:
            # The circuit's whole life, idle or not, setting up included.
            with trio.move_on_after(self.bounds.circuit_s):
                await self.protocol._handle_connect(stream, msg)
        finally:
            _circuit.reset(circuit_token)
            _stop_streams.reset(token)
            for other in (*recorded, stream):  # the circuit is over: both of its ends
                await _reset(other)
            # Only this circuit's entries: the library keys them by peer, and a newer
            # circuit of the same peers may have taken the key (defect 5).
            mine = {id(s) for s in (*recorded, stream)}
            for key, pair in list(self.protocol._active_relays.items()):
                if any(id(s) in mine for s in pair if s is not None):
                    del self.protocol._active_relays[key]
            _decrement(self._circuits_of_peer, source)
            _decrement(self._circuits_of_ip, ip)

    async def _relay_data(self, src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        """One direction of a circuit, the library's, whose reads end with the circuit
        (:class:`_Circuit`)."""
        circuit = _circuit.get()
        if circuit is None:
            await self._relay_direction(src, dst, *args, **kwargs)
            return
        # Its peer id is only a key to the library (the data cap is the circuit's own): our
        # circuit in its place, so that its cleanup, which closes the streams filed under
        # that key, never closes a newer circuit of the same peers (defect 5: seen as a
        # shell's stream hanging on a circuit an older one's end had half-closed).
        key: Any = circuit
        try:
            endable: Any = _EndableReads(src, circuit)
            await self._relay_direction(endable, dst, key, *args[1:], **kwargs)
        finally:
            if _was_reset(src) or _was_reset(dst):
                circuit.end()


def _was_reset(stream: Any) -> bool:
    return str(getattr(getattr(stream, "_state", None), "name", "")) in ("RESET", "ERROR")


def _decrement(counts: dict[Any, int], key: Any) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


def _peer(stream: Any) -> str:
    with contextlib.suppress(Exception):
        return str(stream.muxed_conn.peer_id)
    return "?"


def circuit_addrs(addrs: Sequence[str], peer_id: str) -> list[multiaddr.Multiaddr]:
    """The well-formed ``<relay addr>/p2p/RELAY/p2p-circuit/p2p/<peer_id>`` among ``addrs``
    (an advert's first few); anything else is left out."""
    good = []
    for addr in addrs[:8]:
        if CIRCUIT not in addr:
            continue
        try:
            relay_part, _, target = addr.partition(CIRCUIT)
            if target != f"/p2p/{peer_id}":
                continue
            relay = multiaddr.Multiaddr(relay_part)
            if not relay.get_peer_id():
                continue
            good.append(multiaddr.Multiaddr(addr))
        except Exception:
            continue
    return good


def relay_of(circuit: multiaddr.Multiaddr) -> ID:
    relay_part = str(circuit).partition(CIRCUIT)[0]
    return ID.from_base58(multiaddr.Multiaddr(relay_part).get_peer_id())


@dataclass
class _Reservation:
    addr: str  # the relay's address as we dialled it, with /p2p/RELAY
    expires: float


class RelayClient:
    """The private node's side: reservations on relays, their circuit addresses, the STOP
    handler, and dials through a relay."""

    def __init__(self, host: Any, relays: Sequence[str]) -> None:
        self.host = host
        self.relays = list(dict.fromkeys(relays))  # …/p2p/RELAY, in order of preference
        limits = RelayBounds.of(NetworkSettings()).limits()
        # Never run as a service: its unguarded handlers are never registered.
        self.protocol = CircuitV2Protocol(host, limits=limits, allow_hop=False)
        self.transport = CircuitV2Transport(
            host, self.protocol, RelayConfig(roles=RelayRole.STOP | RelayRole.CLIENT)
        )
        self.reserved: dict[ID, _Reservation] = {}
        self._handshakes: dict[ID, int] = {}
        self._not_relays: dict[ID, float] = {}  # relays that refused, until when

    def install(self) -> None:
        self.host.set_stream_handler(STOP_PROTOCOL, self._handle_stop)

    def addrs(self) -> list[str]:
        """Our circuit addresses through the relays we hold a reservation on."""
        me = self.host.get_id()
        return [f"{r.addr}{CIRCUIT}/p2p/{me}" for r in self.reserved.values()]

    async def run(self, wanted: Callable[[], bool], changed: Callable[[], None]) -> None:
        """Hold a reservation on every relay we are connected to while ``wanted()`` (we
        advertise); ``changed()`` when our circuit addresses changed."""
        while True:
            before = set(self.reserved)
            if wanted():
                for addr in self.relays:
                    await self._keep(addr)
            else:
                self.reserved.clear()
            for relay in list(self.reserved):
                if not self.host.get_network().connections.get(relay):
                    del self.reserved[relay]  # a reservation lives as long as its connection
            if set(self.reserved) != before:
                log.info("relay addresses: %s", ", ".join(self.addrs()) or "none")
                changed()
            await trio.sleep(RESERVE_CHECK_S)

    async def _keep(self, addr: str) -> None:
        try:
            relay = ID.from_base58(multiaddr.Multiaddr(addr).get_peer_id())
        except Exception:
            return
        now = time.time()
        held = self.reserved.get(relay)
        if held is not None and held.expires - now > REFRESH_BEFORE_S:
            return
        if self._not_relays.get(relay, 0.0) > now:
            return
        if not self.host.get_network().connections.get(relay):
            return
        stream = None
        ok = False
        try:
            with trio.fail_after(RESERVE_TIMEOUT_S):
                stream = await self.host.new_stream(relay, [HOP_PROTOCOL])
                ok = await self.transport._make_reservation(stream, relay)
        except (Exception, trio.TooSlowError) as exc:
            log.debug("no reservation on %s: %s", relay, exc)
        finally:
            if stream is not None:
                await _reset(stream)
        if ok:
            expires = float(self.transport._reservations.get(relay, now + RESERVATION_TTL_S))
            self.reserved[relay] = _Reservation(addr, expires)
        else:
            self.reserved.pop(relay, None)
            self._not_relays[relay] = now + 60.0  # not a relay, or full: ask again later

    async def _handle_stop(self, stream: Any) -> None:
        relay = stream.muxed_conn.peer_id
        busy = self._handshakes.get(relay, 0)
        if relay not in self.reserved or busy >= STOP_HANDSHAKES_PER_RELAY:
            await _reset(stream)
            return
        if _stream_is_relayed(stream):
            await _reset(stream)
            return
        self._handshakes[relay] = busy + 1
        try:
            # Reads the STOP (bounded, under a deadline), answers, and upgrades the stream to
            # a connection of ours (Noise and yamux) that the swarm then runs.
            await self.protocol._handle_stop_stream(stream)
        finally:
            _decrement(self._handshakes, relay)

    async def dial(self, peer_id: ID, circuits: Sequence[multiaddr.Multiaddr]) -> bool:
        """Connect to ``peer_id`` through one of ``circuits`` whose relay we are connected to
        (no other relay is dialled). True once connected."""
        for circuit in circuits:
            try:
                relay = relay_of(circuit)
            except Exception:
                continue
            if relay == self.host.get_id() or not has_open_connection(self.host, relay):
                continue
            try:
                with trio.fail_after(DIAL_TIMEOUT_S):
                    await self.transport.dial(circuit)
            except (Exception, trio.TooSlowError) as exc:
                log.info("could not reach %s through %s: %s", peer_id, relay, exc)
                continue
            if has_open_connection(self.host, peer_id):  # not a closed one still listed
                return True
        return False


def relay_candidates(settings: NetworkSettings) -> list[str]:
    """Where to reserve: the configured relays, then (relay_via_bootstrap) bootstrap peers."""
    candidates = list(settings.relays)
    if settings.relay_via_bootstrap:
        candidates += settings.bootstrap
    return candidates
