"""Inbound connections still in their handshake, bounded per remote address.

py-libp2p 0.8.1 admits about 250 inbound connections at once (``Swarm._inbound_limiter``,
``max_connections - min_connections``), established ones and those still negotiating
security and muxer alike, and a slot is taken the moment TCP accepts, before any byte is
read. One address that kept ~400 idle TCP connections open (re-opening each one the node
dropped after a few seconds) kept every honest peer out for as long as it went on: a new
node could not join, an old one could not come back. Measured on a real daemon, no honest
peer got in within 30 s (tests/adversarial/test_pending_connections.py).

So a remote address (an IPv4 address, an IPv6 /64, which one host can fill alone) may have
at most ``max_pending_per_ip`` connections in their handshake at once; one more is closed
before a byte is read. A handshake has ``HANDSHAKE_S`` to finish. Established connections
are not counted: the per-peer caps (host.py) bound those, and many honest peers share one
address behind a NAT (a farm of rigs) or in tests.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from libp2p.network.exceptions import SwarmException

from engine.config import NetworkSettings
from engine.network.ratelimit import ThrottledWarning, address_scopes

log = logging.getLogger("nunet.network.pending")

MAX_PENDING_PER_IP = NetworkSettings().max_pending_per_ip  # [network] max_pending_per_ip
HANDSHAKE_S = 10.0  # Noise and the muxer negotiation: milliseconds when honest
WARN_EVERY_S = 60.0


def address_key(host: str) -> str:
    """What one remote party is: its IPv4 address, or the /64 of its IPv6 address."""
    return address_scopes(host)[0]


class PendingGate:
    """Counts inbound connections per remote address from TCP accept to an upgraded
    connection; ``install`` puts it in front of a swarm's inbound upgrade."""

    def __init__(
        self, per_address: int = MAX_PENDING_PER_IP, handshake_s: float = HANDSHAKE_S
    ) -> None:
        self.per_address = per_address
        self.handshake_s = handshake_s
        self._pending: dict[str, int] = {}
        self._refused = ThrottledWarning(
            log,
            "refused %d inbound connection(s) in the last minute, the latest from %s: "
            "%d of its connections were already in their handshake",
            WARN_EVERY_S,
        )

    def install(self, swarm: Any) -> None:
        # ``Swarm._do_handle_inbound_connection`` calls ``self.upgrade_inbound_raw_conn``
        # for every TCP connection it accepted; what this raises, it answers by closing the
        # connection (its ``except Exception``).
        upgrade = swarm.upgrade_inbound_raw_conn

        async def gated(raw_conn: Any, maddr: Any) -> Any:
            remote = raw_conn.get_remote_address()
            key = address_key(remote[0]) if remote else "?"
            held = self._pending.get(key, 0)
            if held >= self.per_address:
                self._refused.note(key, self.per_address)
                raise SwarmException(f"{key} has {held} connections in their handshake")
            self._pending[key] = held + 1
            try:
                with trio.fail_after(self.handshake_s):
                    return await upgrade(raw_conn, maddr)
            finally:
                left = self._pending[key] - 1
                if left:
                    self._pending[key] = left
                else:
                    del self._pending[key]

        swarm.upgrade_inbound_raw_conn = gated
