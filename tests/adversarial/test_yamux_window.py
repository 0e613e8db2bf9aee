"""A peer that ignores yamux flow control: it writes raw DATA frames into a stream, far past
the receive window the victim gave it, while the victim's handler is not reading.

Before the fix py-libp2p 0.8.1 logged "peer exceeded receive window", set the window to 0
and kept every byte: 64 MiB in 60 kB frames pushed into one stream of a real daemon cost it
65 MB of RSS, and nothing stopped the peer from going on. With only the window enforced,
16 MiB frames (py-libp2p reads up to that much before any stream sees it) still cost 22 MB.
Now a stream past its window is reset, what it held is dropped and the connection is closed
with a protocol error, as go-yamux does, and a frame announcing more than 256 KiB closes it
unread; the victim's RSS does not move (0.0 MB in both) and it still serves an honest peer
(engine/network/yamux_credit.py).
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable

import pytest
import trio
from libp2p.stream_muxer.yamux.yamux import MAX_WINDOW_SIZE, TYPE_DATA, YAMUX_HEADER_FORMAT

from tests.adversarial.hostile import HostilePeer
from tests.adversarial.test_stream_exhaustion import RssWatch
from tests.daemon_harness import Daemon, wait_for

PUSHED = 64 << 20
PIECE = 60_000
# Growth allowed while attacked: one window (256 KiB) and one frame in flight, plus what a
# busy trio loop and its logging allocate. Before the fix it grew by about PUSHED.
RSS_GROWTH_LIMIT_MB = 16.0
IDENTIFY = "/ipfs/id/1.0.0"  # the victim writes its answer and never reads the stream again


@pytest.mark.parametrize(
    ("piece", "frames"),
    [(PIECE, PUSHED // PIECE + 1), (MAX_WINDOW_SIZE, 4)],
    ids=["many-frames", "16-MiB-frames"],
)
def test_a_peer_writing_past_its_stream_window_is_cut_off_and_memory_stays_bounded(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer], piece: int, frames: int
) -> None:
    victim = daemons("victim", 81)
    peer = hostile(seed=b"\x52" * 32, bootstrap=victim.addrs())
    peer.wait_connected(victim.peer_id)
    stream = peer.open(victim.peer_id, IDENTIFY).stream
    watch = RssWatch(victim.proc.pid)

    async def flood() -> tuple[int, bool]:
        conn, sid = stream.muxed_stream.conn, stream.muxed_stream.stream_id
        chunk = b"x" * piece
        sent = 0
        with contextlib.suppress(Exception):  # the victim closes the connection under us
            for _ in range(frames):
                if conn.event_shutting_down.is_set():
                    break
                header = struct.pack(YAMUX_HEADER_FORMAT, 0, TYPE_DATA, 0, sid, piece)
                await conn._write_frame(header + chunk)
                sent += piece
        # The GO_AWAY, or the socket closing, reaches us.
        with trio.move_on_after(20):
            await conn.event_closed.wait()
        return sent, conn.event_closed.is_set()

    before = watch.peak
    sent, closed = peer.call(flood)
    growth = watch.stop() - before
    # Cut off: the victim closed that connection long before all of it was through. (The
    # peer's bootstrap loop dials the victim again at once: a new connection, welcome as
    # long as it follows the rules.)
    assert closed, "the victim kept the connection of the peer that ignored its window"
    assert sent < piece * frames, f"the victim took all {sent} bytes"
    assert growth < RSS_GROWTH_LIMIT_MB, f"RSS grew by {growth:.1f} MB"
    log = victim.stderr_path.read_text(errors="replace")
    assert "closing the connection" in log
    # The victim still serves: its own address book, and an honest chat (the peer's next
    # connection follows the rules, so it is welcome again).
    assert victim.cli("peer", "self")["peer_id"]
    with contextlib.suppress(Exception):  # already back, through its bootstrap loop
        peer.connect(victim.addrs()[0])
    peer.wait_connected(victim.peer_id)
    # Sent at once it may be queued (the victim has not seen the new connection yet); the
    # victim then delivers it as soon as it does.
    victim.cli("chat", "send", peer.peer_id, "still here")
    wait_for(
        lambda: (
            [m["status"] for m in victim.cli("chat", "history", peer.peer_id)["messages"]]
            == ["delivered"]
        ),
        "the victim never delivered a chat message to the peer that now follows the rules",
        30,
    )
