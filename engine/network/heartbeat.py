"""Heartbeats on the channel's gossipsub topic: what each provider has free, every interval.

Gossipsub's own spam protection is off (it silently dropped >10 msgs/s per peer and topic,
which 50 peers' heartbeats reach); instead a per-origin token bucket in the topic validator
drops a flooding peer's messages, which are then not forwarded either.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import libp2p.pubsub.pubsub as _libp2p_pubsub
import trio

from engine.domain import wire
from engine.domain.ratelimit import PeerRateLimiter
from engine.identity import Identity
from engine.network.discovery import envelope_validator, topic_name
from engine.network.peers import PeerTable

log = logging.getLogger("nunet.network.heartbeat")

# A well-behaved peer sends one heartbeat per interval; allow bursts (restarts, republish).
_BURST = 5.0

# py-libp2p hands a topic's messages to its subscriber through a 32-slot channel and drops
# (logs "fail to deliver message to subscription") what does not fit. 50 peers' beats come
# in bursts (one forwarder relays them back to back, and peers started together beat
# together), so 32 lost heartbeats (tests/engine/test_network_scale.py). Subscriptions made after
# this import get room for several rounds of a large channel; validators rate-limit each
# origin, so a flood cannot fill it.
SUBSCRIPTION_QUEUE = 4096
_libp2p_pubsub.SUBSCRIPTION_CHANNEL_SIZE = max(
    _libp2p_pubsub.SUBSCRIPTION_CHANNEL_SIZE, SUBSCRIPTION_QUEUE
)


class HeartbeatFigures(wire.Schema, frozen=True):
    """What the node reports; the network layer adds identity, channel, seq and time."""

    cpu_mhz: int = 0
    ram_mb: int = 0
    gpus: int = 0
    vram_mb: int = 0
    free_cpu_mhz: int = 0
    free_ram_mb: int = 0
    free_gpus: int = 0
    free_vram_mb: int = 0
    running_jobs: int = 0
    ntx_claimed: int = 0  # NTX base units this provider has claimed from escrows, ever


class Heartbeats:
    def __init__(
        self,
        *,
        pubsub: Any,
        identity: Identity,
        channel: str,
        table: PeerTable,
        interval_s: float,
        figures: Callable[[], HeartbeatFigures | None],
        on_heartbeat: Callable[[wire.Heartbeat], None] | None = None,
    ) -> None:
        self.pubsub = pubsub
        self.identity = identity
        self.channel = channel
        self.table = table
        self.interval_s = interval_s
        self.figures = figures
        self._wake = trio.Event()
        self.on_heartbeat = on_heartbeat
        self.topic = topic_name(channel, "heartbeats")
        self.started = time.monotonic()
        self._seq = 0
        # Ten times the nominal rate: generous for honest peers, fatal for a flood.
        self.limiter = PeerRateLimiter(max(10.0 / interval_s, 2.0), _BURST)
        self.sent = 0
        self.received = 0

    async def run(self) -> None:
        self.pubsub.set_topic_validator(
            self.topic,
            envelope_validator("heartbeat", wire.Heartbeat, self.channel, self.limiter),
            False,
        )
        subscription = await self.pubsub.subscribe(self.topic)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._receive, subscription)
            nursery.start_soon(self._send_loop)
            nursery.start_soon(self._expire_loop)

    def build(self) -> wire.Heartbeat | None:
        try:
            figures = self.figures()
        except Exception:
            log.exception("heartbeat figures failed; skipping this beat")
            return None
        if figures is None:
            return None
        self._seq = max(self._seq + 1, int(time.time() * 1000))
        return wire.Heartbeat(
            peer_id=self.identity.peer_id,
            channel=self.channel,
            seq=self._seq,
            at=time.time(),
            uptime_s=round(time.monotonic() - self.started, 3),
            **{name: getattr(figures, name) for name in figures.__struct_fields__ if name != "v"},
        )

    async def _send_loop(self) -> None:
        while True:
            heartbeat = self.build()
            if heartbeat is not None:
                try:
                    await self.pubsub.publish(
                        self.topic, wire.seal(self.identity, "heartbeat", heartbeat)
                    )
                    self.sent += 1
                except Exception as exc:
                    log.info("heartbeat publish failed: %s", exc)
            with trio.move_on_after(self.interval_s):
                await self._wake.wait()
            self._wake = trio.Event()

    def beat_soon(self) -> None:
        """Send the next heartbeat now (a job started or ended: peers should know at once)."""
        self._wake.set()

    async def _receive(self, subscription: Any) -> None:
        while True:
            msg = await subscription.get()
            try:
                heartbeat = wire.open_envelope(msg.data, "heartbeat", wire.Heartbeat)
            except wire.WireError:
                continue
            if heartbeat.peer_id == self.identity.peer_id:
                continue
            self.received += 1
            if self.table.on_heartbeat(heartbeat) and self.on_heartbeat is not None:
                self.on_heartbeat(heartbeat)

    async def _expire_loop(self) -> None:
        while True:
            await trio.sleep(self.interval_s / 2)
            for peer_id in self.table.expire():
                log.info("peer %s missed its heartbeats; dropped", peer_id)
