"""The peer table: who is on our channel, what they offer, and when we last heard of them.

Plain data, no libp2p: the service feeds it adverts, heartbeats, pings and connection events,
and it tells the node what changed. A peer that misses ``MISSED_HEARTBEATS`` heartbeats (or
whose advert expired, when it never sent one) is dropped.

Identities are free (issue 21: 1,000 fresh keys' adverts relayed over one connection added 858
peers for good), so the table is bounded: at most ``MAX_PEERS`` peers, and at most
``SUBNET_QUOTA`` of one /24 (IPv4) or /56 (IPv6), taken from the address a connection showed
(once verified) or the first one the advert names. A newcomer over either bound evicts the
stalest unverified peer of that group (verified ones only when the group has none), never a
peer in good standing (``protected``: a job, an escrow or an accepted chat with us); with
nobody to evict it is refused. A peer is *verified* once we talked to it directly (a Noise
handshake proved its key: a connection, a ping): relayed adverts and heartbeats alone are
claims anyone can forward.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from engine.domain.peer_info import MISSED_HEARTBEATS, PeerInfo
from engine.domain.wire import Advert, Heartbeat
from engine.network.addrs import subnet_of

MAX_PEERS = 512
SUBNET_QUOTA = 32
# Remembered drops (peer id -> advert seq, and kept adverts): bounded too, oldest forgotten
# first, or a flood of fresh identities would grow them instead of the table.
MAX_FORGOTTEN = 4096


PeerChange = Callable[[str, PeerInfo | None], None]  # (peer id, new info or None when gone)


class PeerTable:
    def __init__(
        self,
        channel: str | None,
        heartbeat_interval_s: float,
        on_change: PeerChange | None = None,
        clock: Callable[[], float] = time.time,
        protected: Callable[[str], bool] | None = None,
        connected: Callable[[str], str | None] | None = None,
        max_peers: int = MAX_PEERS,
        subnet_quota: int = SUBNET_QUOTA,
    ) -> None:
        self.channel = channel
        self.protected = protected
        # The address a live connection to the peer runs over (None: not connected): a peer
        # we are connected to enters verified, grouped by where it really is.
        self.connected = connected
        self.max_peers = max_peers
        self.subnet_quota = subnet_quota
        self.evicted = 0  # peers pushed out by the bounds, for tests and status
        self.refused = 0  # newcomers turned away: nobody could be evicted
        self._subnets: dict[str, str] = {}  # peer id -> its quota group
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

    def _forget_later(self, peer_id: str, seq: int, advert: Advert | None = None) -> None:
        self._dropped[peer_id] = seq
        while len(self._dropped) > MAX_FORGOTTEN:
            del self._dropped[next(iter(self._dropped))]
        if advert is not None:
            self._dropped_adverts[peer_id] = advert
            while len(self._dropped_adverts) > MAX_FORGOTTEN:
                del self._dropped_adverts[next(iter(self._dropped_adverts))]

    def _is_protected(self, peer_id: str) -> bool:
        if self.protected is None:
            return False
        try:
            return self.protected(peer_id)
        except Exception:
            return True  # when in doubt, keep it: evicting a peer we deal with costs more

    def _evict_from(self, group: list[PeerInfo]) -> bool:
        """Evict the stalest unverified peer of ``group`` (verified ones only when it has
        none), never a protected one; False when there is nobody to evict."""
        for verified in (False, True):
            pool = [p for p in group if p.verified == verified]
            for info in sorted(pool, key=lambda p: p.last_seen):
                if not self._is_protected(info.peer_id):
                    advert = info.advert
                    self._forget_later(info.peer_id, advert.seq if advert else -1)
                    self.remove(info.peer_id)
                    self.evicted += 1
                    return True
        return False

    def _admit(self, peer_id: str, addrs: tuple[str, ...]) -> bool | None:
        """Room for a newcomer within the bounds, evicting if need be. None: refused; else
        whether it enters verified (connected to us). The subnet quota binds unverified
        peers only: fifty honest peers on one machine or LAN are verified within a second."""
        observed = None
        if self.connected is not None:
            try:
                observed = self.connected(peer_id)
            except Exception:
                observed = None
        subnet = subnet_of((observed,)) if observed else subnet_of(addrs)
        if observed is None:
            same = [
                p
                for p in self._peers.values()
                if not p.verified and self._subnets.get(p.peer_id) == subnet
            ]
            if len(same) >= self.subnet_quota and not self._evict_from(same):
                self.refused += 1
                return None
        if len(self._peers) >= self.max_peers and not self._evict_from(list(self._peers.values())):
            self.refused += 1
            return None
        self._subnets[peer_id] = subnet
        return observed is not None

    def mark_verified(self, peer_id: str, observed: str | None = None) -> None:
        """We talked to ``peer_id`` directly; ``observed``: the address its connection came
        from (a multiaddr), which from now on is its quota group."""
        info = self._peers.get(peer_id)
        if info is None:
            return
        if observed:
            self._subnets[peer_id] = subnet_of((observed,))
        if not info.verified:
            self._put(msgspec.structs.replace(info, verified=True))

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
            self._forget_later(advert.peer_id, advert.seq)
            self._dropped_adverts.pop(advert.peer_id, None)  # withdrawn: nothing to restore
            self.remove(advert.peer_id)
            return False
        info = self._current(advert.peer_id)
        if advert.peer_id not in self._peers:
            admitted = self._admit(advert.peer_id, advert.addrs)
            if admitted is None:
                return False
            info = msgspec.structs.replace(info, verified=admitted)
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
        if current is None:
            kept = self._dropped_adverts.get(heartbeat.peer_id)
            admitted = self._admit(heartbeat.peer_id, kept.addrs if kept else ())
            if admitted is None:
                return False
            info = msgspec.structs.replace(info, verified=admitted)
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

    def on_path(self, peer_id: str, relayed: bool) -> None:
        """How we are connected to a listed peer now: through a relay only, or directly
        (after a hole punch, relayed turns False)."""
        info = self._peers.get(peer_id)
        if info is not None and info.relayed != relayed:
            self._put(msgspec.structs.replace(info, relayed=relayed))

    def remove(self, peer_id: str) -> None:
        self._subnets.pop(peer_id, None)
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
            kept = advert if advert is not None and not self._expired(advert) else None
            self._forget_later(peer_id, advert.seq if advert is not None else -1, kept)
            self.remove(peer_id)
        return gone
