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
1000 bytes and stopped; here it stops at the 256 KiB window (tests/test_tunnel_yamux.py).

py-libp2p has no factory for its stream class (``Yamux.open_stream`` and
``handle_incoming`` construct ``YamuxStream`` by name), and its muxer negotiation builds
``Yamux`` by name too (``MuxerMultistream.new_conn`` ignores the class in ``muxer_opt`` for
``/yamux/1.0.0``). So ``install`` replaces the host's muxer negotiation with one that gives
each new yamux connection a stream table that turns each stream registered in it into a
HalfWindowCreditStream. tests/test_tunnel_yamux.py fails if a py-libp2p upgrade bypasses
either.
"""

from __future__ import annotations

from typing import Any

from libp2p.abc import IMuxedConn, ISecureConn
from libp2p.peer.id import ID
from libp2p.stream_muxer.muxer_multistream import MuxerMultistream
from libp2p.stream_muxer.yamux.yamux import Yamux, YamuxStream


class HalfWindowCreditStream(YamuxStream):
    """A yamux stream that credits its sender once half its receive window is consumed."""

    async def _auto_tune_and_send_window_update(self, *, bytes_read: int = 0) -> None:
        # The credit owed is computed from the window and the buffer, not from bytes_read.
        await super()._auto_tune_and_send_window_update(bytes_read=0)


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
