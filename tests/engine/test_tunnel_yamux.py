"""The hosts' yamux credits a stream's sender once half its window is read (yamux_credit.py).

Two real py-libp2p hosts as the node builds them (host.build_host: TCP, Noise, our yamux) on
127.0.0.1 in one trio run; every frame each connection writes is recorded. A tunnel's small
request/response round trips send no WINDOW_UPDATE (py-libp2p's own stream sent one per read
each way); bulk transfers still get their credit, and a reader that stops reading still
stops its sender at the window. A sender that ignores the window, or announces a frame
longer than any yamux writes, loses its connection.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio
from libp2p.custom_types import TProtocol
from libp2p.stream_muxer.yamux.yamux import (
    DEFAULT_WINDOW_SIZE,
    HEADER_SIZE,
    TYPE_DATA,
    TYPE_WINDOW_UPDATE,
    YAMUX_HEADER_FORMAT,
    YamuxStream,
)
from nacl.signing import SigningKey

from engine.identity import Identity
from engine.network import host as hostmod
from engine.network.yamux_credit import (
    CREDIT_WAIT_S,
    MAX_DATA_FRAME,
    BoundedFrameYamux,
    HalfWindowCreditStream,
)
from engine.ports import wait_for_credit_up_to

PROTOCOL = TProtocol("/nunet/test/yamux-credit/1.0.0")
LISTEN = ["/ip4/127.0.0.1/tcp/0"]
FLAGS_SYN_ACK_FIN_RST = 0xF


class Frames:
    """The frames one yamux connection wrote: (type, flags, stream id, length)."""

    def __init__(self, conn: Any) -> None:
        self.sent: list[tuple[int, int, int, int]] = []
        write = conn._write_frame

        async def recording(data: bytes) -> None:
            self.sent.append(struct.unpack(YAMUX_HEADER_FORMAT, data[:HEADER_SIZE])[1:])
            await write(data)

        conn._write_frame = recording

    def credits(self, stream_id: int) -> list[int]:
        """The window updates sent for ``stream_id`` (not its SYN, ACK, FIN or RST)."""
        return [
            length
            for kind, flags, sid, length in self.sent
            if kind == TYPE_WINDOW_UPDATE and sid == stream_id and not flags & FLAGS_SYN_ACK_FIN_RST
        ]

    def data(self, stream_id: int) -> int:
        return sum(n for kind, _, sid, n in self.sent if kind == TYPE_DATA and sid == stream_id)


@asynccontextmanager
async def connected_pair(
    handler: Callable[[Any], Awaitable[None]],
) -> AsyncIterator[tuple[Any, Frames, Frames]]:
    """A stream from one host to the other, whose handler is ``handler``; the frames each
    side's connection writes."""
    dialer = hostmod.build_host(Identity(SigningKey.generate()), LISTEN)
    listener = hostmod.build_host(Identity(SigningKey.generate()), LISTEN)
    listener.set_stream_handler(PROTOCOL, handler)
    async with (
        listener.run(hostmod.listen_multiaddrs(LISTEN)),
        dialer.run(hostmod.listen_multiaddrs(LISTEN)),
    ):
        address = hostmod.our_addrs(listener)[0]
        await hostmod.connect(dialer, hostmod.parse_peer_addr(address))
        (dialer_conn,) = dialer.get_network().connections[listener.get_id()]
        (listener_conn,) = listener.get_network().connections[dialer.get_id()]
        ours, theirs = Frames(dialer_conn.muxed_conn), Frames(listener_conn.muxed_conn)
        stream = await dialer.new_stream(listener.get_id(), [PROTOCOL])
        try:
            yield stream, ours, theirs
        finally:
            await stream.reset()
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await dialer.close()
                await listener.close()


async def read_exactly(stream: Any, n: int, piece: int = 1 << 16) -> bytes:
    got = bytearray()
    while len(got) < n:
        got += await stream.read(min(piece, n - len(got)))
    return bytes(got)


def test_round_trips_of_small_messages_send_no_window_update() -> None:
    kinds: list[type] = []

    async def echo(stream: Any) -> None:
        kinds.append(type(stream.muxed_stream))
        with contextlib.suppress(Exception):  # until the dialer resets the stream
            while True:
                await stream.write(await stream.read(1 << 16))

    async def main() -> None:
        with trio.fail_after(60):
            await exchange()

    async def exchange() -> None:
        async with connected_pair(echo) as (stream, ours, theirs):
            kinds.append(type(stream.muxed_stream))
            for i in range(200):
                request = b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % i
                await stream.write(request)
                assert await read_exactly(stream, len(request)) == request
            sid = stream.muxed_stream.stream_id
            # Each side read 200 messages: py-libp2p's own stream credits each read (400).
            assert ours.credits(sid) == []
            assert theirs.credits(sid) == []
            assert ours.data(sid) == theirs.data(sid) > 200 * 28

    trio.run(main)
    # Both ends of the stream, the one opened and the one accepted, are ours.
    assert kinds == [HalfWindowCreditStream, HalfWindowCreditStream]
    assert issubclass(HalfWindowCreditStream, YamuxStream)


def test_a_bulk_transfer_is_credited_every_half_window_and_arrives_whole() -> None:
    size = 4 << 20
    body = bytes(range(256)) * (size // 256)
    received: list[bytes] = []

    async def sink(stream: Any) -> None:
        # Small reads, as a relay's reads of a slow consumer: the credit adds them up.
        received.append(await read_exactly(stream, size, piece=3000))
        await stream.write(b"done")

    async def main() -> None:
        async with connected_pair(sink) as (stream, _ours, theirs):
            with trio.fail_after(60):
                await stream.write(body)
                assert await read_exactly(stream, 4) == b"done"
            credits = theirs.credits(stream.muxed_stream.stream_id)
            # Every credit is at least half the (default) window: never one per 3000-byte
            # read, and enough of them to carry 4 MiB through a 256 KiB window.
            assert credits and min(credits) >= DEFAULT_WINDOW_SIZE // 2
            assert DEFAULT_WINDOW_SIZE + sum(credits) >= size
            assert len(credits) <= size // (DEFAULT_WINDOW_SIZE // 2)

    trio.run(main)
    assert received == [body]


def test_a_reader_that_stops_reading_stops_its_sender_at_the_window() -> None:
    release = trio.Event()
    got: list[int] = []

    async def slow(stream: Any) -> None:
        await stream.read(1000)  # a first read: credit must not follow it
        await release.wait()
        got.append(1000 + len(await read_exactly(stream, (1 << 20) - 1000)))

    async def main() -> None:
        async with connected_pair(slow) as (stream, ours, _theirs):
            sid = stream.muxed_stream.stream_id
            written = trio.Event()

            async def send() -> None:
                await stream.write(b"x" * (1 << 20))
                written.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                # The sender runs out of credit: a full window sent, the rest held back
                # (a writer with no wait set gives up after 5 s without credit, as
                # py-libp2p's did: read before that).
                # The reader is parked, so no credit can be on its way.
                with trio.fail_after(4):
                    while stream.muxed_stream.send_window > 0:
                        await trio.sleep(0.01)
                assert ours.data(sid) == DEFAULT_WINDOW_SIZE
                assert not written.is_set()
                release.set()
                with trio.fail_after(20):
                    await written.wait()
            with trio.fail_after(10):
                while not got:
                    await trio.sleep(0.01)

    trio.run(main)
    assert got == [1 << 20]


async def push_past_the_window(stream: Any, total: int, piece: int = 60_000) -> int:
    """Write raw DATA frames for ``stream``'s id, ignoring its send window (a hostile
    sender); the bytes written before the connection went away."""
    conn, sid = stream.muxed_stream.conn, stream.muxed_stream.stream_id
    chunk = b"x" * piece
    sent = 0
    with contextlib.suppress(Exception):  # the receiver closes the connection under us
        while sent < total:
            header = struct.pack(YAMUX_HEADER_FORMAT, 0, TYPE_DATA, 0, sid, len(chunk))
            await conn._write_frame(header + chunk)
            sent += len(chunk)
    return sent


def test_a_sender_past_the_window_is_reset_and_its_connection_closed() -> None:
    parked = trio.Event()
    outcome: list[str] = []
    conns: list[Any] = []

    async def never_reads(stream: Any) -> None:
        conns.append(stream.muxed_stream.conn)
        await stream.read(1000)
        parked.set()
        await trio.sleep(1)  # not reading: whatever arrives now must wait in the buffer
        try:
            await stream.read(1 << 20)
            outcome.append("read")
        except Exception as exc:
            outcome.append(type(exc).__name__)

    async def main() -> None:
        async with connected_pair(never_reads) as (stream, _ours, _theirs):
            await stream.write(b"y" * 1000)
            with trio.fail_after(10):
                await parked.wait()
            sent = await push_past_the_window(stream, 8 << 20)
            (conn,) = conns
            with trio.fail_after(10):
                await conn.event_closed.wait()
            # The receiver held at most a window before it gave up on the peer.
            assert not any(conn.stream_buffers.values())
            assert sent < 8 << 20 or conn.event_shutting_down.is_set()
            with trio.fail_after(10):
                while not outcome:
                    await trio.sleep(0.01)

    trio.run(main)
    assert outcome and outcome[0] != "read", outcome


def test_a_data_frame_longer_than_the_limit_closes_the_connection_unread() -> None:
    conns: list[Any] = []
    reads: list[int] = []

    async def handler(stream: Any) -> None:
        conns.append(stream.muxed_stream.conn)
        with contextlib.suppress(Exception):
            while True:
                reads.append(len(await stream.read(1 << 20)))

    async def main() -> None:
        async with connected_pair(handler) as (stream, _ours, _theirs):
            await stream.write(b"hello")
            with trio.fail_after(10):
                while not conns:
                    await trio.sleep(0.01)
            (conn,) = conns
            # One frame announcing 1 MiB: py-libp2p would read it whole (up to 16 MiB).
            body = 1 << 20
            assert body > MAX_DATA_FRAME
            sid = stream.muxed_stream.stream_id
            header = struct.pack(YAMUX_HEADER_FORMAT, 0, TYPE_DATA, 0, sid, body)
            with contextlib.suppress(Exception):
                await stream.muxed_stream.conn._write_frame(header + b"z" * body)
            with trio.fail_after(10):
                await conn.event_closed.wait()
            assert type(conn) is BoundedFrameYamux

    trio.run(main)
    assert sum(reads) == 5  # "hello", and nothing of the long frame


def test_a_writer_waits_for_credit_as_long_as_its_protocol_allows_and_no_longer() -> None:
    """py-libp2p's write gave up after 5 s without credit; ours waits what the stream's
    protocol set (a tunnel: its idle timeout), is woken by the credit, and still ends a
    write the peer never credits, with the reason."""
    release = trio.Event()
    got: list[int] = []

    async def paused(stream: Any) -> None:
        await release.wait()
        got.append(len(await read_exactly(stream, 1 << 20)))

    async def write_until_stalled(stream: Any, outcome: list[str]) -> None:
        try:
            await stream.write(b"x" * (1 << 20))
            outcome.append("written")
        except Exception as exc:  # py-libp2p's StreamReset, from our error
            outcome.append(str(exc.__cause__ or exc))

    async def main() -> None:
        async with connected_pair(paused) as (stream, _ours, _theirs):
            assert stream.muxed_stream.credit_wait_s == CREDIT_WAIT_S  # no protocol's say
            wait_for_credit_up_to(stream, 60.0)
            outcome: list[str] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(write_until_stalled, stream, outcome)
                await trio.sleep(CREDIT_WAIT_S + 2)  # past py-libp2p's give-up
                assert outcome == [] and stream.muxed_stream.send_window == 0
                release.set()
            assert outcome == ["written"]
        with trio.fail_after(10):
            while not got:
                await trio.sleep(0.01)

        # A peer that never credits: the write ends at the stream's own bound.
        async with connected_pair(lambda s: trio.sleep_forever()) as (stream, _ours, _theirs):
            wait_for_credit_up_to(stream, 1.0)
            outcome = []
            with trio.fail_after(30):
                await write_until_stalled(stream, outcome)
            assert outcome == ["the peer gave no window credit for 1 s"]

    trio.run(main)
    assert got == [1 << 20]
