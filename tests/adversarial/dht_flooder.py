"""Many identities writing into one node's DHT from one source address:
``python -m tests.adversarial.dht_flooder TARGET COUNT SOURCE_IP PUTS CHANNEL [TRAP]``.

Each of COUNT identities connects to TARGET and sends PUTS ``PUT_VALUE`` requests, each a
valid signed advert of a fresh throw-away identity on CHANNEL (what the node's own validator
accepts), one stream per request as py-libp2p's client does, plus ADD_PROVIDER requests for
the channel's provider key and for random keys, each naming TRAP (``ip:port``) 64 times.
Then it asks TARGET (``GET_VALUE``) for a sample of the keys it was told were stored. It
prints, every half second, ``sent S acked A providers P``, and at the end ``done sent S acked
A providers P held H of Q`` (H of the Q keys asked for were still held). A process of its
own: every outbound TCP connection is bound to SOURCE_IP, which must not leak into the test
process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import sys
import time
from typing import Any

import trio
import varint
from libp2p.custom_types import TProtocol
from libp2p.kad_dht.common import PROTOCOL_ID
from libp2p.kad_dht.pb.kademlia_pb2 import Message
from libp2p.utils.varint import read_varint_prefixed_bytes_limited
from multiaddr import Multiaddr
from nacl.signing import SigningKey

from engine.domain import wire
from engine.identity import Identity
from engine.network import adverts
from engine.network.host import build_host, parse_peer_addr

SAMPLE = 200
# Requests in flight per process: py-libp2p's handler serves 12 at once and resets the rest,
# so more would measure its concurrency cap, not what the node stores.
IN_FLIGHT = 8


class Counts:
    trap = b""  # the binary multiaddr every provider record names first
    slots: trio.Semaphore | None = None
    finished = 0  # identities done sending (or that could not connect)
    sent = 0
    acked = 0
    providers = 0
    stored: list[bytes] = []


def fake_advert(channel: str, source: str) -> tuple[bytes, bytes]:
    """(key, value): a valid advert record of a fresh identity naming an address of ours."""
    fake = Identity(SigningKey.generate())
    now = time.time()
    advert = wire.Advert(
        peer_id=fake.peer_id,
        channel=channel,
        cpu_mhz=8000,
        ram_mb=16000,
        disk_mb=50000,
        prices={"low": 0.01, "moderate": 0.02, "high": 0.03},
        executors=("process",),
        addrs=(f"/ip4/{source}/tcp/4001/p2p/{fake.peer_id}",),
        seq=int(now * 1000),
        at=now,
        expires_at=now + 3600,
        version="flood" + "x" * 1024,  # about the size of a real advert
    )
    key = adverts.advert_key(channel, fake.peer_id).encode()
    return key, wire.seal(fake, "advert", advert)


async def request(host: Any, target: Any, message: Message) -> Message | None:
    """One request on its own stream; the answer, or None (refused, reset, timed out)."""
    assert Counts.slots is not None
    stream = None
    answer: Message | None = None
    try:
        async with Counts.slots:
            with trio.fail_after(10):
                stream = await host.new_stream(target, [TProtocol(PROTOCOL_ID)])
                data = message.SerializeToString()
                await stream.write(varint.encode(len(data)) + data)
                answer = Message()
                answer.ParseFromString(await read_varint_prefixed_bytes_limited(stream, 1 << 22))
    except Exception:
        answer = None
    if stream is not None:
        with trio.move_on_after(1), contextlib.suppress(Exception):
            await (stream.close() if answer is not None else stream.reset())
    return answer


async def put(host: Any, target: Any, channel: str, source: str) -> None:
    key, value = fake_advert(channel, source)
    message = Message(type=Message.MessageType.PUT_VALUE, key=key)
    message.record.key = key
    message.record.value = value
    Counts.sent += 1
    answer = await request(host, target, message)
    if answer is not None and answer.type == Message.MessageType.PUT_VALUE:
        Counts.acked += 1
        Counts.stored.append(key)


async def provide(host: Any, target: Any, key: bytes) -> None:
    message = Message(type=Message.MessageType.ADD_PROVIDER, key=key)
    provider = message.providerPeers.add()
    provider.id = host.get_id().to_bytes()
    # Many addresses (py-libp2p kept every one), all the trap's: nodes that looked the key up
    # dialled what the record named.
    provider.addrs.extend([Counts.trap] * 64)
    answer = await request(host, target, message)
    if answer is not None and answer.type == Message.MessageType.ADD_PROVIDER:
        Counts.providers += 1


async def flood(host: Any, target: Any, puts: int, channel: str, source: str) -> None:
    async with host.run(listen_addrs=[]):
        try:
            with trio.fail_after(20):
                await host.connect(target)
        except Exception:
            Counts.finished += 1
            return
        provider_key = bytes.fromhex(_hex_key(adverts.provider_key(channel)))
        await provide(host, target.peer_id, provider_key)
        for n in range(puts):
            await put(host, target.peer_id, channel, source)
            if n % 10 == 0:
                await provide(host, target.peer_id, os.urandom(34))
        Counts.finished += 1
        await trio.sleep_forever()


def _hex_key(cid: str) -> str:
    import base58

    return bytes(base58.b58decode(cid)).hex()


async def held(host: Any, target: Any, keys: list[bytes]) -> int:
    found = 0
    for key in keys:
        answer = await request(host, target, Message(type=Message.MessageType.GET_VALUE, key=key))
        if answer is not None and answer.HasField("record") and answer.record.value:
            found += 1
    return found


async def main(
    target_addr: str, count: int, source: str, puts: int, channel: str, trap: str
) -> None:
    trio.open_tcp_stream = functools.partial(trio.open_tcp_stream, local_address=source)  # type: ignore[assignment]
    target = parse_peer_addr(target_addr)
    Counts.slots = trio.Semaphore(IN_FLIGHT)
    ip, port = trap.rsplit(":", 1)
    Counts.trap = Multiaddr(f"/ip4/{ip}/tcp/{port}").to_bytes()
    hosts = [build_host(Identity(SigningKey.generate()), []) for _ in range(count)]

    def report(prefix: str) -> str:
        return f"{prefix}sent {Counts.sent} acked {Counts.acked} providers {Counts.providers}"

    async with trio.open_nursery() as nursery:
        for host in hosts:
            nursery.start_soon(flood, host, target, puts, channel, source)

        async def progress() -> None:
            while Counts.finished < count:
                print(report(""), flush=True)
                await trio.sleep(0.5)
            await trio.sleep(1.0)  # the last answers
            sample = random.sample(Counts.stored, min(SAMPLE, len(Counts.stored)))
            found = await held(hosts[0], target.peer_id, sample)
            print(report("done ") + f" held {found} of {len(sample)}", flush=True)

        nursery.start_soon(progress)
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    args = sys.argv[1:]
    trap = args[5] if len(args) > 5 else "127.0.0.1:1"
    trio.run(main, args[0], int(args[1]), args[2], int(args[3]), args[4], trap)
