"""Who holds what in a bounded store of records that other peers write (the DHT's values and
provider records): counts and bytes per sender peer, address and subnet, and which record to
drop when the store is full.

Identities are free (issue 21): a quota per sender peer alone is a quota per key pair. So a
record is charged to its sender's peer id, its address (/32, /64) and its subnet (/24, /56)
(``ratelimit.address_scopes``); strangers together hold at most the store's bounds less a
reserve, which only records we wrote ourselves or that peers in good standing (a job, an
escrow, an accepted chat) wrote may use. When the store is full an expired record goes first,
then the oldest record of the stranger subnet that holds the most, unless that is the
newcomer's own subnet (then the newcomer is refused: a flood only ever displaces itself).
Protected records (ours, good standing) are never evicted.

Plain data: no libp2p. ``engine/network/dht_bounds.py`` puts it in front of py-libp2p's stores.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from engine.domain.ratelimit import address_scopes


@dataclass(frozen=True)
class Owner:
    """Who a record is charged to."""

    peer: str
    address: str
    subnet: str
    protected: bool = False  # ours, or written by a peer in good standing

    @classmethod
    def sender(cls, peer: str, host: str | None, protected: bool) -> Owner:
        address, subnet = address_scopes(host)
        return cls(peer, address, subnet, protected)


# Records we wrote ourselves (our advert, our provider record): kept whatever the bounds.
OURS = Owner("(ours)", "(ours)", "(ours)", protected=True)
# Records our own lookups fetched from the network and py-libp2p caches: charged like a
# stranger of their own, so a hostile DHT answering our lookups fills no more than its quota.
FETCHED = Owner("(fetched)", "(fetched)", "(fetched)")


@dataclass(frozen=True)
class StoreBounds:
    max_records: int = 4096
    max_bytes: int = 8 << 20
    per_peer: int = 64
    per_address: int = 256
    per_subnet: int = 512

    @property
    def reserve_records(self) -> int:
        return self.max_records // 8

    @property
    def reserve_bytes(self) -> int:
        return self.max_bytes // 8


@dataclass
class _Entry:
    owner: Owner
    size: int
    expires: float
    at: float


class RecordBook:
    """The charges of one store. ``make_room`` decides (evicting through ``evict``, which
    must end in ``release``), ``charge`` and ``release`` follow what the store holds."""

    def __init__(self, bounds: StoreBounds, clock: Callable[[], float] = time.time) -> None:
        self.bounds = bounds
        self._clock = clock
        self._entries: dict[Hashable, _Entry] = {}
        self._held: dict[str, int] = {}  # "p "/"a "/"s " + scope -> records held
        self.records = 0
        self.bytes = 0
        self._stranger_records = 0
        self._stranger_bytes = 0
        self.refused = 0  # writes turned away, for tests and status
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry: object) -> bool:
        return entry in self._entries

    def held(self, scope: str) -> int:
        """Records held by ``"p " + peer``, ``"a " + address`` or ``"s " + subnet``."""
        return self._held.get(scope, 0)

    def owner_of(self, entry: Hashable) -> Owner | None:
        held = self._entries.get(entry)
        return held.owner if held is not None else None

    # --- bookkeeping ---------------------------------------------------------------------

    def charge(self, entry: Hashable, owner: Owner, size: int, expires: float) -> None:
        self.release(entry)
        self._entries[entry] = _Entry(owner, size, expires, self._clock())
        for scope in _scopes(owner):
            self._held[scope] = self._held.get(scope, 0) + 1
        self.records += 1
        self.bytes += size
        if not owner.protected:
            self._stranger_records += 1
            self._stranger_bytes += size

    def release(self, entry: Hashable) -> None:
        held = self._entries.pop(entry, None)
        if held is None:
            return
        for scope in _scopes(held.owner):
            left = self._held.get(scope, 0) - 1
            if left > 0:
                self._held[scope] = left
            else:
                self._held.pop(scope, None)
        self.records -= 1
        self.bytes -= held.size
        if not held.owner.protected:
            self._stranger_records -= 1
            self._stranger_bytes -= held.size

    # --- decisions -----------------------------------------------------------------------

    def over_quota(self, owner: Owner, replacing: Hashable | None = None) -> bool:
        """Whether one more record of ``owner`` passes its peer's, address's or subnet's
        quota (a record it replaces of its own does not count). Protected owners have none."""
        if owner.protected:
            return False
        mine = 1 if replacing is not None and self.owner_of(replacing) == owner else 0
        b = self.bounds
        return (
            self.held("p " + owner.peer) - mine >= b.per_peer
            or self.held("a " + owner.address) - mine >= b.per_address
            or self.held("s " + owner.subnet) - mine >= b.per_subnet
        )

    def make_room(
        self,
        owner: Owner,
        size: int,
        evict: Callable[[Hashable], None],
        replacing: Hashable | None = None,
    ) -> bool:
        """Room for a record of ``owner`` and ``size`` bytes (replacing ``replacing``, if
        held), evicting what the rules allow; False (nothing evicted for it) when refused."""
        if owner == OURS:
            return True  # our own handful of records: never refused
        if self.over_quota(owner, replacing):
            self.refused += 1
            return False
        while not self._fits(owner, size, replacing):
            victim = self._victim(owner, exclude=replacing)
            if victim is None:
                self.refused += 1
                return False
            evict(victim)
            self.release(victim)  # in case ``evict`` found it gone already
            self.evicted += 1
        return True

    def heaviest_of(self, entries: list[Hashable], owner: Owner) -> Hashable | None:
        """Among ``entries`` (one key's provider records, full), the one to give up for a
        newcomer of ``owner``: an expired one, else the oldest of the stranger subnet
        holding the most of them, if it holds more than the newcomer's subnet would."""
        now = self._clock()
        known = [(e, self._entries[e]) for e in entries if e in self._entries]
        for entry, held in known:
            if held.expires <= now and not held.owner.protected:
                return entry
        counts: dict[str, int] = {}
        for _, held in known:
            if not held.owner.protected:
                counts[held.owner.subnet] = counts.get(held.owner.subnet, 0) + 1
        if not counts:
            return None
        subnet = max(counts, key=lambda s: counts[s])
        if counts[subnet] <= counts.get(owner.subnet, 0) + 1:
            return None
        candidates = [
            (h.at, e) for e, h in known if not h.owner.protected and h.owner.subnet == subnet
        ]
        return min(candidates, key=lambda c: c[0])[1]

    def _fits(self, owner: Owner, size: int, replacing: Hashable | None) -> bool:
        old = self._entries.get(replacing) if replacing is not None else None
        records = self.records + 1 - (1 if old else 0)
        used = self.bytes + size - (old.size if old else 0)
        b = self.bounds
        if records > b.max_records or used > b.max_bytes:
            return False
        if owner.protected:
            return True
        mine = old is not None and not old.owner.protected
        strangers = self._stranger_records + 1 - (1 if mine else 0)
        stranger_bytes = self._stranger_bytes + size - (old.size if old and mine else 0)
        return (
            strangers <= b.max_records - b.reserve_records
            and stranger_bytes <= b.max_bytes - b.reserve_bytes
        )

    def _victim(self, owner: Owner, exclude: Hashable | None) -> Hashable | None:
        """An expired record, else the oldest of the heaviest stranger subnet other than the
        newcomer's own; None when only protected records (or the newcomer's own) are left."""
        now = self._clock()
        for entry, held in self._entries.items():
            if entry != exclude and held.expires <= now and not held.owner.protected:
                return entry
        subnets = {
            scope[2:]: count
            for scope, count in self._held.items()
            if scope.startswith("s ") and scope[2:] not in _PROTECTED_SUBNETS
        }
        if not owner.protected:
            subnets.pop(owner.subnet, None)
        while subnets:
            subnet = max(subnets, key=lambda s: subnets[s])
            if not owner.protected and subnets[subnet] <= self.held("s " + owner.subnet):
                return None  # the newcomer's subnet holds as much: it displaces nobody
            oldest: tuple[float, Hashable] | None = None
            for entry, held in self._entries.items():
                if (
                    entry != exclude
                    and not held.owner.protected
                    and held.owner.subnet == subnet
                    and (oldest is None or held.at < oldest[0])
                ):
                    oldest = (held.at, entry)
            if oldest is not None:
                return oldest[1]
            del subnets[subnet]  # only protected records there
        return None


_PROTECTED_SUBNETS = frozenset({OURS.subnet})


def _scopes(owner: Owner) -> tuple[str, str, str]:
    return ("p " + owner.peer, "a " + owner.address, "s " + owner.subnet)
