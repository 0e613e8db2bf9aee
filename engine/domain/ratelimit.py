"""Per-peer limits: a flooding peer is cut off without slowing anyone else.

``PeerRateLimiter``: how often (a token bucket per peer). ``StreamLimiter``: how many at once.
``ScopedStreamLimiter`` and ``ScopedRateLimiter``: the same, counted per peer AND per remote
address and subnet, because libp2p identities are free: one machine makes thousands, and a
cap per peer alone is a cap per key pair, not per attacker. What an address and a subnet are
is ``address_scopes``.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable, Sequence

from oracle_client.ratelimit import PeerRateLimiter

__all__ = [
    "PeerRateLimiter",
    "ScopedRateLimiter",
    "ScopedStreamLimiter",
    "StreamLimiter",
    "ThrottledWarning",
    "address_scopes",
]


class ThrottledWarning:
    """One log line a minute however many refusals come (a flood must not flood the log):
    ``note(*args)`` counts one and, at most once a minute, logs ``template`` with the count
    since the last line first, then ``args``."""

    def __init__(self, log: logging.Logger, template: str, every_s: float = 60.0) -> None:
        self.log = log
        self.template = template
        self.every_s = every_s
        self._since = 0
        self._at = -every_s

    def note(self, *args: object) -> None:
        self._since += 1
        now = time.monotonic()
        if now - self._at >= self.every_s:
            self.log.warning(self.template, self._since, *args)
            self._at, self._since = now, 0


def address_scopes(host: str | None) -> tuple[str, str]:
    """The (address, subnet) a remote host counts under: IPv4 /32 and /24, IPv6 /64 and /56.

    One host owns a whole IPv6 /64 (and usually a /56 is one customer), so those are the
    units there; an IPv4-mapped IPv6 address counts as its IPv4 address; a loopback address
    is its own subnet. A host that is no IP
    address (a relay, a test double) counts as itself at both levels; None as "?".
    """
    if not host:
        return "?", "?"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host, host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        # Not routed: in the demo and the tests each loopback address stands for a host.
        return str(ip), str(ip)
    if isinstance(ip, ipaddress.IPv6Address):
        return (
            str(ipaddress.IPv6Network((ip, 64), strict=False)),
            str(ipaddress.IPv6Network((ip, 56), strict=False)),
        )
    return str(ip), str(ipaddress.IPv4Network((ip, 24), strict=False))


def remote_host(stream: object) -> str | None:
    """The remote IP of a libp2p stream (None when its transport has none)."""
    try:
        remote = stream.get_remote_address()  # type: ignore[attr-defined]
    except Exception:
        return None
    return str(remote[0]) if remote else None


class _Counts:
    """How many of something each key holds; a key at zero takes no memory."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}

    def get(self, key: str) -> int:
        return self._held.get(key, 0)

    def add(self, key: str) -> None:
        self._held[key] = self._held.get(key, 0) + 1

    def remove(self, key: str) -> bool:
        held = self._held.get(key, 0)
        if held <= 0:
            return False
        if held == 1:
            del self._held[key]
        else:
            self._held[key] = held - 1
        return True


class StreamLimiter:
    """How many streams of one protocol a handler serves at once: per peer and in all.

    Our own counter rather than py-libp2p's resource manager: in 0.8.1 its per-protocol and
    per-peer stream scopes (``ResourceManager.acquire_scoped_stream``) are never consulted by
    the swarm or the host, and calling them from a handler would count each stream twice in
    the node-wide total the swarm already keeps. The node-wide and per-peer caps on all
    protocols live in the resource manager (engine/network/host.py); this is the tighter cap
    of one protocol, applied where its handler starts.
    """

    def __init__(self, per_peer: int, total: int) -> None:
        self.per_peer = per_peer
        self.total = total
        self._held = _Counts()
        self._count = 0
        self.refused = 0  # streams turned away, for tests and status

    def acquire(self, peer_id: str) -> bool:
        if self._held.get(peer_id) >= self.per_peer or self._count >= self.total:
            self.refused += 1
            return False
        self._held.add(peer_id)
        self._count += 1
        return True

    def release(self, peer_id: str) -> None:
        if self._held.remove(peer_id):
            self._count -= 1

    def held(self, peer_id: str | None = None) -> int:
        return self._count if peer_id is None else self._held.get(peer_id)


class ScopedStreamLimiter:
    """How many streams of one protocol are served at once, per peer, per remote address
    (/32, /64), per subnet (/24, /56) and in all, with a reserve for peers in good standing.

    A peer in good standing (the caller decides: an accepted chat, a job or an escrow with
    us) is held to its per-peer cap and the total only, and may use the ``reserve``; everyone
    else shares ``total - reserve`` and the caps of their address and subnet. So thousands of
    fresh identities from one address take at most ``per_address`` streams, from one /24 at
    most ``per_subnet``, from anywhere at most ``total - reserve``: never the reserve, and
    never what an honest peer at the attacker's address (a NAT, a shared host) needs once it
    is in good standing. ``acquire`` returns a lease to hand back to ``release``; the
    standing is asked only when it matters (the untrusted caps refused), so a callback that
    reads the database costs nothing under normal load.
    """

    def __init__(
        self, per_peer: int, per_address: int, per_subnet: int, total: int, reserve: int
    ) -> None:
        assert 0 <= reserve < total
        self.per_peer = per_peer
        self.per_address = per_address
        self.per_subnet = per_subnet
        self.total = total
        self.reserve = reserve
        self._held = _Counts()  # peer ids, addresses and subnets share one table: keys differ
        self._count = 0
        self._untrusted = 0
        self.refused = 0

    def acquire(
        self, peer_id: str, host: str | None, trusted: Callable[[], bool]
    ) -> tuple[str, ...] | None:
        if self._held.get(peer_id) >= self.per_peer or self._count >= self.total:
            self.refused += 1
            return None
        address, subnet = address_scopes(host)
        if (
            self._untrusted < self.total - self.reserve
            and self._held.get("a " + address) < self.per_address
            and self._held.get("s " + subnet) < self.per_subnet
        ):
            lease: tuple[str, ...] = (peer_id, "a " + address, "s " + subnet)
            self._untrusted += 1
        elif trusted():
            lease = (peer_id,)
        else:
            self.refused += 1
            return None
        for key in lease:
            self._held.add(key)
        self._count += 1
        return lease

    def release(self, lease: tuple[str, ...]) -> None:
        for key in lease:
            self._held.remove(key)
        self._count -= 1
        if len(lease) > 1:
            self._untrusted -= 1

    def held(self, key: str | None = None) -> int:
        """Streams held in all, or by a peer id."""
        return self._count if key is None else self._held.get(key)


class ScopedRateLimiter:
    """Token buckets per peer, per remote address and per subnet: one call passes only when
    every bucket it counts against has a token (and then takes one from each). A peer in
    good standing counts against its own bucket only, so an attacker sharing its address
    cannot drain its rate."""

    def __init__(
        self,
        per_peer: tuple[float, float],
        per_address: tuple[float, float],
        per_subnet: tuple[float, float],
    ) -> None:
        self._peer = PeerRateLimiter(*per_peer)
        self._address = PeerRateLimiter(*per_address)
        self._subnet = PeerRateLimiter(*per_subnet)

    def allow(self, peer_id: str, host: str | None, trusted: bool) -> bool:
        address, subnet = address_scopes(host)
        buckets: Sequence[tuple[PeerRateLimiter, str]] = [(self._peer, peer_id)]
        if not trusted:
            buckets = [*buckets, (self._address, address), (self._subnet, subnet)]
        if any(limiter.wait_s(key) > 0 for limiter, key in buckets):
            # Taken from the peer's bucket too, so a refused flood stays refused.
            self._peer.allow(peer_id)
            return False
        for limiter, key in buckets:
            limiter.allow(key)
        return True
