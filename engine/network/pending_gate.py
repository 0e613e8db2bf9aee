"""Inbound connections, bounded per remote address and subnet, in their handshake and after.

py-libp2p 0.8.1 admits about 250 inbound connections at once (``Swarm._inbound_limiter``,
``max_connections - min_connections``), established ones and those still negotiating
security and muxer alike, and a slot is taken the moment TCP accepts, before any byte is
read. One address that kept ~400 idle TCP connections open (re-opening each one the node
dropped after a few seconds) kept every honest peer out for as long as it went on: a new
node could not join, an old one could not come back. Measured on a real daemon, no honest
peer got in within 30 s (tests/adversarial/test_pending_connections.py).

So a remote address (an IPv4 address, an IPv6 /64, which one host can fill alone) may have
at most ``max_pending_per_ip`` connections in their handshake at once; one more is closed
before a byte is read. A handshake has ``HANDSHAKE_S`` to finish.

Identities are free, so the handshake is no price (issue 21): 249 identities from one
address completed it and held every inbound slot. Established inbound connections are
counted too, per address (``max_inbound_per_ip``) and per subnet (``max_inbound_per_subnet``:
an IPv4 /24, an IPv6 /56, as go-libp2p's resource manager counts them), and all strangers
together may hold all but ``INBOUND_RESERVE`` of the node's inbound connections. A peer in
good standing (a job, an escrow or an accepted chat with us) is admitted past every one of
these quotas, so an attacker's identities cannot push it out. When strangers hold their
whole share, a newcomer from a subnet holding fewer takes the place of the oldest stranger of
the subnet holding the most: many addresses, each within its quota, cannot keep every new
node out, and a flood only displaces itself. Loopback addresses are each
their own subnet: they are not routed, and in the demo and the tests each stands for a host.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import trio
from libp2p.network.exceptions import SwarmException

from engine.config import NetworkSettings
from engine.domain.ratelimit import ThrottledWarning, address_scopes

log = logging.getLogger("nunet.network.pending")

MAX_PENDING_PER_IP = NetworkSettings().max_pending_per_ip  # [network] max_pending_per_ip
MAX_INBOUND_PER_IP = NetworkSettings().max_inbound_per_ip
MAX_INBOUND_PER_SUBNET = NetworkSettings().max_inbound_per_subnet
MAX_ESTABLISHED_INBOUND = 256  # the resource manager's (host.py)
INBOUND_RESERVE = 32  # of those, never taken by strangers: kept for peers in good standing
HANDSHAKE_S = 10.0  # Noise and the muxer negotiation: milliseconds when honest
WARN_EVERY_S = 60.0


def address_key(host: str) -> str:
    """What one remote party is: its IPv4 address, or the /64 of its IPv6 address."""
    return address_scopes(host)[0]


def subnet_key(host: str) -> str:
    """The subnet one operator is likely to hold whole: an IPv4 /24, an IPv6 /56."""
    return address_scopes(host)[1]


class PendingGate:
    """Counts inbound connections per remote address from TCP accept to an upgraded
    connection, and established ones per address and subnet; ``install`` puts it in front
    of a swarm's inbound upgrade. ``in_good_standing(peer_id)``: admitted past the quotas."""

    def __init__(
        self,
        per_address: int = MAX_PENDING_PER_IP,
        handshake_s: float = HANDSHAKE_S,
        *,
        established_per_address: int = MAX_INBOUND_PER_IP,
        established_per_subnet: int = MAX_INBOUND_PER_SUBNET,
        strangers_total: int = MAX_ESTABLISHED_INBOUND - INBOUND_RESERVE,
        in_good_standing: Callable[[str], bool] = lambda peer_id: False,
    ) -> None:
        self.per_address = per_address
        self.handshake_s = handshake_s
        self.established_per_address = established_per_address
        self.established_per_subnet = established_per_subnet
        self.strangers_total = strangers_total
        self.in_good_standing = in_good_standing
        self._pending: dict[str, int] = {}
        # Established inbound connections: (address key, subnet key) each; closed ones are
        # pruned at the next admission (at most a few hundred: the node's inbound limit).
        self._established: dict[Any, tuple[str, str]] = {}
        self.evicted: list[Any] = []  # displaced by admit(), to be closed by its caller
        self._refused = ThrottledWarning(
            log,
            "refused %d inbound connection(s) in the last minute, the latest from %s: %s",
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
                why = f"{key} has {held} connections in their handshake"
                self._refused.note(key, why)
                raise SwarmException(why)
            self._pending[key] = held + 1
            try:
                with trio.fail_after(self.handshake_s):
                    conn = await upgrade(raw_conn, maddr)
            finally:
                left = self._pending[key] - 1
                if left:
                    self._pending[key] = left
                else:
                    del self._pending[key]
            subnet = subnet_key(remote[0]) if remote else "?"
            refusal = self.admit(conn, key, subnet)
            evicted, self.evicted = self.evicted, []
            for old in evicted:
                with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await old.close()
            if refusal:
                self._refused.note(key, refusal)
                with trio.CancelScope(shield=True):
                    await conn.close()
                raise SwarmException(refusal)
            return conn

        swarm.upgrade_inbound_raw_conn = gated

    def admit(self, conn: Any, key: str, subnet: str) -> str:
        """Count an established inbound connection, or say why it may not stay ("": it may).
        A stranger's connection it displaced to make room is left in ``evicted``, for the
        caller to close."""
        self._established = {
            c: where for c, where in self._established.items() if not getattr(c, "is_closed", 0)
        }
        by_address = sum(1 for k, _ in self._established.values() if k == key)
        by_subnet = sum(1 for _, n in self._established.values() if n == subnet)
        refusal = ""
        if by_address >= self.established_per_address:
            refusal = f"{key} holds {by_address} connections already"
        elif by_subnet >= self.established_per_subnet:
            refusal = f"{subnet} holds {by_subnet} connections already"
        elif len(self._established) >= self.strangers_total:
            refusal = f"{len(self._established)} inbound connections: the rest are reserved"
        if refusal and self.in_good_standing(str(getattr(conn, "peer_id", ""))):
            refusal = ""  # a peer we deal with is never pushed out by strangers
        elif refusal.endswith("reserved") and (old := self._displaceable(subnet)) is not None:
            # Full of strangers from other subnets than the newcomer's: the heaviest one gives
            # up its oldest connection. Many addresses, each within its quota, filled every
            # place a stranger may take, and a newcomer from anywhere else never got in (the
            # many-identity soak: 240 from nine addresses); a flood only displaces itself.
            del self._established[old]
            self.evicted.append(old)
            refusal = ""
        if not refusal:
            self._established[conn] = (key, subnet)
        return refusal

    def _displaceable(self, subnet: str) -> Any | None:
        """The oldest stranger's connection of the subnet holding the most, if that subnet
        holds at least two more than the newcomer's would (else None: no room is made)."""
        counts: dict[str, int] = {}
        for _, held in self._established.values():
            counts[held] = counts.get(held, 0) + 1
        heaviest = max(counts, key=lambda n: counts[n], default=None)
        if heaviest is None or counts[heaviest] < counts.get(subnet, 0) + 2:
            return None
        for old, (_, held) in self._established.items():  # oldest first
            if held == heaviest and not self.in_good_standing(str(getattr(old, "peer_id", ""))):
                return old
        return None
