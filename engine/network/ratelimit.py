"""A per-peer token bucket: a flooding peer is cut off without slowing anyone else."""

from __future__ import annotations

import time
from collections.abc import Callable


class PeerRateLimiter:
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
        return True

    def forget(self, peer_id: str) -> None:
        self._buckets.pop(peer_id, None)
