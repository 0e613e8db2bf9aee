"""The peer table: who is on our channel, what they offer, and when we last heard of them.

Plain data, no libp2p: the service feeds it adverts, heartbeats, pings and connection events,
and it tells the node what changed. A peer that misses ``MISSED_HEARTBEATS`` heartbeats (or
whose advert expired, when it never sent one) is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from engine.network.wire import Advert, Heartbeat

MISSED_HEARTBEATS = 3


class PeerInfo(msgspec.Struct, frozen=True, kw_only=True):
    peer_id: str
    addrs: tuple[str, ...] = ()
    relayed: bool = False
    latency_ms: float | None = None
    channel: str = ""
    advert: Advert | None = None
    heartbeat: Heartbeat | None = None
    last_seen: float = 0.0

    @property
    def direct(self) -> bool:
        return not self.relayed


PeerChange = Callable[[str, PeerInfo | None], None]  # (peer id, new info or None when gone)


class PeerTable:
    def __init__(
        self,
        channel: str | None,
        heartbeat_interval_s: float,
        on_change: PeerChange | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.channel = channel
        self.heartbeat_interval_s = heartbeat_interval_s
        self._on_change = on_change
        self._clock = clock
        self._peers: dict[str, PeerInfo] = {}
        # Advert seq of peers dropped for silence: the DHT still holds their last advert and
        # must not bring them back; a newer advert or a heartbeat does.
        self._dropped: dict[str, int] = {}
        # The advert of a peer dropped for silence, until it expires: a heartbeat that brings
        # the peer back (it was only late: a busy machine) brings its offer back with it.
        # Without it the peer was listed with nothing to offer until its next advert, up to
        # ten heartbeat intervals (bench/network_discovery.py's channel never settled at
        # load 7: every drop emptied a provider's listing for ~10 s).
        self._dropped_adverts: dict[str, Advert] = {}

    def __len__(self) -> int:
        return len(self._peers)

    def __contains__(self, peer_id: object) -> bool:
        return peer_id in self._peers

    def get(self, peer_id: str) -> PeerInfo | None:
        return self._peers.get(peer_id)

    def snapshot(self) -> list[PeerInfo]:
        return sorted(self._peers.values(), key=lambda p: p.peer_id)

    def _put(self, info: PeerInfo) -> None:
        self._peers[info.peer_id] = info
        if self._on_change is not None:
            self._on_change(info.peer_id, info)

    def _current(self, peer_id: str) -> PeerInfo:
        return self._peers.get(peer_id) or PeerInfo(peer_id=peer_id, channel=self.channel or "")

    def on_advert(self, advert: Advert) -> bool:
        """Take a verified advert; False when it was stale, foreign or a withdrawal."""
        if advert.channel != self.channel:
            return False  # channels never mix
        current = self._peers.get(advert.peer_id)
        if current and current.advert and current.advert.seq >= advert.seq:
            return False
        if self._dropped.get(advert.peer_id, -1) >= advert.seq:
            return False
        if advert.withdrawn or (advert.expires_at and advert.expires_at < self._clock()):
            self._dropped[advert.peer_id] = advert.seq
            self._dropped_adverts.pop(advert.peer_id, None)  # withdrawn: nothing to restore
            self.remove(advert.peer_id)
            return False
        info = self._current(advert.peer_id)
        addrs = advert.addrs or info.addrs
        # An advert proves the peer was alive when it signed it, not now: an old advert
        # fetched from the DHT must not revive a peer that went silent.
        now = self._clock()
        seen = max(info.last_seen, min(advert.at, now))
        if advert.peer_id not in self._peers:
            # A first sighting through peer exchange or the DHT carries an advert signed
            # minutes ago: taken as is, the next expire() dropped the peer at once and it only
            # came back with its next advert (seconds of a newcomer's discovery, bench/
            # network_discovery.py). One interval to prove itself with a heartbeat instead; a
            # peer dropped for silence is still refused above.
            seen = max(seen, now - self.heartbeat_interval_s)
        self._dropped.pop(advert.peer_id, None)
        self._dropped_adverts.pop(advert.peer_id, None)
        self._put(msgspec.structs.replace(info, advert=advert, addrs=addrs, last_seen=seen))
        return True

    def on_heartbeat(self, heartbeat: Heartbeat) -> bool:
        if heartbeat.channel != self.channel:
            return False
        current = self._peers.get(heartbeat.peer_id)
        if current and current.heartbeat and current.heartbeat.seq >= heartbeat.seq:
            return False
        info = self._current(heartbeat.peer_id)
        self._dropped.pop(heartbeat.peer_id, None)
        kept = self._dropped_adverts.pop(heartbeat.peer_id, None)
        if info.advert is None and kept is not None and not self._expired(kept):
            info = msgspec.structs.replace(info, advert=kept, addrs=kept.addrs or info.addrs)
        self._put(msgspec.structs.replace(info, heartbeat=heartbeat, last_seen=self._clock()))
        return True

    def _expired(self, advert: Advert) -> bool:
        return bool(advert.expires_at and advert.expires_at < self._clock())

    def on_latency(self, peer_id: str, latency_ms: float) -> None:
        info = self._peers.get(peer_id)
        if info is not None:
            self._put(msgspec.structs.replace(info, latency_ms=latency_ms))

    def on_addrs(self, peer_id: str, addrs: tuple[str, ...], relayed: bool) -> None:
        info = self._peers.get(peer_id)
        if info is not None and (info.addrs != addrs or info.relayed != relayed):
            self._put(msgspec.structs.replace(info, addrs=addrs, relayed=relayed))

    def remove(self, peer_id: str) -> None:
        if self._peers.pop(peer_id, None) is not None and self._on_change is not None:
            self._on_change(peer_id, None)

    def expire(self) -> list[str]:
        """Drop peers silent for MISSED_HEARTBEATS intervals; returns who was dropped."""
        now = self._clock()
        limit = MISSED_HEARTBEATS * self.heartbeat_interval_s
        gone = []
        for info in list(self._peers.values()):
            expired_advert = (
                info.advert is not None
                and info.advert.expires_at
                and info.advert.expires_at < now
                and info.heartbeat is None
            )
            if now - info.last_seen > limit or expired_advert:
                gone.append(info.peer_id)
        for peer_id in gone:
            advert = self._peers[peer_id].advert
            self._dropped[peer_id] = advert.seq if advert is not None else -1
            if advert is not None and not self._expired(advert):
                self._dropped_adverts[peer_id] = advert
            self.remove(peer_id)
        return gone
