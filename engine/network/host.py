"""The libp2p host: our identity, TCP + Noise + yamux only, bootstrap with backoff.

Choices come from PLATFORM-NOTES: one connection per peer (otherwise every dial waits a fixed
250 ms), Noise as the only security transport (py-libp2p offers plaintext and secio by
default), yamux only (no mplex fallback) with go-yamux's window credit (yamux_credit.py),
and ``close()`` before cancelling so peers see us go.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import random
from collections.abc import Callable, Sequence
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.serialization import deserialize_private_key
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.network.config import ConnectionConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.rcmgr import Direction, ResourceLimits, ResourceManager
from libp2p.rcmgr.connection_limits import ConnectionLimits
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux

from engine.identity import Identity, short_peer_id
from engine.network import yamux_credit
from engine.network.libp2p_guards import (
    bound_multistream_messages,
    deadline_protocol_reads,
    guard_host,
    no_auto_dials,
)
from engine.network.pending_gate import (
    MAX_INBOUND_PER_IP,
    MAX_INBOUND_PER_SUBNET,
    MAX_PENDING_PER_IP,
    PendingGate,
)

log = logging.getLogger("nunet.network.host")

BOOTSTRAP_MIN_BACKOFF_S = 0.5
BOOTSTRAP_MAX_BACKOFF_S = 30.0
DIAL_TIMEOUT_S = 5.0
# What one peer may hold of us at once. Our own protocols use a few streams per peer (gossip,
# chat, a job's follow and asks, identify, kad); the cap is far above that and far below the
# 10,000 streams that the whole node has (py-libp2p's default): one peer can no longer take
# them all. Per protocol, handlers have tighter caps of their own (ratelimit.StreamLimiter).
MAX_INBOUND_STREAMS_PER_PEER = 128
MAX_CONNECTIONS_PER_PEER = 4  # established, both directions; we keep one (ConnectionConfig)


def key_pair_of(identity: Identity) -> KeyPair:
    private = deserialize_private_key(identity.private_key_protobuf)
    return KeyPair(private, private.get_public_key())


class PerPeerResourceManager(ResourceManager):
    """py-libp2p's resource manager plus a cap on the inbound streams of each peer.

    py-libp2p 0.8.1's swarm consults the resource manager for every stream (inbound ones in
    ``SwarmConn._handle_muxed_stream``, before protocol negotiation; outbound in
    ``Swarm.new_stream``) but only through ``acquire_stream(peer_id, direction)``, which counts
    streams for the whole node; its per-protocol and per-peer scopes
    (``acquire_scoped_stream``) are never called by the swarm or the host. So the per-peer
    count is added here, where the swarm already asks, and a peer over it has its new stream
    reset before it costs a negotiation. Outbound streams (ours) are not capped per peer.
    """

    def __init__(self, max_inbound_per_peer: int = MAX_INBOUND_STREAMS_PER_PEER) -> None:
        super().__init__(
            limits=ResourceLimits(),
            connection_limits=ConnectionLimits(
                max_pending_inbound=64,
                max_pending_outbound=64,
                max_established_inbound=256,
                max_established_outbound=256,
                max_established_per_peer=MAX_CONNECTIONS_PER_PEER,
                max_established_total=1024,
            ),
            enable_metrics=False,  # per-stream bookkeeping nobody reads
        )
        self.max_inbound_per_peer = max_inbound_per_peer
        self._inbound: dict[str, int] = {}

    def acquire_stream(self, peer_id: str, direction: Direction) -> bool:
        if direction != Direction.INBOUND:
            return bool(super().acquire_stream(peer_id, direction))
        key = str(peer_id)
        with self._lock:
            held = self._inbound.get(key, 0)
            if held >= self.max_inbound_per_peer:
                self._record_blocked_resource("stream", "inbound", scope="peer")
                return False
            if not super().acquire_stream(peer_id, direction):
                return False
            self._inbound[key] = held + 1
            return True

    def release_stream(self, peer_id: str, direction: Direction) -> None:
        if direction == Direction.INBOUND:
            key = str(peer_id)
            with self._lock:
                held = self._inbound.get(key, 0)
                if held <= 1:
                    self._inbound.pop(key, None)
                else:
                    self._inbound[key] = held - 1
        super().release_stream(peer_id, direction)

    def inbound_streams(self, peer_id: str) -> int:
        with self._lock:
            return self._inbound.get(str(peer_id), 0)


def build_host(
    identity: Identity,
    listen: Sequence[str],
    *,
    max_pending_per_ip: int = MAX_PENDING_PER_IP,
    max_inbound_per_ip: int = MAX_INBOUND_PER_IP,
    max_inbound_per_subnet: int = MAX_INBOUND_PER_SUBNET,
    in_good_standing: Callable[[str], bool] = lambda peer_id: False,
) -> Any:
    """A BasicHost with our key; nothing listens until ``host.run(listen_addrs)``.
    ``in_good_standing``: peers admitted past the inbound quotas (pending_gate.py)."""
    key_pair = key_pair_of(identity)
    noise = NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)
    host = new_host(
        key_pair=key_pair,
        resource_manager=PerPeerResourceManager(),
        sec_opt={TProtocol(NOISE_PROTOCOL_ID): noise},
        muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux},
        listen_addrs=[multiaddr.Multiaddr(addr) for addr in listen],
        connection_config=ConnectionConfig(
            max_connections_per_peer=1,
            dial_timeout=DIAL_TIMEOUT_S,
        ),
        # mDNS is handled (or not) by discovery.py, never by the host's own flag: the host's
        # version multicasts on every interface.
        enable_mDNS=False,
    )
    # A handler that raises on a stranger's stream must not close the host, and a stranger's
    # first bytes must not announce a message of any length (libp2p_guards).
    guard_host(host)
    # Nor dial, by itself, whatever addresses adverts taught the peerstore.
    no_auto_dials(host.get_network())
    bound_multistream_messages()
    # Nor keep a gossip or DHT stream open with a message trickled a byte at a time.
    deadline_protocol_reads()
    # One address's idle connections, or many identities from one address or subnet, must
    # not take every inbound slot (pending_gate.py).
    PendingGate(
        max_pending_per_ip,
        established_per_address=max_inbound_per_ip,
        established_per_subnet=max_inbound_per_subnet,
        in_good_standing=in_good_standing,
    ).install(host.get_network())
    # A stream's sender is credited once half its window is read, not after every read.
    yamux_credit.install(host)
    return host


def listen_multiaddrs(listen: Sequence[str]) -> list[multiaddr.Multiaddr]:
    return [multiaddr.Multiaddr(addr) for addr in listen]


def our_addrs(host: Any) -> list[str]:
    """Listen addresses with /p2p/<peer id>, as peers should dial them."""
    return [str(addr) for addr in host.get_addrs()]


def parse_peer_addr(addr: str) -> PeerInfo:
    """``/ip4/.../tcp/N/p2p/12D3...`` -> PeerInfo; ValueError with a clear message otherwise."""
    try:
        return info_from_p2p_addr(multiaddr.Multiaddr(addr))
    except Exception as exc:
        raise ValueError(f"{addr!r} is not a peer address (…/p2p/<peer id>): {exc}") from exc


def peer_id_of(text: str) -> ID:
    try:
        return ID.from_base58(text)
    except Exception as exc:
        raise ValueError(f"{text[:80]!r} is not a peer id") from exc


async def connect(host: Any, info: PeerInfo, timeout: float = DIAL_TIMEOUT_S) -> None:
    with trio.fail_after(timeout):
        await host.connect(info)


def is_connected(host: Any, peer_id: ID) -> bool:
    return bool(host.get_network().connections.get(peer_id))


def has_open_connection(host: Any, peer_id: ID) -> bool:
    """A connection to ``peer_id`` that is not closed: one a relay ended stays listed a
    while, and ``new_stream`` then fails with "No valid connections" instead of dialling."""
    try:
        conns = host.get_network().get_connections(peer_id)
    except Exception:
        return False
    return any(not getattr(conn, "is_closed", False) for conn in conns)


def drop_closed(host: Any, peer_id: ID) -> int:
    """Forget connections to ``peer_id`` that are closed but still listed (a circuit the
    relay ended): the swarm keeps one connection a peer, and a new one must take its place.
    Returns how many went."""
    network = host.get_network()
    dropped = 0
    with contextlib.suppress(Exception):
        for conn in list(network.get_connections(peer_id)):
            if getattr(conn, "is_closed", False):
                network.remove_conn(conn)
                dropped += 1
    return dropped


async def keep_bootstrapped(host: Any, addrs: Sequence[str], on_connected: Any = None) -> None:
    """Stay connected to every bootstrap peer; redial with jittered exponential backoff.

    A bootstrap peer that vanishes is simply redialled later; nothing here ever raises, so a
    bad entry in the config never takes the node down.
    """
    infos: list[PeerInfo] = []
    for addr in addrs:
        try:
            info = parse_peer_addr(addr)
        except ValueError as exc:
            log.warning("ignoring bootstrap entry: %s", exc)
            continue
        if info.peer_id != host.get_id():
            infos.append(info)
    if not infos:
        return
    async with trio.open_nursery() as nursery:
        for info in infos:
            nursery.start_soon(_keep_one, host, info, on_connected)


async def _keep_one(host: Any, info: PeerInfo, on_connected: Any) -> None:
    backoff = BOOTSTRAP_MIN_BACKOFF_S
    while True:
        # Not is_connected: a connection that closed can stay listed (seen after a relay reset
        # a circuit that was still being written to), and would never be dialled again.
        if not has_open_connection(host, info.peer_id):
            drop_closed(host, info.peer_id)
            # Our backoff paces a bootstrap's dials: py-libp2p's own negative cache would keep
            # it away a minute after each failed one (longer while other dials keep failing),
            # so a rig behind a lossy link stayed cut off long after the link came back.
            unblock = getattr(host.get_network(), "unblock_peer", None)
            if unblock is not None:
                unblock(info.peer_id)
            # py-libp2p dials one TCP address per peer, the first it knows: the addresses the
            # bootstrap announced of itself (identify) would hide the configured one for good,
            # as when it is reached through a relay, a port forward or a NAT. The configured
            # address is dialled; identify teaches the others again once connected.
            with contextlib.suppress(Exception):
                host.get_peerstore().clear_addrs(info.peer_id)
            try:
                await connect(host, info)
            except (Exception, trio.TooSlowError) as exc:
                log.info(
                    "bootstrap %s unreachable (%s); retry in %.1fs", info.peer_id, exc, backoff
                )
                await trio.sleep(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, BOOTSTRAP_MAX_BACKOFF_S)
                continue
            log.info("connected to bootstrap peer %s", info.peer_id)
            backoff = BOOTSTRAP_MIN_BACKOFF_S
            if on_connected is not None:
                await on_connected(info.peer_id)
        await trio.sleep(1.0)


def is_relayed_conn(conn: Any) -> bool:
    """A swarm connection (or a muxed or raw one) that runs through a circuit relay: its
    remote address is the relay's (engine/network/relay.py)."""
    with contextlib.suppress(Exception):
        if str(getattr(conn.get_connection_type(), "value", "")).lower() == "relayed":
            return True
    with contextlib.suppress(Exception):
        return any("/p2p-circuit" in str(a) for a in conn.get_transport_addresses())
    return False


def _raw_of(conn: Any) -> Any:
    """The raw connection under a swarm, muxed or secured connection (itself if none)."""
    for name in ("muxed_conn", "secured_conn", "conn"):
        inner = getattr(conn, name, None)
        if inner is not None and inner is not conn:
            conn = inner
    return conn


def relay_of_conn(conn: Any) -> str:
    """The relay a relayed connection runs through ("" when it cannot be told). Read from
    the relay stream it rides on, whose far end is the relay on both sides: the inbound
    side's circuit address names ourselves instead (docs/network-nat.md, defect 8)."""
    with contextlib.suppress(Exception):
        return str(_raw_of(conn).stream.muxed_conn.peer_id)
    with contextlib.suppress(Exception):
        for addr in conn.get_transport_addresses():
            text = str(addr)
            if "/p2p-circuit" in text:
                return text.split("/p2p-circuit")[0].rsplit("/p2p/", 1)[1]
    return ""


def connection_path(conn: Any) -> str:
    """How a connection reaches its peer, as the user is told: "direct" or "via relay
    <short id>" (engine/identity.short_peer_id)."""
    if not (is_relayed_conn(conn) or is_relayed_conn(_raw_of(conn))):
        return "direct"
    relay = relay_of_conn(conn)
    return f"via relay {short_peer_id(relay)}" if relay else "via a relay"


def _paths(host: Any, peer_id: ID) -> list[str]:
    """``connection_path`` of each open connection to ``peer_id``."""
    try:
        conns = host.get_network().get_connections(peer_id)
        return [connection_path(c) for c in conns if not getattr(c, "is_closed", False)]
    except Exception:
        return []


def peer_path(host: Any, peer_id: ID) -> str:
    """The path of our connection to ``peer_id``: "direct" when any is, else "via relay …";
    "" when we have none."""
    paths = _paths(host, peer_id)
    if "direct" in paths:
        return "direct"
    return paths[0] if paths else ""


def has_direct(host: Any, peer_id: ID) -> bool:
    return "direct" in _paths(host, peer_id)


def has_relayed(host: Any, peer_id: ID) -> bool:
    return any(path != "direct" for path in _paths(host, peer_id))


def tcp_listen(bound: list[str]) -> tuple[int | None, str | None]:
    """The first TCP port we listen on, and our address on the LAN when it is a specific
    one (0.0.0.0: we cannot name it from the listen address alone)."""
    for addr in bound:
        with contextlib.suppress(Exception):
            parts = multiaddr.Multiaddr(addr)
            names = [p.name for p in parts.protocols()]
            if names[:2] not in (["ip4", "tcp"], ["ip6", "tcp"]):
                continue
            ip = ipaddress.ip_address(parts.value_for_protocol(names[0]))
            if ip.is_loopback:
                continue
            port = int(parts.value_for_protocol("tcp"))
            return port, None if ip.is_unspecified else str(ip)
    return None, None


def observed_addr(host: Any, peer_id: ID) -> str | None:
    """The address a live connection to ``peer_id`` runs over (``/ip4/a.b.c.d/tcp/p``): seen on
    the wire, not claimed by the peer. None without a connection or when it cannot be read."""
    try:
        for conn in host.get_network().get_connections(peer_id):
            if is_relayed_conn(conn):
                continue  # its remote address is the relay's, not the peer's
            remote = conn.muxed_conn.get_remote_address()
            if remote:
                ip, port = remote[0], int(remote[1])
                family = "ip6" if ":" in ip else "ip4"
                return f"/{family}/{ip}/tcp/{port}"
    except Exception:
        return None
    return None
