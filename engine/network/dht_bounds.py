"""The Kademlia DHT's stores, bounded: what other peers can make us keep (issue 21).

py-libp2p 0.8.1 keeps up to 50,000 value records for 24-48 h and provider records for as many
keys as anyone names, with no quota per sender: one identity PUTting valid adverts of
throw-away keys grew a node's RSS by 55 MB in 150 s, never released. Here:

- Each store (values, provider records) has a bound in records and bytes and a quota per
  sender peer, address and subnet (``record_book.RecordBook``, ``StoreBounds``); records we
  wrote ourselves and records written by peers in good standing are kept, and may use a
  reserve strangers cannot. A full store drops an expired record first, then the oldest
  record of the stranger subnet holding the most (never the newcomer's own).
- PUT_VALUE and ADD_PROVIDER requests are paced per sender peer, address and subnet, and a
  request over its sender's rate or quota is refused as it is read, before py-libp2p parses,
  validates or stores it: a refused request costs no memory (``KAD_REQUEST_GATE``).
- A provider record keeps at most ``MAX_PROVIDER_ADDRS`` addresses; a key's provider list
  (20, py-libp2p's bound) that is full lets a newcomer displace the record of a stranger
  subnet holding more of it, so fresh identities cannot fill our channel's key for good.

Hooks (py-libp2p 0.8.1): ``KadDHT.value_store`` and ``provider_store`` are replaced by our
subclasses, whose tables (``store``, ``providers``) are dicts that keep the book whatever
removes an entry; the handler (``KadDHT._do_handle_stream``) stores through
``value_store.put_record`` and ``provider_store.add_provider``, which we override, and reads
each request with the module's ``read_varint_prefixed_bytes_limited`` (libp2p_guards wraps
it and calls the gate our ``handle_stream`` sets). tests/unit/test_dht_bounds.py fails if an
upgrade stores past these.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Any

from libp2p.io.exceptions import IncompleteReadError
from libp2p.kad_dht.common import BUCKET_SIZE, DEFAULT_TTL
from libp2p.kad_dht.kad_dht import KadDHT
from libp2p.kad_dht.pb.kademlia_pb2 import Message
from libp2p.kad_dht.provider_store import (
    PROVIDER_RECORD_EXPIRATION_INTERVAL,
    ProviderRecord,
    ProviderStore,
)
from libp2p.kad_dht.value_store import ValueStore
from libp2p.peer.peerinfo import PeerInfo

from engine.domain.ratelimit import ScopedRateLimiter, ThrottledWarning, remote_host
from engine.network import supervise
from engine.network.addrs import MAX_ADDRS
from engine.network.libp2p_guards import KAD_REQUEST_GATE
from engine.network.record_book import FETCHED, OURS, Owner, RecordBook, StoreBounds

log = logging.getLogger("nunet.network.dht")

MAX_PROVIDER_ADDRS = MAX_ADDRS
# What a stored record costs besides its bytes: Python objects, the dict entry, the book.
RECORD_OVERHEAD = 512
# PUT_VALUE and ADD_PROVIDER requests: (per second, burst). An honest node writes its advert
# and provider record to each DHT peer once per refresh (minutes); entry correction adds a few.
PUTS_PER_PEER = (2.0, 20.0)
PUTS_PER_ADDRESS = (10.0, 60.0)
PUTS_PER_SUBNET = (20.0, 120.0)
# How long a sender's standing (a DB read) is trusted before it is asked again.
STANDING_TTL_S = 10.0
MAX_STANDING_CACHE = 1024

_WRITES = (Message.MessageType.PUT_VALUE, Message.MessageType.ADD_PROVIDER)


class Refused(IncompleteReadError):
    """A request turned away at the gate: the handler sees a clean end of stream (it logs
    nothing), and our ``handle_stream`` resets the stream."""

    def __init__(self) -> None:
        super().__init__("refused", expected_bytes=1, received_bytes=0)


class _Sender:
    """The peer of one inbound DHT stream, as the stores charge it."""

    def __init__(self, dht: BoundedKadDHT, stream: Any) -> None:
        self.dht = dht
        self.stream = stream
        self.peer = str(stream.muxed_conn.peer_id)
        self.host = remote_host(stream)
        self.refused = False

    def owner(self) -> Owner:
        return Owner.sender(self.peer, self.host, self.dht.standing(self.peer))

    def gate(self, reader: Any, data: bytes) -> None:
        if reader is not self.stream:
            return
        message = Message()
        try:
            message.ParseFromString(data)
        except Exception:
            return  # py-libp2p refuses it itself
        if message.type not in _WRITES:
            return
        if not self.dht.admit_request(self, message):
            self.refused = True
            raise Refused()


# The sender of the request the current task's handler is serving (None: our own task).
_SENDER_VAR: ContextVar[_Sender | None] = ContextVar("dht_sender", default=None)


def _current_owner(default: Owner) -> Owner:
    sender = _SENDER_VAR.get()
    return sender.owner() if sender is not None else default


class _BookedValues(dict[bytes, tuple[Any, float]]):
    """``ValueStore.store``: every entry removed, however, leaves the book too."""

    def __init__(self, book: RecordBook) -> None:
        super().__init__()
        self.book = book

    def __delitem__(self, key: bytes) -> None:
        super().__delitem__(key)
        self.book.release(key)

    def pop(self, key: bytes, *default: Any) -> Any:
        self.book.release(key)
        return super().pop(key, *default)

    def clear(self) -> None:
        for key in list(self):
            self.book.release(key)
        super().clear()


class BoundedValueStore(ValueStore):
    def __init__(self, host: Any, local_peer_id: Any, bounds: StoreBounds) -> None:
        super().__init__(host=host, local_peer_id=local_peer_id)
        self.book = RecordBook(bounds)
        self.store = _BookedValues(self.book)
        self._refusals = ThrottledWarning(
            log, "DHT value store: %d records refused (%s's quota or the store's bound)"
        )

    def put(self, key: bytes, value: bytes, validity: float = 0.0) -> None:
        """Our own record: kept whatever the bounds."""
        super().put(key, value, validity)
        record, expires = self.store[key]
        self.book.charge(key, OURS, _value_size(key, record), expires)

    def put_record(self, key: bytes, record: Any) -> None:
        """A record from the network: a PUT_VALUE (charged to its sender) or one our own
        lookup fetched. Not stored, silently, when its owner has no room left."""
        owner = _current_owner(FETCHED)
        if self.book.owner_of(key) == OURS:
            owner = OURS  # a newer copy of our own record (entry correction) stays ours
        size = _value_size(key, record)
        if not self.book.make_room(owner, size, self._evict, replacing=key):
            self._refusals.note(owner.peer)
            return
        expires = time.time() + DEFAULT_TTL
        dict.__setitem__(self.store, key, (record, expires))
        self.book.charge(key, owner, size, expires)
        self._save()

    def would_admit(self, owner: Owner, key: bytes) -> bool:
        return not self.book.over_quota(owner, replacing=key)

    def _evict(self, key: Hashable) -> None:
        if isinstance(key, bytes):
            self.store.pop(key, None)


def _value_size(key: bytes, record: Any) -> int:
    return len(key) + int(record.ByteSize()) + RECORD_OVERHEAD


class _Holders(dict[str, ProviderRecord]):
    """One key's provider records: every one removed leaves the book too."""

    def __init__(self, book: RecordBook, key: bytes) -> None:
        super().__init__()
        self.book = book
        self.key = key

    def __delitem__(self, peer: str) -> None:
        super().__delitem__(peer)
        self.book.release((self.key, peer))

    def pop(self, peer: str, *default: Any) -> Any:
        self.book.release((self.key, peer))
        return super().pop(peer, *default)


class _BookedProviders(dict[bytes, dict[str, ProviderRecord]]):
    """``ProviderStore.providers``: a key removed releases what it still held."""

    def __init__(self, book: RecordBook) -> None:
        super().__init__()
        self.book = book

    def __delitem__(self, key: bytes) -> None:
        for peer in list(self.get(key, ())):
            self.book.release((key, peer))
        super().__delitem__(key)


class BoundedProviderStore(ProviderStore):
    def __init__(self, host: Any, peer_routing: Any, bounds: StoreBounds) -> None:
        super().__init__(host=host, peer_routing=peer_routing)
        self.book = RecordBook(bounds)
        self.providers = _BookedProviders(self.book)
        self._refusals = ThrottledWarning(
            log, "DHT provider records: %d refused (%s's quota or the store's bound)"
        )

    def add_provider(self, key: bytes, provider: PeerInfo) -> None:
        if not provider or not provider.peer_id:
            return
        peer = str(provider.peer_id)
        owner = OURS if provider.peer_id == self.local_peer_id else _current_owner(FETCHED)
        addrs = list(provider.addrs)[:MAX_PROVIDER_ADDRS]
        entry = (key, peer)
        holders = self.providers.get(key)
        if holders is not None and peer not in holders and len(holders) >= BUCKET_SIZE:
            # py-libp2p's bound per key: a newcomer displaces a stranger subnet holding more.
            victim = self.book.heaviest_of([(key, p) for p in holders], owner)
            if victim is None:
                self.book.refused += 1
                self._refusals.note(owner.peer)
                return
            self._evict(victim)
        size = len(key) + len(peer) + sum(len(a.to_bytes()) for a in addrs) + RECORD_OVERHEAD
        if not self.book.make_room(owner, size, self._evict, replacing=entry):
            self._refusals.note(owner.peer)
            return
        holders = self.providers.get(key)
        if holders is None:
            holders = _Holders(self.book, key)
            dict.__setitem__(self.providers, key, holders)
        now = time.time()
        dict.__setitem__(holders, peer, ProviderRecord(PeerInfo(provider.peer_id, addrs), now))
        self.book.charge(entry, owner, size, now + PROVIDER_RECORD_EXPIRATION_INTERVAL)

    def would_admit(self, owner: Owner, key: bytes) -> bool:
        return not self.book.over_quota(owner, replacing=(key, owner.peer))

    def _evict(self, entry: Hashable) -> None:
        if not (isinstance(entry, tuple) and len(entry) == 2):
            return
        key, peer = entry
        holders = self.providers.get(key)
        if holders is None:
            return
        holders.pop(peer, None)
        if not holders:
            del self.providers[key]


class BoundedKadDHT(KadDHT):
    """py-libp2p's KadDHT with bounded stores and paced writes (see the module docstring).
    ``standing(peer_id)``: whether we deal with the peer (the node's ``in_good_standing``)."""

    value_store: BoundedValueStore
    provider_store: BoundedProviderStore

    def __init__(
        self,
        host: Any,
        mode: Any,
        *,
        bounds: StoreBounds,
        standing: Callable[[str], bool] = lambda peer_id: False,
        **kwargs: Any,
    ) -> None:
        super().__init__(host, mode, **kwargs)
        self.value_store = BoundedValueStore(host, self.local_peer_id, bounds)
        self.provider_store = BoundedProviderStore(host, self.peer_routing, bounds)
        self._standing = standing
        self._standing_cache: dict[str, tuple[float, bool]] = {}
        self.puts = ScopedRateLimiter(PUTS_PER_PEER, PUTS_PER_ADDRESS, PUTS_PER_SUBNET)
        self.refused_requests = 0
        self._refusals = ThrottledWarning(
            log, "DHT writes: %d refused (over the sender's rate or quota; last from %s)"
        )

    def standing(self, peer_id: str) -> bool:
        now = time.monotonic()
        cached = self._standing_cache.get(peer_id)
        if cached is not None and now - cached[0] < STANDING_TTL_S:
            return cached[1]
        try:
            good = bool(self._standing(peer_id))
        except Exception:
            good = False
        if len(self._standing_cache) >= MAX_STANDING_CACHE:
            self._standing_cache.clear()
        self._standing_cache[peer_id] = (now, good)
        return good

    def admit_request(self, sender: _Sender, message: Any) -> bool:
        """A PUT_VALUE or ADD_PROVIDER request, before anything parses or stores it: within
        its sender's rate, and within the quota of the store it would write to."""
        owner = sender.owner()
        ok = self.puts.allow(sender.peer, sender.host, owner.protected)
        if ok and message.type == Message.MessageType.PUT_VALUE:
            ok = self.value_store.would_admit(owner, bytes(message.record.key or message.key))
        elif ok:
            ok = self.provider_store.would_admit(owner, bytes(message.key))
        if not ok:
            self.refused_requests += 1
            self._refusals.note(sender.peer)
        return ok

    async def handle_stream(self, stream: Any) -> None:
        sender = _Sender(self, stream)
        token = _SENDER_VAR.set(sender)
        gate = KAD_REQUEST_GATE.set(sender.gate)
        try:
            await super().handle_stream(stream)
        finally:
            KAD_REQUEST_GATE.reset(gate)
            _SENDER_VAR.reset(token)
            if sender.refused:
                await supervise.reset_quietly(stream)
