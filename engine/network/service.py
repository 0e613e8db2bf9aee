"""``NetworkService``: the node's presence on the libp2p network, run inside the engine's nursery.

Start order: host listening -> pubsub/gossipsub + Kademlia DHT (server mode) -> bootstrap,
discovery, heartbeats, peer upkeep; ``task_status.started()`` once we listen. Stop order is the
reverse with one rule from the notes: ``host.close()`` (shielded) before anything is cancelled,
so peers see the connections close, then pubsub's ``seen_messages`` thread is stopped.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio
from libp2p.custom_types import TProtocol
from libp2p.host.ping import ID as PING_PROTOCOL
from libp2p.kad_dht.kad_dht import DHTMode
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, GossipSub
from libp2p.records.validator import NamespacedValidator
from libp2p.tools.anyio_service import background_trio_service

from engine.config import NetworkSettings
from engine.domain import wire
from engine.domain.peer_info import PeerInfo
from engine.identity import Identity
from engine.network import adverts, supervise
from engine.network import host as hostmod
from engine.network.autonat import DialBackServer, Reachability
from engine.network.chat import ChatHooks, ChatService, PeerUnreachable
from engine.network.dcutr import HolePunch
from engine.network.dht_bounds import BoundedKadDHT
from engine.network.discovery import DHT_LOOKUP_INTERVAL_S, Discovery
from engine.network.heartbeat import HeartbeatFigures, Heartbeats
from engine.network.libp2p_guards import GuardedPubsub
from engine.network.mdns import LocalDiscovery
from engine.network.natpmp import NatPmpMethod
from engine.network.peers import PeerTable
from engine.network.port_mapping import PortMapper
from engine.network.record_book import StoreBounds
from engine.network.relay import (
    RelayBounds,
    RelayClient,
    RelayService,
    circuit_addrs,
    relay_candidates,
)
from engine.network.upnp import UpnpMethod

log = logging.getLogger("nunet.network")
PROVIDE_S = 20.0  # one DHT provide or provider lookup at most (data by CID, issue 26)

PING_TIMEOUT_S = 3.0
PING_INTERVAL_S = 5.0
ROUTING_RETRY_MAX_S = 60.0
CLOSE_TIMEOUT_S = 1.0
# A new stream through a relay is agreed within this, or its circuit is taken for gone and a
# new one is dialled (under the tunnels' 10 s header wait: room for the second try).
RELAYED_STREAM_S = 4.0
UPGRADE_TIMEOUT_S = 30.0  # one hole punch, its exchange over the relay included
CIRCUITS_REMEMBERED = 256  # peers whose last circuit addresses reach() keeps (issue 24)


def dht_bounds_of(settings: NetworkSettings) -> StoreBounds:
    per_ip = settings.dht_records_per_ip
    return StoreBounds(
        max_records=settings.dht_max_records,
        max_bytes=int(settings.dht_max_mb * (1 << 20)),
        per_peer=min(64, per_ip),
        per_address=per_ip,
        per_subnet=settings.dht_records_per_subnet,
    )


class NetworkCallbacks(ChatHooks, Protocol):
    """What the node supplies. All are called on the engine's trio thread and must not block."""

    def advert(self) -> wire.Advert | None:
        """What to advertise now; None when paused, offboarded or not a provider."""
        ...

    def heartbeat(self) -> HeartbeatFigures | None:
        """Current figures for the heartbeat; None to send none."""
        ...

    def on_peer_changed(self, peer_id: str, info: PeerInfo | None) -> None:
        """A peer appeared or changed (info) or left the list (None)."""
        ...

    def in_good_standing(self, peer_id: str) -> bool:
        """We deal with this peer (a job, an escrow, an accepted chat): the per-address and
        per-subnet quotas that hold strangers back never push it out."""
        ...


class NetworkService:
    def __init__(
        self,
        identity: Identity,
        settings: NetworkSettings,
        channel: str | None,
        callbacks: NetworkCallbacks,
        *,
        advert_ttl_s: float | None = None,
        advert_refresh_s: float | None = None,
        chat_seq_floor: Callable[[str, str], int] | None = None,
        mdns: bool = False,
    ) -> None:
        self.identity = identity
        self.settings = settings
        self.channel = channel
        self.callbacks = callbacks
        interval = settings.heartbeat_interval_s
        # Adverts are re-signed well before they expire; the table drops silent peers anyway.
        self.advert_refresh_s = advert_refresh_s or max(10 * interval, 5.0)
        self.advert_ttl_s = advert_ttl_s or 3 * self.advert_refresh_s
        # Peers in good standing (a job, an escrow, an accepted chat) are never evicted when
        # the table is full; callbacks without the hook protect nobody.
        self.table = PeerTable(
            channel,
            interval,
            self._peer_changed,
            protected=callbacks.in_good_standing,
            connected=self._observed,
        )
        self.host: Any = None
        self.pubsub: Any = None
        self.dht: Any = None
        self.chat: ChatService | None = None
        # Outgoing chat numbering continues from what the node stored, across restarts.
        self._chat_seq_floor = chat_seq_floor
        self.discovery: Discovery | None = None
        self.heartbeats: Heartbeats | None = None
        # mDNS on settings.mdns_interfaces only (a provider onboarded with -l): see mdns.py.
        self.mdns = mdns
        self.local_discovery: LocalDiscovery | None = None
        self._mdns_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._started = False
        # Circuit relay v2 (relay.py): reservations, circuit addresses, dials through a relay;
        # the relay service itself only with [network] relay_service.
        self.relay_client: RelayClient | None = None
        self._circuits_of: dict[str, list[Any]] = {}  # multiaddrs
        self.relay_service: RelayService | None = None
        # Hole punching (dcutr.py): a relayed connection we made is upgraded where the NATs
        # allow; peers' requests are answered on relayed connections only.
        self.hole_punch: HolePunch | None = None
        # Port mapping (port_mapping.py): the home router forwards our listen port, asked by
        # UPnP or NAT-PMP, while we advertise.
        self.port_mapper: PortMapper | None = None
        # AutoNAT (autonat.py): whether the internet reaches us, and dial-backs for others.
        self.reachability: Reachability | None = None
        self.autonat_server: DialBackServer | None = None

    # --- public API -------------------------------------------------------------------------

    def listen_addrs(self) -> list[str]:
        try:
            return hostmod.our_addrs(self.host) if self.host is not None else []
        except OSError:
            return []  # closing: the listener's socket is already gone (a restart, a stop)

    def _forward_changed(self) -> None:
        """The router forwards a port to us now, or no longer: advertise it, and learn again
        whether the internet reaches us."""
        self.republish_advert()
        if self.reachability is not None:
            self.reachability.soon()

    def _tcp_port(self) -> int | None:
        """The TCP port of our first non-loopback IPv4 listen address (what the router is
        asked to forward)."""
        return hostmod.tcp_listen([a for a in self.bound_listen() if a.startswith("/ip4/")])[0]

    def bound_listen(self) -> list[str]:
        """The listen addresses with the ports actually bound (``tcp/0`` resolved).

        A restart listens on these again, so peers that know our address can still reach us.
        """
        if self.host is None:
            return []
        try:
            return [str(addr) for addr in self.host.get_transport_addrs()]
        except OSError:
            return []

    def peers(self) -> list[PeerInfo]:
        return self.table.snapshot()

    def peer(self, peer_id: str) -> PeerInfo | None:
        return self.table.get(peer_id)

    def connected_peers(self) -> list[str]:
        return [str(p) for p in self.host.get_connected_peers()] if self.host else []

    async def open_stream(self, peer_id: str, protocol: str) -> Any:
        """A new stream to ``peer_id`` (ValueError for a bad id; py-libp2p's dial errors)."""
        if self.host is None:
            raise PeerUnreachable("the network is not running")
        pid = hostmod.peer_id_of(peer_id)
        await self.reach(peer_id)
        relayed = hostmod.peer_path(self.host, pid).startswith("via")
        try:
            if not relayed:
                try:
                    return await self.host.new_stream(pid, [TProtocol(protocol)])
                except Exception as exc:
                    # Both ends dialling at once can leave one connection that looks
                    # established but never finished its upgrade (py-libp2p 0.8.1: "fail to
                    # upgrade mux" on the other side); every stream on it fails until it is
                    # trimmed. Measured: 45 s of failed streams between two new daemons.
                    # Closed, and dialled afresh once.
                    if not hostmod.has_open_connection(self.host, pid):
                        raise
                    log.info("stream to %s failed (%s): redialling", peer_id, exc)
                    for conn in list(self.host.get_network().get_connections(pid)):
                        with contextlib.suppress(Exception):
                            await conn.close()
                    hostmod.drop_closed(self.host, pid)
                    await self.reach(peer_id)
                    return await self.host.new_stream(pid, [TProtocol(protocol)])
            # A circuit the relay ends under a new stream can leave its negotiation waiting
            # for an answer that never comes (measured: `job shell` right after a forward cut
            # at the data cap, one run in three): bounded, then a new circuit.
            with trio.fail_after(RELAYED_STREAM_S):
                return await self.host.new_stream(pid, [TProtocol(protocol)])
        except trio.TooSlowError:
            log.info("stream to %s through a relay got no answer: trying a new circuit", peer_id)
            for conn in list(self.host.get_network().get_connections(pid)):
                if hostmod.is_relayed_conn(conn):
                    with contextlib.suppress(Exception):
                        await conn.close()
            hostmod.drop_closed(self.host, pid)
        except Exception as exc:
            # A circuit the relay has just ended (its time or data cap, issue 24) can still
            # look open to reach() and be found closed by new_stream, which then does not
            # dial: once more, through a new circuit, when the peer is reached that way.
            if self.relay_client is None or hostmod.has_open_connection(self.host, pid):
                raise
            log.info("stream to %s failed (%s): trying a new circuit", peer_id, exc)
        await self._reach_relayed(peer_id)
        return await self.host.new_stream(pid, [TProtocol(protocol)])

    async def reach(self, peer_id: str) -> None:
        """Before dialling ``peer_id``: the peerstore holds its confirmed addresses, asked of
        our bootstrap peers if need be (engine/network/confirmed.py); never an advert's own.
        A peer with none that advertises a circuit through a relay we are connected to is
        connected to through that relay (relay.py)."""
        if self.discovery is not None:
            await self.discovery.reach(peer_id)
        await self._reach_relayed(peer_id)

    async def _reach_relayed(self, peer_id: str) -> None:
        if self.relay_client is None or self.host is None:
            return
        info = self.table.get(peer_id)
        circuits = circuit_addrs(info.addrs, peer_id) if info is not None else []
        if circuits:
            self._circuits_of[peer_id] = circuits
            while len(self._circuits_of) > CIRCUITS_REMEMBERED:
                self._circuits_of.pop(next(iter(self._circuits_of)))
        else:
            # A peer we reach through a relay can drop out of the table while its circuit is
            # being replaced (its heartbeats rode the circuit that ended): its last circuit
            # addresses, from its signed advert, still lead to it (issue 24).
            circuits = self._circuits_of.get(peer_id, [])
        if not circuits:
            return
        pid = hostmod.peer_id_of(peer_id)
        # Not is_connected: a circuit the relay ended (its time or data cap) leaves a closed
        # connection listed, and a stream must then go through a new circuit (issue 24).
        if hostmod.has_open_connection(self.host, pid):
            return
        hostmod.drop_closed(self.host, pid)
        direct = [a for a in self.host.get_peerstore().addrs(pid) if "/p2p-circuit" not in str(a)]
        if direct:
            with contextlib.suppress(Exception, trio.TooSlowError):
                await hostmod.connect(self.host, hostmod.PeerInfo(pid, direct))
                return
        if not await self.relay_client.dial(pid, circuits):
            log.info("could not reach %s through any relay we are connected to", peer_id)
        elif self._nursery is not None:
            # The stream that wanted this peer goes through the relay now; new ones take the
            # direct connection once there is one.
            self._nursery.start_soon(self._upgrade, pid)

    async def _upgrade(self, pid: Any) -> None:
        if self.hole_punch is None:
            return
        started = time.monotonic()
        direct = False
        with trio.move_on_after(UPGRADE_TIMEOUT_S):
            direct = await self.hole_punch.upgrade(pid)
        if direct:
            took = time.monotonic() - started
            log.info("direct connection to %s %.2fs after the relayed one", pid, took)
        else:
            log.info("no direct connection to %s: staying relayed", pid)

    def path(self, peer_id: str, stream: Any = None) -> str:
        """How we reach ``peer_id`` now, as the user is told: "direct", "via relay <short
        id>", or "" (no connection); with ``stream``, the path of the connection it runs on."""
        if stream is not None and (muxed := getattr(stream, "muxed_conn", None)) is not None:
            return hostmod.connection_path(muxed)
        if self.host is None:
            return ""
        try:
            pid = hostmod.peer_id_of(peer_id)
        except ValueError:
            return ""
        return hostmod.peer_path(self.host, pid)

    def set_stream_handler(self, protocol: str, handler: Callable[[Any], Awaitable[None]]) -> None:
        self.host.set_stream_handler(TProtocol(protocol), handler)

    async def provide(self, key: str) -> None:
        if self.dht is not None:
            with trio.move_on_after(PROVIDE_S):
                await self.dht.provide(key)

    async def find_providers(self, key: str) -> list[str]:
        """Peer ids only: a provider record's addresses are its writer's word, never dialled
        (``open_stream`` reaches a peer at its confirmed addresses)."""
        if self.dht is None:
            return []
        with trio.move_on_after(PROVIDE_S):
            found = await self.dht.find_providers(key)
            return [str(p.peer_id) for p in found if str(p.peer_id) != self.identity.peer_id]
        return []

    async def send_chat(
        self, peer_id: str, text: str, conversation: str | None = None
    ) -> tuple[int, float]:
        """Deliver a chat message; (seq, at) once acked. MessageTooLarge / PeerUnreachable."""
        return await self._chat().send(peer_id, text, conversation)

    async def start_chat(self, peer_id: str) -> str:
        return await self._chat().start(peer_id)

    async def join_chat(self, peer_id: str, conversation: str) -> None:
        await self._chat().join(peer_id, conversation)

    async def ping(self, peer_id: str) -> float:
        """Round trip in milliseconds over /ipfs/ping/1.0.0; PeerUnreachable otherwise."""
        if self.host is None:
            raise PeerUnreachable("the network is not running")
        stream = None
        try:
            with trio.fail_after(PING_TIMEOUT_S):
                stream = await self.host.new_stream(
                    hostmod.peer_id_of(peer_id), [TProtocol(PING_PROTOCOL)]
                )
                payload = secrets.token_bytes(32)
                start = time.perf_counter()
                await stream.write(payload)
                got = b""
                while len(got) < 32:
                    chunk = await stream.read(32 - len(got))
                    if not chunk:
                        break
                    got += chunk
                rtt_ms = (time.perf_counter() - start) * 1000
            if got != payload:
                raise PeerUnreachable(f"peer {peer_id} answered the ping wrongly")
        except (Exception, trio.TooSlowError) as exc:
            if isinstance(exc, PeerUnreachable):
                raise
            raise PeerUnreachable(f"peer {peer_id} did not answer a ping: {exc}") from exc
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.close()
        self.table.on_latency(peer_id, round(rtt_ms, 3))
        return rtt_ms

    def beat_now(self) -> None:
        """Publish a heartbeat now rather than at the next interval."""
        if self.heartbeats is not None:
            self.heartbeats.beat_soon()

    def republish_advert(self) -> None:
        """Re-read the advert provider now (onboarding changed, paused, resumed)."""
        if self.discovery is not None:
            self.discovery.republish()

    def set_mdns(self, on: bool) -> None:
        """Start or stop local discovery in place (no restart: connections and adverts stay)."""
        self.mdns = on
        if self._nursery is None:
            return  # run() starts it if still wanted
        running = self._mdns_scope is not None and not self._mdns_scope.cancel_called
        if on and not running:
            self._nursery.start_soon(self._run_mdns)
        elif not on and running and self._mdns_scope is not None:
            self._mdns_scope.cancel()

    # --- lifecycle ------------------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.host = hostmod.build_host(
            self.identity,
            self.settings.listen,
            max_pending_per_ip=self.settings.max_pending_per_ip,
            max_inbound_per_ip=self.settings.max_inbound_per_ip,
            max_inbound_per_subnet=self.settings.max_inbound_per_subnet,
            in_good_standing=self.callbacks.in_good_standing,
        )
        gossipsub = GossipSub(
            protocols=[PROTOCOL_ID_V11, PROTOCOL_ID],
            degree=6,
            degree_low=4,
            degree_high=12,
            heartbeat_initial_delay=0.1,
            heartbeat_interval=1,
            # Off: it silently drops >10 msgs/s per peer and topic. Our topic validators
            # rate-limit per origin instead (heartbeat.py, discovery.py).
            spam_protection_enabled=False,
            # All test peers share 127.0.0.1; the IP-diversity grafting only adds churn.
            eclipse_protection_enabled=False,
        )
        self.pubsub = GuardedPubsub(self.host, gossipsub)
        validator = NamespacedValidator(
            {adverts.NAMESPACE: adverts.AdvertValidator()}, strict_validation=True
        )
        # What other peers can make us keep, and how fast they can write it (dht_bounds.py).
        self.dht = BoundedKadDHT(
            self.host,
            DHTMode.SERVER,
            bounds=dht_bounds_of(self.settings),
            standing=self.callbacks.in_good_standing,
            validator=validator,
            validator_changed=True,
            strict_validation=True,
        )
        # The node says who is in good standing (link.py).
        self.chat = ChatService(
            self.host, self.callbacks, self._chat_seq_floor, self.callbacks.in_good_standing
        )
        self.chat.before_dial = self.reach
        self.relay_client = RelayClient(self.host, relay_candidates(self.settings))
        if self.settings.upnp:
            self.port_mapper = PortMapper(
                self._tcp_port,
                self.identity.peer_id,
                [UpnpMethod(), NatPmpMethod()],
                on_change=self._forward_changed,
            )
        self.relay_client.install()
        self.hole_punch = HolePunch(self.host)
        self.hole_punch.install()
        if self.settings.relay_service:
            self.relay_service = RelayService(self.host, RelayBounds.of(self.settings))
            self.relay_service.install()
        self.reachability = Reachability(self.host, interval_s=self.settings.autonat_interval_s)
        if self.settings.autonat_service:
            self.autonat_server = DialBackServer(self.host)
            self.autonat_server.install()
        try:
            async with (
                self.host.run(hostmod.listen_multiaddrs(self.settings.listen)),
                background_trio_service(self.pubsub),
                background_trio_service(gossipsub),
                background_trio_service(self.dht),
            ):
                await self.pubsub.wait_until_ready()
                try:
                    async with trio.open_nursery() as nursery:
                        self._start_services(nursery)
                        self._nursery = nursery
                        if self.mdns:
                            # started() once browsing; registration goes on in the background.
                            await nursery.start(self._run_mdns)
                        self._started = True
                        log.info("network up: %s", ", ".join(self.listen_addrs()))
                        task_status.started()
                        await trio.sleep_forever()
                finally:
                    self._nursery = None
                    await self._close()
        finally:
            self._stop_threads()

    async def _run_mdns(
        self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        scope = trio.CancelScope()
        self._mdns_scope = scope
        with scope:
            self.local_discovery = LocalDiscovery(
                self.host, self.settings.mdns_interfaces, self._on_bootstrap
            )
            await self.local_discovery.run(task_status=task_status)
        if self._mdns_scope is scope:
            self._mdns_scope = None
            self.local_discovery = None

    def _start_services(self, nursery: trio.Nursery) -> None:
        # Each loop is supervised: one that fails is restarted alone, never the network.
        nursery.start_soon(
            supervise.supervised,
            "bootstrap",
            lambda: hostmod.keep_bootstrapped(
                self.host, self.settings.bootstrap, self._on_bootstrap
            ),
        )
        nursery.start_soon(supervise.supervised, "routing upkeep", self._routing_upkeep)
        if self.reachability is not None:
            reachability = self.reachability
            nursery.start_soon(
                supervise.supervised,
                "reachability",
                # Nothing to republish on a new verdict: the relay client follows it by itself
                # (relay.py, every few seconds) and republishes when our circuit addresses
                # change; an advert per verdict told the channel a silent node was alive.
                lambda: reachability.run(self._autonat_servers, self.bound_listen, lambda: None),
            )
        relays_only = [r for r in self.settings.relays if r not in self.settings.bootstrap]
        if relays_only:
            nursery.start_soon(
                supervise.supervised,
                "relays",
                lambda: hostmod.keep_bootstrapped(self.host, relays_only),
            )
        if self.channel is None:
            return
        self.discovery = Discovery(
            host=self.host,
            pubsub=self.pubsub,
            dht=self.dht,
            identity=self.identity,
            channel=self.channel,
            table=self.table,
            advert_provider=self.callbacks.advert,
            refresh_s=self.advert_refresh_s,
            ttl_s=self.advert_ttl_s,
            # The DHT walk is the fallback for missed gossip: no more often than heartbeats.
            lookup_s=max(DHT_LOOKUP_INTERVAL_S, self.settings.heartbeat_interval_s),
            vouchers=self._vouchers,
            relay_addrs=self.relay_client.addrs if self.relay_client is not None else list,
            mapped_addrs=self.port_mapper.addrs if self.port_mapper is not None else list,
        )
        self.heartbeats = Heartbeats(
            pubsub=self.pubsub,
            identity=self.identity,
            channel=self.channel,
            table=self.table,
            interval_s=self.settings.heartbeat_interval_s,
            figures=self.callbacks.heartbeat,
        )
        nursery.start_soon(supervise.supervised, "discovery", self.discovery.run)
        if self.relay_client is not None:
            client = self.relay_client
            nursery.start_soon(
                supervise.supervised,
                "relay reservations",
                lambda: client.run(self._advertising, self.republish_advert),
            )
        if self.port_mapper is not None:
            mapper = self.port_mapper
            # While an offer is out, public or not: a node public through its router's forward
            # must keep it (dropping it once public would make it private again).
            nursery.start_soon(supervise.supervised, "upnp", lambda: mapper.run(self._offer_out))
        nursery.start_soon(supervise.supervised, "heartbeats", self.heartbeats.run)

    async def _close(self) -> None:
        """Close connections while our tasks still exist; shielded: we may be cancelled."""
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT_S):
            connections = [
                conn for group in self.host.get_network().connections.values() for conn in group
            ]
            if self.chat is not None:
                await self.chat.close()
            await self.host.close()
            # py-libp2p 0.8.1 ``SwarmConn.close`` marks a connection closed before it closes
            # its muxer: one whose close was cancelled on the way (the restart's cancellation
            # reaches the swarm's tasks first) is skipped by ``host.close`` and its socket
            # stays open. The peer then never sees it end and keeps its pubsub stream on it:
            # our heartbeats after a restart never reached our bootstrap peer. Each
            # connection's secured channel is closed here, whatever its swarm wrapper says.
            for conn in connections:
                secured = getattr(getattr(conn, "muxed_conn", None), "secured_conn", None)
                if secured is not None:
                    with contextlib.suppress(Exception):
                        await secured.close()

    def _stop_threads(self) -> None:
        seen = getattr(self.pubsub, "seen_messages", None)
        if seen is not None:
            try:
                seen.stop()
            except Exception:
                log.debug("seen_messages.stop failed", exc_info=True)

    # --- internals ------------------------------------------------------------------------

    def _chat(self) -> ChatService:
        if self.chat is None or not self._started:
            raise PeerUnreachable("the network is not running")
        return self.chat

    def _offer_out(self) -> bool:
        """We have an offer out (an advert not withdrawn): consumers need to reach us."""
        published = self.discovery.published if self.discovery is not None else None
        return published is not None and not published.withdrawn

    def _advertising(self) -> bool:
        """We have an offer out and are not known to be publicly reachable: a reservation on
        a relay is worth holding (an unknown verdict keeps it: the safe side)."""
        if not self._offer_out():
            return False
        return self.reachability is None or self.reachability.verdict != "public"

    def _autonat_servers(self) -> list[Any]:
        """Whom to ask for a dial-back: bootstrap peers and relays first (configured by the
        user), then other peers, over direct connections only."""
        preferred = []
        for addr in [*self.settings.bootstrap, *self.settings.relays]:
            with contextlib.suppress(ValueError):
                preferred.append(hostmod.parse_peer_addr(addr).peer_id)
        network = self.host.get_network()
        ordered = list(dict.fromkeys([*preferred, *self.host.get_connected_peers()]))
        return [
            peer
            for peer in ordered
            if peer != self.host.get_id()
            and any(not hostmod.is_relayed_conn(c) for c in network.connections.get(peer, []))
        ]

    def _vouchers(self) -> list[Any]:
        """Our bootstrap peers we are connected to: configured by the user and dialled at
        their configured address, they may confirm other peers' addresses (confirmed.py)."""
        vouchers = []
        for addr in self.settings.bootstrap:
            try:
                peer = hostmod.parse_peer_addr(addr).peer_id
            except ValueError:
                continue
            if hostmod.is_connected(self.host, peer):
                vouchers.append(peer)
        return vouchers

    def _observed(self, peer_id: str) -> str | None:
        if self.host is None:
            return None
        return hostmod.observed_addr(self.host, hostmod.peer_id_of(peer_id))

    def _peer_changed(self, peer_id: str, info: PeerInfo | None) -> None:
        if info is None and self.discovery is not None:
            self.discovery.forget(peer_id)
        try:
            self.callbacks.on_peer_changed(peer_id, info)
        except Exception:
            log.exception("on_peer_changed failed")

    async def _on_bootstrap(self, peer_id: Any) -> None:
        if self.discovery is not None:
            # Peer exchange first (one round trip), the DHT after (slow, but complete).
            await self.discovery.exchange(peer_id)
        await self._add_to_routing(peer_id)
        if self.discovery is not None:
            self.discovery.lookup_soon()

    async def _add_to_routing(self, peer_id: Any) -> bool:
        # add_peer() is False until identify finished (notes): retry briefly.
        for _ in range(20):
            try:
                if await self.dht.add_peer(peer_id):
                    return True
            except Exception:
                pass
            await trio.sleep(0.05)
        return False

    async def _routing_upkeep(self) -> None:
        """Every connected peer goes into the DHT routing table; ping channel peers.

        Latency is measured every heartbeat interval (at least 5 s): pinging 10 peers every
        5 s was a large part of an idle node's CPU at the default 60 s interval.
        """
        ping_every = max(PING_INTERVAL_S, self.settings.heartbeat_interval_s)
        next_ping = trio.current_time() + PING_INTERVAL_S
        # A peer without the DHT (a light client, another implementation) is refused every
        # time: back off per peer instead of retrying it every half second forever.
        retry: dict[Any, tuple[float, float]] = {}  # peer -> (next attempt, backoff)
        while True:
            await trio.sleep(0.5)
            now = trio.current_time()
            connected = self.host.get_connected_peers()
            for peer in connected:
                # A connection proves the key (Noise): its peer is verified (peers.py).
                listed = self.table.get(str(peer))
                if listed is not None:
                    # Direct or through a relay, as it is now (a hole punch makes it direct).
                    relayed = hostmod.has_relayed(self.host, peer) and not hostmod.has_direct(
                        self.host, peer
                    )
                    self.table.on_path(str(peer), relayed)
                if listed is not None or self.discovery is not None:
                    observed = hostmod.observed_addr(self.host, peer)
                    if self.discovery is not None:
                        # Where it was seen: the addresses of it we may dial (confirmed.py).
                        self.discovery.confirmed.observe(str(peer), observed)
                    if listed is not None and not listed.verified:
                        self.table.mark_verified(str(peer), observed)
                if self.dht.routing_table.peer_in_table(peer):
                    retry.pop(peer, None)
                    continue
                at, backoff = retry.get(peer, (0.0, 0.5))
                if now < at:
                    continue
                added = False
                with contextlib.suppress(Exception):
                    added = bool(await self.dht.add_peer(peer))
                if not added:
                    retry[peer] = (now + backoff, min(backoff * 2, ROUTING_RETRY_MAX_S))
            for peer in set(retry) - set(connected):
                del retry[peer]
            if trio.current_time() >= next_ping:
                next_ping = trio.current_time() + ping_every
                linked = {str(p) for p in self.host.get_connected_peers()}
                for info in self.table.snapshot():
                    # Only peers we reached before: pinging one known from adverts alone
                    # dials an address its advert names (issue 21: a port-scan primitive);
                    # the budgeted advert dial (discovery.py) is its only way in.
                    if not info.verified and info.peer_id not in linked:
                        continue
                    with trio.move_on_after(PING_TIMEOUT_S), contextlib.suppress(PeerUnreachable):
                        await self.ping(info.peer_id)
