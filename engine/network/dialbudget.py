"""How often adverts may make us dial: a budget, so that signed adverts naming an address of
the sender's choosing cannot turn the node into a port scanner (issue 21: 1,000 fresh
identities' adverts made the nodes open 2,801 TCP connections to one address and port).

An advert is signed by its peer, but the addresses in it are whatever that peer wrote. The
dial its arrival triggers (channel members connect directly) is the only dial an advert alone
may cause, and each must pass three buckets: one for the whole node, one per target
``ip:port`` and one per target /24 (/56). A refused dial is simply not made: the peer stays
listed but unverified (engine/network/peers.py) until it reaches us, or a later advert finds
budget left.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from engine.domain.ratelimit import PeerRateLimiter
from engine.network.addrs import subnet_of

# The whole node: a burst for a newcomer meeting a channel, then 2 dials a second.
GLOBAL_RATE_PER_S = 2.0
GLOBAL_BURST = 16.0
# One address and port: one dial a minute, however many identities name it.
TARGET_INTERVAL_S = 60.0
# One /24 (/56): 4 at once, then one every 5 s (the honest providers of a lab share a LAN).
SUBNET_RATE_PER_S = 0.2
SUBNET_BURST = 4.0


def target_of(addr: str) -> str:
    """``ip:port`` of a multiaddr like ``/ip4/1.2.3.4/tcp/4001[/p2p/...]``; the text otherwise."""
    parts = addr.split("/")
    if len(parts) >= 5 and parts[1] in ("ip4", "ip6", "dns", "dns4", "dns6") and parts[3] == "tcp":
        return f"{parts[2]}:{parts[4]}"
    return addr


class DialBudget:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._global = PeerRateLimiter(GLOBAL_RATE_PER_S, GLOBAL_BURST, clock)
        self._target = PeerRateLimiter(1.0 / TARGET_INTERVAL_S, 1.0, clock)
        self._subnet = PeerRateLimiter(SUBNET_RATE_PER_S, SUBNET_BURST, clock)
        self.allowed = 0
        self.refused = 0

    def allow(self, addrs: Sequence[str]) -> bool:
        """Take one dial to each of ``addrs`` (a dial tries them all) from every bucket;
        False (and nothing taken) when any of them is short."""
        addrs = list(dict.fromkeys(addrs))
        if not addrs:
            return False
        targets = [target_of(a) for a in addrs]
        subnets = [subnet_of((a,)) for a in addrs]
        if (
            self._global.wait_s("*", len(addrs)) > 0
            or any(self._target.wait_s(t, targets.count(t)) > 0 for t in targets)
            or any(self._subnet.wait_s(n, subnets.count(n)) > 0 for n in subnets)
        ):
            self.refused += 1
            return False
        self._global.allow("*", len(addrs))
        for target in targets:
            self._target.allow(target)
        for subnet in subnets:
            self._subnet.allow(subnet)
        self.allowed += 1
        return True
