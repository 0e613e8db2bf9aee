"""Finding providers on our channel: signed adverts gossiped on the channel topic and kept in
the Kademlia DHT.

Gossip is the fast path (milliseconds); the DHT is the memory of the network, read at start
and periodically, because a newcomer has missed earlier gossip. DHT writes run in their own
task with a deadline: the notes measured ``put_value`` blocking ~20 s per vanished peer.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import base58
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.peerinfo import PeerInfo as Libp2pPeerInfo

from engine.domain import wire
from engine.domain.ratelimit import PeerRateLimiter
from engine.identity import Identity
from engine.network import adverts, supervise
from engine.network.addrs import is_usable
from engine.network.confirmed import MAX_ASKED, ConfirmedAddrs, ConfirmService
from engine.network.dialbudget import DialBudget
from engine.network.host import connect, is_connected, observed_addr, peer_id_of
from engine.network.one_request import serve_one_request
from engine.network.peers import PeerTable

log = logging.getLogger("nunet.network.discovery")

DHT_PUT_TIMEOUT_S = 5.0
DHT_LOOKUP_INTERVAL_S = 10.0
# Adverts change rarely: a handful per peer and second is already a flood.
ADVERT_RATE_PER_S = 2.0
ADVERT_BURST = 10.0
MAX_CHANNEL_CONNECTIONS = 64
EXCHANGE_PROTOCOL = TProtocol("/nunet/adverts/1.0.0")
EXCHANGE_MAX_ADVERTS = 256
EXCHANGE_TIMEOUT_S = 5.0
MAX_TAUGHT_ADDRS = 2
# Peers waiting for a bootstrap to confirm an address of theirs, and how often we ask.
MAX_UNCONFIRMED = 256
CONFIRM_INTERVAL_S = 1.0
CONFIRM_TRIES = 3


def topic_name(channel: str, kind: str) -> str:
    return f"/nunet/{wire.channel_digest(channel)}/{kind}"


def envelope_validator(
    kind: wire.Kind,
    schema: Any,
    channel: str,
    limiter: PeerRateLimiter,
    accept: Callable[[Any], bool] | None = None,
) -> Callable[[Any, Any], bool]:
    """A gossipsub topic validator: signed by the origin, on our channel, not flooding.

    Rejected messages are not forwarded, so a flooding or forging peer only hurts itself.
    ``accept`` is a further check on the opened message (adverts: a usable address).
    """

    def validate(forwarder: Any, msg: Any) -> bool:
        origin = base58.b58encode(msg.from_id).decode()
        if not limiter.allow(origin):
            log.debug("%s: %s over its rate limit; dropped", kind, origin)
            return False
        try:
            message = wire.open_envelope(msg.data, kind, schema)
        except wire.WireError as exc:
            log.warning("%s from %s rejected: %s", kind, origin, exc)
            return False
        if not (message.peer_id == origin and message.channel == channel):
            return False
        return accept is None or accept(message)

    def never_raises(forwarder: Any, msg: Any) -> bool:
        # py-libp2p 0.8.1's validate_msg does not catch a sync validator's exception: it
        # would end the push_msg task (contained by GuardedPubsub, but counted as a failure).
        try:
            return validate(forwarder, msg)
        except Exception as exc:
            supervise.FAILURES.record(f"{kind} validator", exc)
            return False

    return never_raises


def add_peer_addrs(host: Any, peer_id: str, addrs: list[Any]) -> None:
    """Teach the peerstore a peer's confirmed addresses (confirmed.py), so chat, ping and
    jobs can dial it: never what an advert alone names (a dial tries each address the
    peerstore holds, and each is one more connection to wherever the advert's author points).
    """
    good = addrs[:MAX_TAUGHT_ADDRS]
    if good:
        host.get_peerstore().add_addrs(peer_id_of(peer_id), good, 3600)


class Discovery:
    def __init__(
        self,
        *,
        host: Any,
        pubsub: Any,
        dht: Any,
        identity: Identity,
        channel: str,
        table: PeerTable,
        advert_provider: Callable[[], wire.Advert | None],
        refresh_s: float,
        ttl_s: float,
        lookup_s: float = DHT_LOOKUP_INTERVAL_S,
        vouchers: Callable[[], list[Any]] = list,
        relay_addrs: Callable[[], list[str]] = list,
        mapped_addrs: Callable[[], list[str]] = list,
    ) -> None:
        self.host = host
        self.pubsub = pubsub
        self.dht = dht
        self.identity = identity
        self.channel = channel
        self.table = table
        self.advert_provider = advert_provider
        self.refresh_s = refresh_s
        self.ttl_s = ttl_s
        self.lookup_s = lookup_s
        self.topic = topic_name(channel, "adverts")
        self._seq = 0
        self._published: wire.Advert | None = None  # what peers currently believe of us
        self._wake = trio.Event()
        self._dht_pending: bytes | None = None
        self._dht_wake = trio.Event()
        self._lookup_now = trio.Event()
        self._limiter = PeerRateLimiter(ADVERT_RATE_PER_S, ADVERT_BURST)
        self.rejected = 0
        # (peer, path) whose unusable advert was logged: once each, however often it comes.
        self._unusable_logged: set[tuple[str, str]] = set()
        # The signed bytes of every advert we listed (and ours): handed out on exchange, so a
        # newcomer verifies each signature itself and need not trust whoever relays them.
        self._sealed: dict[str, bytes] = {}
        self._exchange_limiter = PeerRateLimiter(1.0, 5.0)
        self._nursery: trio.Nursery | None = None
        self._connecting: set[str] = set()
        self._pulling: set[Any] = set()
        # Dials that adverts trigger are budgeted (dialbudget.py), and go only to addresses a
        # connection confirmed (confirmed.py): adverts name addresses of their sender's choosing.
        self.dial_budget = DialBudget()
        self.confirmed = ConfirmedAddrs()
        self.confirm = ConfirmService(host, self.confirmed, self._claimed, self._observed)
        # The bootstrap peers we are connected to: who we ask to confirm an address.
        self.vouchers = vouchers
        # Our circuit addresses through relays we hold a reservation on (relay.py), and the
        # router's address and port it forwards to us (port_mapping.py): direct ones first.
        self.relay_addrs = relay_addrs
        self.mapped_addrs = mapped_addrs
        self._unconfirmed: dict[str, int] = {}  # peer id -> questions left
        self._confirm_wake = trio.Event()
        self.lookup_count = 0  # DHT lookups begun, for tests
        host.set_stream_handler(EXCHANGE_PROTOCOL, self._serve_exchange)

    @property
    def published(self) -> wire.Advert | None:
        return self._published

    def republish(self) -> None:
        self._wake.set()

    def lookup_soon(self) -> None:
        self._lookup_now.set()

    async def run(self) -> None:
        self.pubsub.set_topic_validator(
            self.topic,
            envelope_validator(
                "advert", wire.Advert, self.channel, self._limiter, self._usable_gossip
            ),
            False,
        )
        subscription = await self.pubsub.subscribe(self.topic)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            loops: dict[str, Callable[[], Any]] = {
                "advert receiver": lambda: self._receive(subscription),
                "advert publisher": self._publish_loop,
                "advert DHT writer": self._dht_put_loop,
                "advert lookup": self._lookup_loop,
                "subscriber watch": self._watch_subscribers,
                "address confirmation": self._confirm_loop,
            }
            for name, loop in loops.items():
                nursery.start_soon(supervise.supervised, name, loop)

    # --- our advert ----------------------------------------------------------------------

    def _next_seq(self) -> int:
        # Milliseconds since the epoch: monotonic across restarts without persisting it.
        self._seq = max(self._seq + 1, int(time.time() * 1000))
        return self._seq

    def _current(self) -> wire.Advert | None:
        try:
            wanted = self.advert_provider()
        except Exception:
            log.exception("the advert provider failed; advertising nothing this round")
            return None
        me = self.identity.peer_id
        if wanted is None:
            if self._published is None or self._published.withdrawn:
                return None
            return adverts.tombstone(peer_id=me, channel=self.channel, seq=self._next_seq())
        addrs = (
            tuple(str(a) for a in self.host.get_addrs())
            + tuple(self.mapped_addrs())
            + tuple(self.relay_addrs())
        )
        return adverts.stamp(
            wanted,
            peer_id=me,
            channel=self.channel,
            seq=self._next_seq(),
            addrs=addrs,
            ttl_s=self.ttl_s,
        )

    async def _publish_loop(self) -> None:
        while True:
            advert = self._current()
            if advert is not None:
                sealed = wire.seal(self.identity, "advert", advert)
                try:
                    await self.pubsub.publish(self.topic, sealed)
                except Exception as exc:
                    log.info("advert gossip failed: %s", exc)
                self._published = advert
                self._sealed[self.identity.peer_id] = sealed
                self._dht_pending = sealed
                self._dht_wake.set()
            with trio.move_on_after(self.refresh_s):
                await self._wake.wait()
            self._wake = trio.Event()

    async def _dht_put_loop(self) -> None:
        key = adverts.advert_key(self.channel, self.identity.peer_id)
        while True:
            await self._dht_wake.wait()
            self._dht_wake = trio.Event()
            sealed, self._dht_pending = self._dht_pending, None
            if sealed is None:
                continue
            with trio.move_on_after(DHT_PUT_TIMEOUT_S):
                try:
                    await self.dht.put_value(key, sealed)
                    if not self._published or not self._published.withdrawn:
                        await self.dht.provide(adverts.provider_key(self.channel))
                except Exception as exc:
                    log.info("advert DHT put failed: %s", exc)

    async def _watch_subscribers(self) -> None:
        """A peer newly subscribed to our channel whose advert we lack: fetch what it holds
        straight from it (peer exchange, one stream). It does the same with us, so it gets
        our advert without our gossiping it again.

        Re-gossiping our advert on every new subscriber (as this once did) made each join or
        reconnect cost N republishes x N receivers x D duplicate copies, which kept every
        idle node of a 10-peer channel busy (bench/network_idle.py). We gossip again only
        when we get our first subscribers: what we published before reached nobody.
        """
        known: set[Any] = set()
        while True:
            await trio.sleep(0.25)
            current = set(self.pubsub.peer_topics.get(self.topic, ()))
            if current and not known and self._published is not None:
                self.republish()
            for peer in current - known:
                info = self.table.get(str(peer))
                if (info is None or info.advert is None) and peer not in self._pulling:
                    self._pulling.add(peer)
                    assert self._nursery is not None
                    self._nursery.start_soon(supervise.guarded("advert pull", self._pull), peer)
            known = current

    async def _pull(self, peer: Any) -> None:
        try:
            await self.exchange(peer)
        finally:
            self._pulling.discard(peer)

    # --- others' adverts -----------------------------------------------------------------

    async def _receive(self, subscription: Any) -> None:
        while True:
            msg = await subscription.get()
            try:
                advert = adverts.verify_advert(msg.data)
            except wire.WireError:
                self.rejected += 1
                continue
            await self._accept(advert, msg.data, "gossip")

    def _usable(self, advert: wire.Advert, via: str) -> bool:
        """Nothing to dial: listing it would only make every lookup and dial fail on it."""
        if is_usable(advert):
            return True
        self.rejected += 1
        key = (advert.peer_id, via)
        if key not in self._unusable_logged and len(self._unusable_logged) < 1024:
            self._unusable_logged.add(key)
            log.info("advert of %s (%s) ignored: no dialable address", advert.peer_id, via)
        return False

    def _usable_gossip(self, advert: wire.Advert) -> bool:
        # Checked in the topic validator, so such an advert is not forwarded either.
        return self._usable(advert, "gossip")

    async def _accept(
        self, advert: wire.Advert, sealed: bytes, via: str = "exchange", dial: bool = True
    ) -> bool:
        """List ``advert``; True when it was listed (and so is worth a direct dial)."""
        if advert.peer_id == self.identity.peer_id or advert.channel != self.channel:
            return False
        if not self._usable(advert, via):
            return False
        if self.table.on_advert(advert):
            self._sealed[advert.peer_id] = sealed
            add_peer_addrs(
                self.host, advert.peer_id, self.confirmed.confirmed(advert.peer_id, advert.addrs)
            )
            if dial:
                self._dial_soon(advert.peer_id)
            return True
        if advert.peer_id not in self.table:
            self._sealed.pop(advert.peer_id, None)
        return False

    def forget(self, peer_id: str) -> None:
        """``peer_id`` left the table (silent, evicted): drop what we kept of it, its signed
        advert and, unless connected, the addresses its advert taught the peerstore; a flood
        of fresh identities would grow them without end otherwise."""
        self._sealed.pop(peer_id, None)
        with contextlib.suppress(Exception):
            pid = peer_id_of(peer_id)
            if not is_connected(self.host, pid):
                self.host.get_peerstore().clear_addrs(pid)

    def _dial_soon(self, peer_id: str) -> None:
        if self._nursery is not None and peer_id not in self._connecting:
            # In the background: one slow dial must not hold up the next advert.
            self._connecting.add(peer_id)
            self._nursery.start_soon(supervise.guarded("advert dial", self._connect), peer_id)

    # --- peer exchange: a newcomer asks its first peer for the channel's adverts ----------

    async def exchange(self, peer: Any) -> int:
        """Fetch and verify the adverts ``peer`` holds on our channel; returns how many."""
        stream = None
        received = 0
        # Dialled after the whole batch is listed: ten noise handshakes started between the
        # frames took the CPU the listing needed (a newcomer listed 10 peers in 0.6 s, not 0.1).
        listed: list[str] = []
        try:
            with trio.fail_after(EXCHANGE_TIMEOUT_S):
                stream = await self.host.new_stream(peer, [EXCHANGE_PROTOCOL])
                query = wire.AdvertQuery(channel_digest=wire.channel_digest(self.channel))
                await wire.write_frame(stream, wire.encode_query(query), wire.MAX_QUERY_BYTES)
                limit = wire.MAX_ADVERT_BYTES + 512
                while received < EXCHANGE_MAX_ADVERTS:
                    data = await wire.read_frame(stream, limit)
                    if data is None:
                        break
                    received += 1
                    try:
                        advert = adverts.verify_advert(data)
                    except wire.WireError:
                        self.rejected += 1
                        continue
                    if await self._accept(advert, data, "exchange", dial=False):
                        listed.append(advert.peer_id)
        except (Exception, trio.TooSlowError) as exc:
            log.info("advert exchange with %s failed: %r", peer, exc)
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.close()
            for peer_id in listed:
                self._dial_soon(peer_id)
        return received

    async def _serve_exchange(self, stream: Any) -> None:
        """Answer one query with the signed adverts we hold (one_request.py ends the stream
        on both sides within EXCHANGE_TIMEOUT_S)."""
        if not self._exchange_limiter.allow(str(stream.muxed_conn.peer_id)):
            with contextlib.suppress(Exception):
                await stream.reset()
            return

        async def adverts_for(data: bytes) -> bytes:
            query = wire.decode_query(data)
            if query.channel_digest != wire.channel_digest(self.channel):
                return b""
            # One write for all: a frame per write waited on the peer's delayed ACK.
            return b"".join(
                wire.frame(sealed)
                for peer_id, sealed in list(self._sealed.items())[:EXCHANGE_MAX_ADVERTS]
                if peer_id == self.identity.peer_id or peer_id in self.table
            )

        await serve_one_request(
            stream, wire.MAX_QUERY_BYTES, adverts_for, EXCHANGE_TIMEOUT_S, "advert exchange"
        )

    def _claimed(self, peer_id: str) -> tuple[str, ...] | None:
        info = self.table.get(peer_id)
        return info.addrs if info is not None else None

    def _observed(self, peer_id: str) -> str | None:
        with contextlib.suppress(Exception):
            return observed_addr(self.host, peer_id_of(peer_id))
        return None

    async def _connect(self, peer_id: str) -> None:
        """Channel members connect directly: gossip, ping and chat then skip the bootstrap.

        Only to addresses a connection confirmed (confirmed.py: the peer was seen at that IP,
        by us or by one of our bootstrap peers, whom we ask), the first ``MAX_TAUGHT_ADDRS``
        of them, and within the dial budget (each address tried is charged). A connection
        proves the key (Noise): the peer is verified.
        """
        pid = peer_id_of(peer_id)
        try:
            if is_connected(self.host, pid):
                observed = observed_addr(self.host, pid)
                self.confirmed.observe(peer_id, observed)
                self.table.mark_verified(peer_id, observed)
                return
            if len(self.host.get_connected_peers()) > MAX_CHANNEL_CONNECTIONS:
                return
            info = self.table.get(peer_id)
            if info is None:
                return
            addrs = self.confirmed.confirmed(peer_id, info.addrs)[:MAX_TAUGHT_ADDRS]
            if not addrs:
                self._want_confirmation(peer_id)
                return
            if not self.dial_budget.allow([str(a) for a in addrs]):
                return
            add_peer_addrs(self.host, peer_id, addrs)
            try:
                await connect(self.host, Libp2pPeerInfo(pid, addrs))
            except (Exception, trio.TooSlowError) as exc:
                log.info("could not connect to %s: %s", peer_id, exc)
                return
            observed = observed_addr(self.host, pid)
            self.confirmed.observe(peer_id, observed)
            self.table.mark_verified(peer_id, observed)
        finally:
            self._connecting.discard(peer_id)

    async def reach(self, peer_id: str) -> None:
        """Before a stream is opened to ``peer_id`` (a chat, a job): unless connected, teach
        the peerstore its confirmed addresses, asking our bootstrap peers at once when we
        have none (a peer listed a moment ago, whose confirmation is on its way)."""
        with contextlib.suppress(ValueError):
            if is_connected(self.host, peer_id_of(peer_id)):
                return
        info = self.table.get(peer_id)
        if info is None:
            return
        addrs = self.confirmed.confirmed(peer_id, info.addrs)
        if not addrs:
            for voucher in self.vouchers():
                if await self.confirm.ask(voucher, [peer_id]):
                    break
            addrs = self.confirmed.confirmed(peer_id, info.addrs)
        if not addrs:
            return
        # Only its confirmed addresses, and a fresh chance: the DHT's walks teach the
        # peerstore whatever other peers say of it (one listening on 0.0.0.0 is listed at
        # 0.0.0.0, which dials ourselves), and a dial that failed on those left the peer in
        # the swarm's negative cache for a minute, refusing every dial of ours to it
        # (measured in the NAT lab: a provider behind a UPnP router unreachable for 60 s).
        pid = peer_id_of(peer_id)
        self.host.get_peerstore().clear_addrs(pid)
        add_peer_addrs(self.host, peer_id, addrs)
        unblock = getattr(self.host.get_network(), "unblock_peer", None)
        if unblock is not None:
            unblock(pid)

    def _want_confirmation(self, peer_id: str) -> None:
        if peer_id not in self._unconfirmed and len(self._unconfirmed) < MAX_UNCONFIRMED:
            self._unconfirmed[peer_id] = CONFIRM_TRIES
            self._confirm_wake.set()

    async def _confirm_loop(self) -> None:
        """Ask our bootstrap peers which addresses of the peers we could not dial they saw
        them at; dial the ones they confirm. At most one question per CONFIRM_INTERVAL_S."""
        while True:
            await self._confirm_wake.wait()
            self._confirm_wake = trio.Event()
            await trio.sleep(0.05)  # adverts come in batches: one question for all of them
            asked = [p for p in list(self._unconfirmed)[:MAX_ASKED] if p in self.table]
            for peer_id in list(self._unconfirmed):
                if peer_id not in self.table:
                    del self._unconfirmed[peer_id]
            vouchers = self.vouchers()
            if asked and vouchers:
                for voucher in vouchers:
                    await self.confirm.ask(voucher, asked)
                for peer_id in asked:
                    info = self.table.get(peer_id)
                    if info is not None and self.confirmed.confirmed(peer_id, info.addrs):
                        self._unconfirmed.pop(peer_id, None)
                        self._dial_soon(peer_id)
            for peer_id in asked:
                left = self._unconfirmed.get(peer_id)
                if left is not None:
                    if left <= 1 or not vouchers:
                        del self._unconfirmed[peer_id]
                    else:
                        self._unconfirmed[peer_id] = left - 1
            if self._unconfirmed:
                self._confirm_wake.set()
            await trio.sleep(CONFIRM_INTERVAL_S)

    async def _lookup_loop(self) -> None:
        while True:
            with trio.move_on_after(self.lookup_s):
                await self._lookup_now.wait()
            self._lookup_now = trio.Event()
            with trio.move_on_after(DHT_LOOKUP_INTERVAL_S):
                await self.lookup()

    async def lookup(self) -> int:
        """Read the channel's adverts from the DHT; returns how many were new."""
        self.lookup_count += 1
        try:
            providers = await self.dht.find_providers(adverts.provider_key(self.channel))
        except Exception as exc:
            log.info("provider lookup failed: %s", exc)
            return 0
        # Provider records name addresses of their writer's choosing: not taught to the
        # peerstore (they were, and every lookup dialled them); the adverts' confirmed ones are.
        ids = {str(p.peer_id) for p in providers} - {self.identity.peer_id}
        found = 0

        async def fetch(peer_id: str) -> None:
            nonlocal found
            try:
                value = await self.dht.get_value(adverts.advert_key(self.channel, peer_id))
            except Exception:
                return
            if value is None:
                return
            try:
                advert = adverts.verify_advert(value)
            except wire.WireError:
                self.rejected += 1
                return
            if advert.peer_id == peer_id and peer_id not in self.table:
                found += 1
            await self._accept(advert, value, "dht")

        async with trio.open_nursery() as nursery:
            for peer_id in sorted(ids):
                nursery.start_soon(fetch, peer_id)
        return found
