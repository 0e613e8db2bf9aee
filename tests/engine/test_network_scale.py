"""Heartbeats of 50 peers are never dropped: an observer gets every beat of every peer.

The setup that fits 2 shared cores in one trio process (50 full NetworkServices, each with
a DHT and all 49 others' beats to handle, would need ~50x the work; 50 processes need ~5 GB
and a minute of imports):

- the observer: a full NetworkService (validators, rate limits, gossipsub as the node runs
  it); every peer connects to it, as channel members do (discovery.py connects to each);
- 50 peers: a libp2p host + gossipsub with the service's parameters, running heartbeat.py's
  own send path (``Heartbeats._send_loop``: build, seal, publish) every second. No DHT,
  discovery or chat, and no links among themselves.

The peers publish without subscribing (gossipsub fanout: straight to the observer). In a real
channel every member links to every other (discovery.py) and forms a gossip mesh of 6-12;
here each peer has one link, and a subscribed peer that the observer's full mesh prunes
publishes into an empty mesh (tried: only ~20 of 50 beats a round arrived), an artifact of
the star; a real mesh of 50 subscribed peers in one process (each beat received ~6 times by
each of 50) does not fit 2 cores. What is tested is the observer's side: 50 origins beating
together, validated, rate-limited per origin, queued to the subscription and entered in the
peer table. Before heartbeat.py raised py-libp2p's 32-slot subscription queue, bursts were
dropped there ("fail to deliver message to subscription").

Every heartbeat a peer sent during the measured rounds must reach the observer's peer table
(counted per peer per round).
"""

from __future__ import annotations

import collections
import time
from typing import Any

import trio
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service
from nacl.signing import SigningKey

from engine.config import NetworkSettings
from engine.domain import wire
from engine.domain.peer_info import PeerInfo
from engine.identity import Identity
from engine.network import host as hostmod
from engine.network.heartbeat import HeartbeatFigures, Heartbeats
from engine.network.peers import PeerTable
from engine.network.service import NetworkService
from tests.engine.test_network_service import Hooks, wait_until

PEERS = 50
INTERVAL_S = 1.0
ROUNDS = 10
CHANNEL = "ch-scale"


class Observer(Hooks):
    def __init__(self) -> None:
        super().__init__()
        self.beats: dict[str, set[int]] = collections.defaultdict(set)

    def on_peer_changed(self, peer_id: str, info: PeerInfo | None) -> None:
        if info is not None and info.heartbeat is not None:
            self.beats[peer_id].add(info.heartbeat.seq)


def full_node(hooks: Hooks, bootstrap: list[str]) -> NetworkService:
    # The 50 peers stand for 50 machines but all dial from 127.0.0.1, and at once: their
    # handshakes and connections would otherwise be over one address's limits
    # (pending_gate.py).
    settings = NetworkSettings(
        listen=["/ip4/127.0.0.1/tcp/0"],
        bootstrap=bootstrap,
        heartbeat_interval_s=INTERVAL_S,
        max_pending_per_ip=PEERS + 1,
        max_inbound_per_ip=PEERS + 1,
        max_inbound_per_subnet=PEERS + 1,
    )
    return NetworkService(Identity(SigningKey.generate()), settings, CHANNEL, hooks)


class LightPeer:
    """A host, gossipsub as the service configures it, and heartbeat.py's sending."""

    def __init__(self) -> None:
        self.identity = Identity(SigningKey.generate())
        self.sent: list[tuple[float, int]] = []  # (when, seq)
        self.heartbeats: Heartbeats | None = None

    async def run(self, observer: str, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        host = hostmod.build_host(self.identity, ["/ip4/127.0.0.1/tcp/0"])
        gossipsub = GossipSub(
            protocols=[PROTOCOL_ID_V11, PROTOCOL_ID],
            degree=6,
            degree_low=4,
            degree_high=12,
            heartbeat_initial_delay=0.1,
            heartbeat_interval=1,
            spam_protection_enabled=False,
            eclipse_protection_enabled=False,
        )
        pubsub = Pubsub(host, gossipsub)
        heartbeats = Heartbeats(
            pubsub=pubsub,
            identity=self.identity,
            channel=CHANNEL,
            table=PeerTable(CHANNEL, INTERVAL_S),
            interval_s=INTERVAL_S,
            figures=lambda: HeartbeatFigures(cpu_mhz=1000, free_cpu_mhz=500),
        )
        self.heartbeats = heartbeats
        build = heartbeats.build

        def recording_build() -> wire.Heartbeat | None:
            beat = build()
            if beat is not None:
                self.sent.append((time.monotonic(), beat.seq))
            return beat

        heartbeats.build = recording_build  # type: ignore[method-assign]
        try:
            async with (
                host.run(hostmod.listen_multiaddrs(["/ip4/127.0.0.1/tcp/0"])),
                background_trio_service(pubsub),
                background_trio_service(gossipsub),
            ):
                await pubsub.wait_until_ready()
                await hostmod.connect(host, hostmod.parse_peer_addr(observer))
                observer_id = hostmod.parse_peer_addr(observer).peer_id
                # Beat once the observer's subscription to the heartbeat topic is known.
                with trio.fail_after(20):
                    while observer_id not in pubsub.peer_topics.get(heartbeats.topic, set()):
                        await trio.sleep(0.05)
                task_status.started()
                try:
                    await heartbeats._send_loop()
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(1):
                        await host.close()
        finally:
            pubsub.seen_messages.stop()


def test_heartbeats_of_50_peers_all_reach_the_observer() -> None:
    report: dict[str, Any] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            observer_hooks = Observer()
            observer = full_node(observer_hooks, [])
            await nursery.start(observer.run)

            peers = [LightPeer() for _ in range(PEERS)]
            started = time.monotonic()
            async with trio.open_nursery() as starting:
                for peer in peers:
                    starting.start_soon(nursery.start, peer.run, observer.listen_addrs()[0])
            report["start_s"] = time.monotonic() - started

            ids = {p.identity.peer_id for p in peers}
            await wait_until(lambda: ids <= set(observer_hooks.beats), timeout=30)
            window_start = time.monotonic()
            await trio.sleep(ROUNDS * INTERVAL_S)
            window_end = time.monotonic()

            def all_arrived() -> bool:
                return all(
                    seq in observer_hooks.beats[peer.identity.peer_id]
                    for peer in peers
                    for when, seq in peer.sent
                    if window_start <= when < window_end
                )

            # The last beats of the window are in flight, and on loaded cores the observer's
            # validation queue runs seconds behind: wait for them, up to a bound (what is
            # still missing then is reported below).
            with trio.move_on_after(20 * INTERVAL_S):
                while not all_arrived():
                    await trio.sleep(0.05)

            missing: dict[str, list[int]] = {}
            per_round: collections.Counter[int] = collections.Counter()
            for peer in peers:
                got = observer_hooks.beats[peer.identity.peer_id]
                sent = [(t, s) for t, s in peer.sent if window_start <= t < window_end]
                # A loaded machine slows the senders down; what matters is that all arrive.
                assert len(sent) >= ROUNDS // 2, (peer.identity.peer_id, len(sent))
                for when, seq in sent:
                    if seq in got:
                        per_round[int((when - window_start) / INTERVAL_S)] += 1
                    else:
                        missing.setdefault(peer.identity.peer_id, []).append(seq)
            report["missing"] = missing
            report["per_round"] = dict(sorted(per_round.items()))
            report["sent"] = sum(
                1 for p in peers for t, _ in p.sent if window_start <= t < window_end
            )
            assert observer.heartbeats is not None
            report["observer_received"] = observer.heartbeats.received
            nursery.cancel_scope.cancel()

    started = time.monotonic()
    trio.run(main)
    report["wall_s"] = round(time.monotonic() - started, 1)
    print("scale:", report)
    assert not report["missing"], report
    # Rounds of 50 beats (one per peer per round; on a loaded machine a late beat lands in
    # the next round's bucket, and the window may hold a round less).
    assert report["sent"] >= PEERS * ROUNDS * 0.8, report
