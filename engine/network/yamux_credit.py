"""py-libp2p's yamux with go-yamux's receive-window credit: a WINDOW_UPDATE once half the
window has been read, not one after every read.

py-libp2p 0.8.1's ``YamuxStream._auto_tune_and_send_window_update`` credits the sender for
every read that returns data (its ``partial_slack`` branch over-credits one read, its
``RELEASE_ON_READ`` branch the next; ``PY_YAMUX_RELEASE_ON_READ=0`` turns off only the
second: 200 small round trips sent 204 updates each way, 106 with it). In a request/response
exchange of small messages (a tunnelled HTTP request, a job's Update) that is one more frame
per message each way: encrypted, written and awaited inside ``read()`` before the data is
returned, so on the round trip's critical path, and read, decrypted and handled by the
peer's connection task. A forwarded round trip crosses four such reads (each daemon reads
the request or the answer off its stream); the updates were 0.6-0.9 ms of each daemon's CPU
per round trip (bench/tunnel.py, A/B on a loaded machine).

go-yamux (``sendWindowUpdate``) sends an update only once the bytes read but not yet
credited reach half the window; py-libp2p's own method does exactly that when called with
``bytes_read=0`` (its "full grow" branch, autotuning included), which is all the override
does. Flow control still holds: a sender with no credit left has a full window outstanding,
so either its bytes are buffered here (the next read credits them, being at least half the
window) or they were read and credited already. It also bounds what a peer can make us
buffer: py-libp2p's per-read credit (with either setting) over-credits and autotunes the
window up after a single small read, so a sender could push 1 MiB at a reader that read
1000 bytes and stopped; here it stops at the 256 KiB window (tests/engine/test_tunnel_yamux.py).

py-libp2p has no factory for its stream class (``Yamux.open_stream`` and
``handle_incoming`` construct ``YamuxStream`` by name), and its muxer negotiation builds
``Yamux`` by name too (``MuxerMultistream.new_conn`` ignores the class in ``muxer_opt`` for
``/yamux/1.0.0``). So ``install`` replaces the host's muxer negotiation with one that gives
each new yamux connection a stream table that turns each stream registered in it into a
HalfWindowCreditStream. tests/engine/test_tunnel_yamux.py fails if a py-libp2p upgrade bypasses
either.

The window is also enforced on what arrives. An honest sender stops at it, but a hostile one
need not: py-libp2p 0.8.1 logs "peer exceeded receive window", sets the window to 0 and keeps
the bytes, so a peer writing raw DATA frames into a stream we are not reading made us buffer
without end (tests/adversarial/test_yamux_window.py: 64 MiB pushed, 65 MB more RSS). As
go-yamux does (``ErrRecvWindowExceeded`` ends the session), a stream that goes past its
window drops what it buffered, is reset, and the connection is closed with a protocol error.
A frame is read whole before its stream sees it, and py-libp2p accepts DATA frames of up to
16 MiB (22 MB more RSS in the same test), so a frame announcing more than the connection
has credited closes the connection before its body is read: MAX_DATA_FRAME (the 256 KiB
window every stream starts with), or the largest window a stream of it has grown to by being
read fast (py-libp2p doubles a stream's window up to 16 MiB, as go-yamux does). go-yamux and
py-libp2p split writes at 64 KiB; js-yamux 8 (@chainsafe/libp2p-yamux) writes a frame as large
as its credit: 524,276 bytes measured, a Helia peer sending a bitswap message of 2.5 MB
(tests/interop/test_bitswap_interop.py), which the old fixed 256 KiB bound refused.

A write that finds no send window waits for credit as long as the stream's protocol allows.
py-libp2p 0.8.1's ``write`` gives up after 5 s without credit and the stream is reset (go-yamux
and js-yamux wait): a tunnel died whenever its local client stopped reading for 5 s (Ctrl-S
in a shell, a slow download). A protocol that ends its idle streams itself says how long with
``wait_for_credit_up_to`` (a tunnel: its idle timeout, which then ends the stream with its
reason, "idle"); the wait is woken by the credit itself, not by polling every 10 ms. Streams
whose protocol says nothing (gossipsub, kad, identify) keep py-libp2p's 5 s: a peer that never
credits cannot hold their writers, nor what they would buffer, for longer.
"""

from __future__ import annotations

import contextlib
import logging
import struct
from typing import Any

import trio
from libp2p.abc import IMuxedConn, ISecureConn
from libp2p.io.exceptions import IncompleteReadError
from libp2p.peer.id import ID
from libp2p.stream_muxer.exceptions import MuxedStreamError
from libp2p.stream_muxer.muxer_multistream import MuxerMultistream
from libp2p.stream_muxer.yamux.yamux import (
    GO_AWAY_PROTOCOL_ERROR,
    HEADER_SIZE,
    MAX_MESSAGE_SIZE,
    TYPE_DATA,
    YAMUX_HEADER_FORMAT,
    Yamux,
    YamuxStream,
)

log = logging.getLogger("nunet.network.yamux")

MAX_DATA_FRAME = 4 * MAX_MESSAGE_SIZE  # 256 KiB: the most a DATA frame may announce
# How long a write waits for window credit where the stream's protocol set nothing longer:
# py-libp2p's own bound, for protocols with no idle timeout of their own.
CREDIT_WAIT_S = 5.0
# A waiting writer also looks this often whether its stream was closed or reset (neither
# wakes it): a stream closed under it ends its write this soon.
_CLOSED_POLL_S = 0.25


class HalfWindowCreditStream(YamuxStream):
    """A yamux stream that credits its sender once half its receive window is consumed, and
    whose writes wait for credit up to ``credit_wait_s``."""

    credit_wait_s: float = CREDIT_WAIT_S  # an instance's own (wait_for_credit_up_to) wins

    async def _auto_tune_and_send_window_update(self, *, bytes_read: int = 0) -> None:
        # The credit owed is computed from the window and the buffer, not from bytes_read.
        await super()._auto_tune_and_send_window_update(bytes_read=0)

    # Every change to the receive window goes through here: py-libp2p subtracts each DATA
    # frame's length as it arrives, so a negative value is a peer past the credit it had.
    # The value lives in the instance's __dict__, where YamuxStream.__init__ put it.
    @property
    def recv_window(self) -> int:
        return int(self.__dict__["recv_window"])

    @recv_window.setter
    def recv_window(self, value: int) -> None:
        if value < 0:
            self._window_exceeded(-value)
            value = 0
        self.__dict__["recv_window"] = value

    # py-libp2p adds the peer's credit here (WINDOW_UPDATE, or a SYN/ACK's); a writer waiting
    # for it is woken at once.
    @property
    def send_window(self) -> int:
        return int(self.__dict__["send_window"])

    @send_window.setter
    def send_window(self, value: int) -> None:
        grew = value > self.__dict__.get("send_window", 0)
        self.__dict__["send_window"] = value
        credited: trio.Event | None = self.__dict__.get("_nunet_credited")
        if grew and credited is not None:
            credited.set()

    async def write(self, data: bytes) -> None:
        """py-libp2p's ``write`` (at most the window, in frames of MAX_MESSAGE_SIZE), with
        ``_wait_for_credit`` where it gave up after 5 s."""
        if self.send_closed:
            raise MuxedStreamError("Stream is closed for sending")
        sent = 0
        while sent < len(data):
            frame: bytes | None = None
            async with self.rw_lock.write_lock():
                if self.send_closed:
                    raise MuxedStreamError("Stream is closed for sending")
                async with self.window_lock:
                    if self.closed:
                        raise MuxedStreamError("Stream is closed")
                    if self.send_window > 0:
                        size = min(
                            self.send_window, MAX_MESSAGE_SIZE - HEADER_SIZE, len(data) - sent
                        )
                        self.send_window -= size
                        header = struct.pack(
                            YAMUX_HEADER_FORMAT, 0, TYPE_DATA, 0, self.stream_id, size
                        )
                        frame = header + data[sent : sent + size]
            if frame is None:
                await self._wait_for_credit()
                continue
            # Written outside the locks, as py-libp2p does: a WINDOW_UPDATE must get through.
            await self.conn._write_frame(frame)
            sent += len(frame) - HEADER_SIZE

    async def _wait_for_credit(self) -> None:
        """Until the peer credits us or the stream closes; a peer that gives no credit for
        ``credit_wait_s`` ends the write with an error (the caller resets the stream)."""
        wait_s = self.credit_wait_s
        deadline = trio.current_time() + wait_s
        while self.send_window <= 0 and not self.closed:
            left = deadline - trio.current_time()
            if left <= 0:
                why = f"the peer gave no window credit for {wait_s:g} s"
                log.info("stream %d to %s: %s", self.stream_id, self.conn.peer_id, why)
                raise MuxedStreamError(why)
            credited = self.__dict__["_nunet_credited"] = trio.Event()
            with trio.move_on_after(min(left, _CLOSED_POLL_S)):
                await credited.wait()
        # A closed stream: the next round of write() raises py-libp2p's own error.

    def _window_exceeded(self, excess: int) -> None:
        """Drop what the stream holds, reset it, and close the connection (once)."""
        buffer = self.conn.stream_buffers.get(self.stream_id)
        if buffer is not None:
            buffer.clear()
        # The reader sees a reset; handle_incoming then drops the stream's bookkeeping
        # (it is closed with nothing buffered), and later frames for it are discarded.
        self.reset_received = self.recv_closed = self.send_closed = self.closed = True
        conn = self.conn
        if getattr(conn, "_nunet_window_exceeded", False):
            return
        conn._nunet_window_exceeded = True  # type: ignore[attr-defined]
        log.warning(
            "peer %s sent %d bytes past stream %d's receive window: closing the connection",
            conn.peer_id,
            excess,
            self.stream_id,
        )
        # Called synchronously from the muxer's read loop: the close (GO_AWAY, then the
        # secured connection) runs as its own task. A system task must not raise.
        trio.lowlevel.spawn_system_task(_close_quietly, conn)


async def _close_quietly(conn: Yamux) -> None:
    with contextlib.suppress(Exception):
        await conn.close(GO_AWAY_PROTOCOL_ERROR)


class BoundedFrameYamux(Yamux):
    """A yamux connection that refuses, unread, a DATA frame longer than any window it has
    credited (at least MAX_DATA_FRAME)."""

    async def _read_data_body(self, length: int) -> bytes:
        credited = max(
            (getattr(s, "target_recv_window", 0) for s in list(self.streams.values())),
            default=0,
        )
        if length > max(MAX_DATA_FRAME, credited):
            log.warning(
                "peer %s announced a %d-byte DATA frame (at most %d): closing the connection",
                self.peer_id,
                length,
                max(MAX_DATA_FRAME, credited),
            )
            # handle_incoming calls us outside its stream lock, which close() takes; the
            # error then ends that frame's stream, and the loop ends with the connection.
            await _close_quietly(self)
            raise IncompleteReadError("DATA frame too long", expected_bytes=length)
        return await super()._read_data_body(length)


class _StreamTable(dict[int, YamuxStream]):
    """``Yamux.streams``: every stream registered in it is given HalfWindowCreditStream's
    methods (the same instance layout: only the methods differ)."""

    def __setitem__(self, stream_id: int, stream: YamuxStream) -> None:
        if type(stream) is YamuxStream:
            stream.__class__ = HalfWindowCreditStream
        super().__setitem__(stream_id, stream)


class _CreditMuxerMultistream(MuxerMultistream):
    """py-libp2p's muxer negotiation; a yamux connection it makes gets our stream table."""

    async def new_conn(self, conn: ISecureConn, peer_id: ID) -> IMuxedConn:
        muxed = await super().new_conn(conn, peer_id)
        if isinstance(muxed, Yamux):
            if muxed.streams:  # not started yet: nothing can be registered before us
                raise RuntimeError("py-libp2p registered yamux streams before the upgrade")
            muxed.streams = _StreamTable()
            muxed.__class__ = BoundedFrameYamux  # the same instance layout: one more check
        return muxed


def install(host: Any) -> None:
    """Give every yamux connection ``host`` makes from now on HalfWindowCreditStreams."""
    upgrader = host.get_network().upgrader
    current = upgrader.muxer_multistream
    if isinstance(current, _CreditMuxerMultistream):
        return
    upgrader.muxer_multistream = _CreditMuxerMultistream(
        current.transports, current.negotiate_timeout
    )
