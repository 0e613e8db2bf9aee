"""A token bucket per key (a peer id, a network address): a flooding key is cut off without
slowing anyone else. The bottom layer's, so that the oracle's HTTP server and the node's
network (engine/domain/ratelimit.py) share one."""

from __future__ import annotations

import time
from collections.abc import Callable


class PeerRateLimiter:
    # Buckets kept before the full ones are dropped (a full bucket is the same as none): many
    # peers passing by must not grow the table for ever.
    MAX_TRACKED = 10_000

    def __init__(
        self, rate_per_s: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate_per_s
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # peer -> (tokens, last refill)

    def allow(self, peer_id: str, cost: float = 1.0) -> bool:
        now = self._clock()
        tokens, last = self._buckets.get(peer_id, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < cost:
            self._buckets[peer_id] = (tokens, now)
            return False
        self._buckets[peer_id] = (tokens - cost, now)
        if len(self._buckets) > self.MAX_TRACKED:
            self._prune(now)
        return True

    def wait_s(self, peer_id: str, cost: float = 1.0) -> float:
        """Seconds until ``allow(peer_id, cost)`` would pass (0.0: now); takes nothing."""
        now = self._clock()
        tokens, last = self._buckets.get(peer_id, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        return max(0.0, (cost - tokens) / self.rate)

    def _prune(self, now: float) -> None:
        for peer, (tokens, last) in list(self._buckets.items()):
            if tokens + (now - last) * self.rate >= self.burst:
                del self._buckets[peer]

    def forget(self, peer_id: str) -> None:
        self._buckets.pop(peer_id, None)
