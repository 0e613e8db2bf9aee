"""The DHT's stores are bounded where py-libp2p writes them (engine/network/dht_bounds.py).

Real hosts: a peer sends PUT_VALUE and ADD_PROVIDER requests to a node whose quota per
address is 3. This fails if a py-libp2p upgrade stores past our layer: a handler that no
longer reads through the gated reader, or stores without ``put_record``/``add_provider``, or
stores that replace the tables we keep the book of.
"""

from __future__ import annotations

import os
from typing import Any

import trio
import varint
from libp2p.custom_types import TProtocol
from libp2p.kad_dht.common import PROTOCOL_ID
from libp2p.kad_dht.pb.kademlia_pb2 import Message
from libp2p.utils.varint import read_varint_prefixed_bytes_limited
from nacl.signing import SigningKey

from engine.config import NetworkSettings
from engine.identity import Identity
from engine.network.dht_bounds import BoundedProviderStore, BoundedValueStore
from engine.network.service import NetworkService
from tests.adversarial.dht_flooder import fake_advert
from tests.engine.test_network_service import Hooks, wait_until

QUOTA = 3


def node(channel: str | None, bootstrap: list[str] | None = None) -> NetworkService:
    settings = NetworkSettings(
        listen=["/ip4/127.0.0.1/tcp/0"],
        bootstrap=bootstrap or [],
        heartbeat_interval_s=0.5,
        dht_records_per_ip=QUOTA,
        dht_records_per_subnet=QUOTA,
    )
    return NetworkService(Identity(SigningKey.generate()), settings, channel, Hooks())


async def ask(host: Any, target: Any, message: Message) -> Message | None:
    stream = await host.new_stream(target, [TProtocol(PROTOCOL_ID)])
    try:
        data = message.SerializeToString()
        await stream.write(varint.encode(len(data)) + data)
        answer = Message()
        answer.ParseFromString(await read_varint_prefixed_bytes_limited(stream, 1 << 20))
        return answer
    except Exception:
        return None  # refused: the stream was ended without an answer
    finally:
        await stream.reset()


def test_writes_past_the_senders_quota_are_refused_unread_and_the_book_follows_the_store() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            victim = node(None)  # no advert of its own: the store holds what the test sends
            await nursery.start(victim.run)
            # No channel: the writer publishes no advert of its own, only what the test sends.
            writer = node(None, victim.listen_addrs())
            await nursery.start(writer.run)
            await wait_until(lambda: victim.connected_peers() and writer.connected_peers())
            values = victim.dht.value_store
            providers = victim.dht.provider_store
            assert isinstance(values, BoundedValueStore)
            assert isinstance(providers, BoundedProviderStore)
            target = victim.host.get_id()
            acked = 0
            keys = []
            for _ in range(QUOTA + 3):
                key, value = fake_advert("ch", "127.0.0.1")
                keys.append(key)
                message = Message(type=Message.MessageType.PUT_VALUE, key=key)
                message.record.key = key
                message.record.value = value
                answer = await ask(writer.host, target, message)
                acked += answer is not None and answer.type == Message.MessageType.PUT_VALUE
            assert acked == QUOTA
            assert len(values.store) == QUOTA == values.book.records
            assert values.book.held("a 127.0.0.1") == QUOTA
            assert victim.dht.refused_requests == 3
            # However py-libp2p removes a record, the book follows.
            values.remove(keys[0])
            assert len(values.store) == values.book.records
            # Provider records: the same quota, and at most 8 addresses kept of each.
            provided = 0
            for _ in range(QUOTA + 2):
                message = Message(type=Message.MessageType.ADD_PROVIDER, key=os.urandom(34))
                peer = message.providerPeers.add()
                peer.id = writer.host.get_id().to_bytes()
                peer.addrs.extend(b"\x04" + os.urandom(4) + b"\x06\x10\x00" for _ in range(32))
                answer = await ask(writer.host, target, message)
                provided += answer is not None and answer.type == Message.MessageType.ADD_PROVIDER
            assert provided == QUOTA
            held = [r for holders in providers.providers.values() for r in holders.values()]
            assert all(len(r.addresses) <= 8 for r in held)
            assert providers.book.held("p " + str(writer.host.get_id())) == QUOTA
            providers.cleanup_expired()
            nursery.cancel_scope.cancel()

    trio.run(main)
