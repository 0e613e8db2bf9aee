"""A stranger's first bytes announce a huge multistream-select message.

multistream-select is read before anything else: on a new TCP connection before Noise (so
before any peer id, and before every per-peer cap), and on every new yamux stream before a
protocol is chosen. py-libp2p 0.8.1 read a message of whatever length its varint prefix
claimed, ended only by ``read_exactly``'s 101 reads: one raw TCP connection announcing
1 GiB made a daemon take 130-220 MB within half a second, four at once about four times
that, and streams inside a connection did the same through the yamux window. Now a message
longer than a protocol id (1,024 bytes and its newline) is refused at its length prefix
(engine/network/libp2p_guards.py, ``bound_multistream_messages``).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import trio
from libp2p.utils.varint import encode_uvarint

from engine.network.host import peer_id_of
from tests.adversarial.hostile import HostilePeer
from tests.adversarial.test_stream_exhaustion import RssWatch
from tests.daemon_harness import Daemon, wait_for

ANNOUNCED = 1 << 30
CONNECTIONS = 4
STREAMS = 16
FLOOD_S = 3.0
# Allowed growth while attacked (socket buffers, one window per stream, logging). Before the
# fix a single connection cost 130-220 MB.
RSS_GROWTH_LIMIT_MB = 30.0


def _flood_tcp(host: str, port: int, until: float, sent: list[int]) -> None:
    chunk = b"a" * (1 << 20)
    total = 0
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=5) as s:
        s.sendall(encode_uvarint(ANNOUNCED))
        while time.monotonic() < until:
            s.sendall(chunk)
            total += len(chunk)
    sent.append(total)


def test_raw_connections_announcing_a_huge_first_message_are_refused_at_once(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    victim = daemons("victim", 82)
    host, port = victim.addrs()[0].split("/")[2], int(victim.addrs()[0].split("/")[4])
    watch = RssWatch(victim.proc.pid)
    before = watch.peak
    sent: list[int] = []
    until = time.monotonic() + FLOOD_S
    threads = [
        threading.Thread(target=_flood_tcp, args=(host, port, until, sent))
        for _ in range(CONNECTIONS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(FLOOD_S + 15)
    growth = watch.stop() - before
    assert len(sent) == CONNECTIONS
    # Refused at the prefix: each connection was reset long before FLOOD_S of writing
    # (a few MB of socket buffers went out, not the hundreds it took before).
    assert max(sent) < 64 << 20, sent
    assert growth < RSS_GROWTH_LIMIT_MB, f"RSS grew by {growth:.1f} MB"
    # The victim still serves a peer that follows the protocol.
    peer = hostile(seed=b"\x53" * 32, bootstrap=victim.addrs())
    peer.wait_connected(victim.peer_id)
    assert victim.cli("chat", "send", peer.peer_id, "still here")["status"] == "delivered"


def test_streams_announcing_a_huge_protocol_id_are_reset_and_memory_stays_bounded(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    victim = daemons("victim", 83)
    peer = hostile(seed=b"\x54" * 32, bootstrap=victim.addrs())
    peer.wait_connected(victim.peer_id)
    watch = RssWatch(victim.proc.pid)
    before = watch.peak

    async def flood() -> list[str]:
        conn = peer.host.get_network().get_connections(peer_id_of(victim.peer_id))[0]
        ended: list[str] = []

        async def one() -> None:
            stream = await conn.muxed_conn.open_stream()  # muxer stream, nothing negotiated
            try:
                await stream.write(encode_uvarint(ANNOUNCED))
                with trio.move_on_after(FLOOD_S):
                    while True:
                        await stream.write(b"b" * (1 << 16))
                ended.append("still open")
            except Exception as exc:
                ended.append(type(exc).__name__)

        async with trio.open_nursery() as nursery:
            for _ in range(STREAMS):
                nursery.start_soon(one)
        return ended

    ended: list[Any] = peer.call(flood)
    growth = watch.stop() - before
    assert len(ended) == STREAMS and "still open" not in ended, ended
    assert growth < RSS_GROWTH_LIMIT_MB, f"RSS grew by {growth:.1f} MB"
    # The connection itself is fine: the same peer chats on it.
    assert victim.cli("chat", "send", peer.peer_id, "still here")["status"] == "delivered"
    wait_for(lambda: victim.cli("peer", "self")["peer_id"], "the victim stopped answering")
