"""Per-peer limits: a flooding peer is cut off without slowing anyone else.

``PeerRateLimiter``: how often (a token bucket per peer). ``StreamLimiter``: how many at once.
"""

from __future__ import annotations

from oracle_client.ratelimit import PeerRateLimiter

__all__ = ["PeerRateLimiter", "StreamLimiter"]


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
        self._held: dict[str, int] = {}
        self._count = 0
        self.refused = 0  # streams turned away, for tests and status

    def acquire(self, peer_id: str) -> bool:
        held = self._held.get(peer_id, 0)
        if held >= self.per_peer or self._count >= self.total:
            self.refused += 1
            return False
        self._held[peer_id] = held + 1
        self._count += 1
        return True

    def release(self, peer_id: str) -> None:
        held = self._held.get(peer_id, 0)
        if held <= 0:
            return
        self._count -= 1
        if held == 1:
            del self._held[peer_id]
        else:
            self._held[peer_id] = held - 1

    def held(self, peer_id: str | None = None) -> int:
        return self._count if peer_id is None else self._held.get(peer_id, 0)
