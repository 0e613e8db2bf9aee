"""NetworkService in one trio run: clean start/stop, forged and flooding gossip rejected."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import trio
from nacl.signing import SigningKey

from engine.config import NetworkSettings
from engine.domain import wire
from engine.domain.peer_info import PeerInfo
from engine.identity import Identity
from engine.network import adverts
from engine.network.heartbeat import HeartbeatFigures
from engine.network.service import NetworkService


class Hooks:
    def __init__(self) -> None:
        self.messages: list[tuple[str, str, int]] = []
        self.changes: list[tuple[str, bool]] = []

    def advert(self) -> wire.Advert | None:
        return wire.Advert(peer_id="", channel="", cpu_mhz=1000)

    def in_good_standing(self, peer_id: str) -> bool:
        return False

    def heartbeat(self) -> HeartbeatFigures | None:
        return HeartbeatFigures(cpu_mhz=1000)

    def on_peer_changed(self, peer_id: str, info: PeerInfo | None) -> None:
        self.changes.append((peer_id, info is not None))

    def on_chat_request(self, peer_id: str, conversation: str, at: float) -> None:
        pass

    def on_chat_join(self, peer_id: str, conversation: str, at: float) -> None:
        pass

    def on_message(self, peer_id: str, conversation: str, text: str, seq: int, at: float) -> None:
        self.messages.append((peer_id, text, seq))


def service(bootstrap: list[str] | None = None, channel: str = "ch") -> NetworkService:
    settings = NetworkSettings(
        listen=["/ip4/127.0.0.1/tcp/0"], bootstrap=bootstrap or [], heartbeat_interval_s=0.5
    )
    return NetworkService(Identity(SigningKey.generate()), settings, channel, Hooks())


async def wait_until(check: Any, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.05)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_starts_and_stops_cleanly_and_fast() -> None:
    threads_before = threading.active_count()
    fds_before = open_fds()
    timings: dict[str, float] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            a = service()
            started = time.perf_counter()
            await nursery.start(a.run)
            timings["start"] = time.perf_counter() - started
            assert a.listen_addrs()[0].startswith("/ip4/127.0.0.1/tcp/")
            assert a.listen_addrs()[0].endswith("/p2p/" + a.identity.peer_id)
            b = service(a.listen_addrs())
            await nursery.start(b.run)
            await wait_until(lambda: a.peers() and b.peers())
            stopping = time.perf_counter()
            nursery.cancel_scope.cancel()
        timings["stop"] = time.perf_counter() - stopping

    trio.run(main)
    assert timings["start"] < 2.0 and timings["stop"] < 2.0, timings
    assert threading.active_count() == threads_before  # seen_messages thread stopped
    assert open_fds() <= fds_before + 2  # sockets closed (slack for trio's wakeup fds)


def test_forged_advert_over_gossip_is_not_listed() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            a = service()
            await nursery.start(a.run)
            b = service(a.listen_addrs())
            await nursery.start(b.run)
            await wait_until(lambda: a.peers() and b.peers())
            assert b.discovery is not None and a.discovery is not None
            victim = Identity(SigningKey.generate())
            forged = adverts.stamp(
                wire.Advert(peer_id="", channel=""),
                peer_id=victim.peer_id,
                channel="ch",
                seq=1,
                addrs=(),
                ttl_s=60,
            )
            # b signs an advert that names someone else, and gossips it on the channel.
            await b.pubsub.publish(b.discovery.topic, wire.seal(b.identity, "advert", forged))
            await trio.sleep(1.0)
            assert victim.peer_id not in {p.peer_id for p in a.peers()}
            assert b.identity.peer_id in {p.peer_id for p in a.peers()}
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_heartbeat_flood_is_dropped_without_hurting_others() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            a = service()
            await nursery.start(a.run)
            flooder, honest = service(a.listen_addrs()), service(a.listen_addrs())
            await nursery.start(flooder.run)
            await nursery.start(honest.run)
            await wait_until(lambda: len(a.peers()) == 2)
            assert a.heartbeats is not None and flooder.heartbeats is not None
            # The flooder skips its own validator (its own rate limit) to really flood.
            flooder.pubsub.remove_topic_validator(flooder.heartbeats.topic)
            before = a.heartbeats.received
            for _ in range(300):
                beat = flooder.heartbeats.build()
                assert beat is not None
                await flooder.pubsub.publish(
                    flooder.heartbeats.topic, wire.seal(flooder.identity, "heartbeat", beat)
                )
            await trio.sleep(1.5)
            accepted = a.heartbeats.received - before
            assert accepted < 60  # burst + rate, not 300
            honest_info = next(p for p in a.peers() if p.peer_id == honest.identity.peer_id)
            assert honest_info.heartbeat is not None
            assert time.time() - honest_info.last_seen < 1.0
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_chat_in_process_ordered_and_acked() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            a = service()
            await nursery.start(a.run)
            b = service(a.listen_addrs())
            await nursery.start(b.run)
            await wait_until(lambda: a.peers() and b.peers())
            seqs = [(await b.send_chat(a.identity.peer_id, f"m{i}"))[0] for i in range(20)]
            assert seqs == sorted(seqs) and len(set(seqs)) == 20
            hooks = a.callbacks
            assert isinstance(hooks, Hooks)
            assert [text for _, text, _ in hooks.messages] == [f"m{i}" for i in range(20)]
            assert await a.ping(b.identity.peer_id) < 500
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_provider_is_found_through_its_dht_provider_record() -> None:
    """The DHT path: the provider record is stored under the channel's CID (the multihash
    bytes, as Go and js servers expect) and a lookup from another node finds the provider."""

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            a = service()
            await nursery.start(a.run)
            b = service(a.listen_addrs())
            await nursery.start(b.run)
            await wait_until(lambda: b.peers())
            key = adverts.provider_key("ch")
            found: set[str] = set()
            with trio.fail_after(20):
                while a.identity.peer_id not in found:
                    found = {str(p.peer_id) for p in await b.dht.find_providers(key)}
                    await trio.sleep(0.1)
            multihash = bytes([0x12, 0x20]) + bytes.fromhex(wire.channel_digest("providers/ch"))
            assert multihash in a.dht.provider_store.providers
            nursery.cancel_scope.cancel()

    trio.run(main)
