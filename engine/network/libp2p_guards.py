"""Where py-libp2p (0.8.1) lets a stranger's bytes raise into its own tasks: contained here.

Measured with 0.8.1: a 6-byte frame on ``/meshsub/1.1.0`` whose body is not a valid protobuf
makes ``Pubsub.continuously_read_stream`` raise ``google.protobuf.message.DecodeError``.
``Pubsub.stream_handler`` only catches ``StreamError``/``ParseError``/``IncompleteReadError``,
so it escapes into ``SwarmConn._handle_new_streams``' nursery, then the swarm's service, and
closes the host: the node's network restarts (on a new port with ``tcp/0``). Any other stream
handler that raises does the same, and so does a ``push_msg`` task (a sync topic validator's
exception is not caught by ``Pubsub.validate_msg``).

Measured with 0.8.1 too: multistream-select, the first thing read from a TCP connection
(before Noise, so before any peer id or per-peer cap) and from every new stream, reads a
message of whatever length its varint prefix claims (``libp2p.utils.read_delim``; only
``read_exactly``'s 101 reads end it). One raw TCP connection announcing 1 GiB had a daemon
take 130-220 MB in a fraction of a second, and nothing limits how many connect at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import trio
from libp2p.exceptions import ParseError
from libp2p.kad_dht import kad_dht
from libp2p.protocol_muxer import multiselect_communicator
from libp2p.pubsub import pubsub as pubsub_module
from libp2p.pubsub.pubsub import Pubsub
from libp2p.utils.varint import read_varint_prefixed_bytes_limited

from engine.network import supervise

log = logging.getLogger("nunet.network.guards")


def guard_host(host: Any) -> None:
    """Every inbound stream, whatever its protocol, ends in a reset rather than a raise.

    py-libp2p 0.8.1: ``BasicHost.__init__`` installs ``BasicHost._swarm_stream_handler``
    (multistream negotiation, then the protocol's handler) as the swarm's one
    ``common_stream_handler``; we wrap that, so handlers registered later are covered too.
    """
    network = host.get_network()
    network.set_stream_handler(supervise.guard_stream("stream", host._swarm_stream_handler))


async def _no_dial() -> None:
    """The AutoConnector's ``maybe_connect``, doing nothing (see ``no_auto_dials``)."""


def no_auto_dials(network: Any) -> None:
    """py-libp2p 0.8.1's swarm dials peers of its peerstore by itself (``AutoConnector``:
    up to 32 at a time, every 10 s while the node has fewer connections than its low
    watermark, and after each disconnect) to whatever addresses the peerstore holds for them,
    which include the addresses adverts name. Measured in bench/hostile_soak.py: Sybil
    adverts naming one address and port (3,000 in 30 s) made the provider open 1,800-2,100
    connections to it through this path, past the dial budget (dialbudget.py) that every
    dial an advert causes must pass. Our own loops keep the connections we want (bootstrap
    peers: host.keep_bootstrapped; channel members: discovery.py, budgeted), so the swarm's
    own dialling is turned off, on the instance, here and for its disconnect trigger."""
    network.auto_connector.maybe_connect = _no_dial


# A multistream-select message is one protocol id and its newline: go-multistream and
# js-libp2p refuse ids over 1024 bytes. (Only an "ls" answer is longer; we never send "ls".)
MAX_MULTISTREAM_MESSAGE = 1024 + 1


async def read_bounded_delim(reader: Any) -> bytes:
    """``libp2p.utils.read_delim`` that refuses a length prefix over MAX_MULTISTREAM_MESSAGE
    before reading the body (``MessageTooLarge``, an ``IOException``, which the
    communicator turns into the negotiation failure it already handles)."""
    message = await read_varint_prefixed_bytes_limited(reader, MAX_MULTISTREAM_MESSAGE)
    if not message.endswith(b"\n"):
        raise ParseError("a multistream-select message must end with a newline")
    return message[:-1]


def bound_multistream_messages() -> None:
    """Every multistream-select negotiation in this process, connections and streams, reads
    at most MAX_MULTISTREAM_MESSAGE bytes per message. ``MultiselectCommunicator.read``
    calls the ``read_delim`` it imported by name, and every negotiation goes through it."""
    multiselect_communicator.read_delim = read_bounded_delim


# Issue 21: one byte every 3 s kept /meshsub and /ipfs/kad streams open for ever (our own
# protocols all have deadlines). Once a message has begun (its length's first byte), the
# rest must come within MESSAGE_S: far more than a 1 MiB RPC needs on a slow link. A DHT
# stream's next request must begin within KAD_IDLE_S (go-libp2p closes idle ones after a
# minute); a gossip stream may idle as long as its connection lives (a peer outside our
# mesh may have nothing to say), but never hold a message half sent.
MESSAGE_S = 20.0
KAD_IDLE_S = 30.0


class _Started:
    """A reader whose first ``read`` is awaited as it is; every later one within the
    deadline ``MESSAGE_S`` from the end of that first read."""

    def __init__(self, reader: Any, idle_s: float | None) -> None:
        self._reader = reader
        self._idle_s = idle_s
        self._deadline: float | None = None

    async def read(self, n: int | None = None) -> bytes:
        if self._deadline is None:
            if self._idle_s is None:
                data = await self._reader.read(n)
            else:
                with trio.fail_after(self._idle_s):
                    data = await self._reader.read(n)
            self._deadline = trio.current_time() + MESSAGE_S
            return bytes(data)
        with trio.fail_at(self._deadline):
            return bytes(await self._reader.read(n))


# What the DHT's stream handler may look at each request it reads, before py-libp2p parses,
# validates or stores it: set for the handler's own task (engine/network/dht_bounds.py). The
# gate raises to refuse the request (the handler ends the stream), returns to let it pass.
KAD_REQUEST_GATE: ContextVar[Callable[[Any, bytes], None] | None] = ContextVar(
    "kad_request_gate", default=None
)


def _deadlined(idle_s: float | None, gated: bool = False) -> Any:
    async def read_message(reader: Any, max_length: int) -> bytes:
        try:
            started: Any = _Started(reader, idle_s)  # a Reader: what the function reads from
            message = await read_varint_prefixed_bytes_limited(started, max_length)
            gate = KAD_REQUEST_GATE.get() if gated else None
            if gate is not None:
                gate(reader, message)
            return message
        except trio.TooSlowError:
            # What the callers treat as a broken stream (they reset it): an incomplete read.
            from libp2p.io.exceptions import IncompleteReadError

            raise IncompleteReadError(
                "too slow: a message not finished in time", expected_bytes=1, received_bytes=1
            ) from None

    return read_message


def deadline_protocol_reads() -> None:
    """Every /meshsub and /ipfs/kad message read in this process gets the deadlines above:
    both modules call the ``read_varint_prefixed_bytes_limited`` they imported by name (in
    ``kad_dht`` only the inbound handler does, so KAD_REQUEST_GATE sees requests alone)."""
    pubsub_module.read_varint_prefixed_bytes_limited = _deadlined(None)
    kad_dht.read_varint_prefixed_bytes_limited = _deadlined(KAD_IDLE_S, gated=True)


class GuardedPubsub(Pubsub):
    """Pubsub whose per-stream reader and per-message task cannot fail the pubsub service."""

    async def stream_handler(self, stream: Any) -> None:
        # py-libp2p 0.8.1 ``Pubsub.stream_handler``: an RPC that does not parse (DecodeError),
        # or that the router fails on, is treated like its ParseError: the stream is reset
        # and the peer dropped from pubsub; the connection and other peers are untouched.
        # Registered by ``Pubsub.__init__`` via ``host.set_stream_handler(protocol,
        # self.stream_handler)``, so this override is what the host calls.
        try:
            await super().stream_handler(stream)
        except Exception as exc:
            supervise.FAILURES.record("pubsub reader", exc)
            await supervise.reset_quietly(stream)
            try:
                self._handle_dead_peer(stream.muxed_conn.peer_id)
            except Exception:
                log.debug("dropping a failed pubsub peer failed", exc_info=True)
            return
        # Its read loop ended (an end of stream, or an I/O error such as a message not
        # whole in time, which 0.8.1 only logs): the stream is done, and is reset rather
        # than left half open for the peer to keep writing into.
        await supervise.reset_quietly(stream)

    async def handle_dead_peer_queue(self) -> None:
        # py-libp2p 0.8.1 ``Pubsub.handle_dead_peer_queue`` keeps a peer whose connection
        # closed while another connection to it is open. When a peer restarts its network and
        # is back before its old connection's end is handled, its entry keeps the dead
        # connection's stream: ``_handle_new_peer`` skipped the new connection (the peer was
        # known), no hello goes out on it, and the peer never learns our subscriptions (its
        # heartbeats stopped reaching us). Such an entry is dropped here like any dead peer;
        # ``_handle_dead_peer`` registers the peer again on the connection it still has.
        async with self.dead_peer_receive_channel:
            self.event_handle_dead_peer_queue_started.set()
            async for peer_id in self.dead_peer_receive_channel:
                live = [
                    conn
                    for conn in self.host.get_network().get_connections(peer_id)
                    if not _closed(getattr(conn, "muxed_conn", None))
                ]
                stream = self.peers.get(peer_id)
                stale = stream is not None and _closed(getattr(stream, "muxed_conn", None))
                if live and not stale:
                    continue
                try:
                    self._handle_dead_peer(peer_id)
                except Exception as exc:
                    supervise.FAILURES.record("pubsub dead peer", exc)

    async def push_msg(self, msg_forwarder: Any, msg: Any) -> None:
        # py-libp2p 0.8.1 runs ``push_msg`` with ``manager.run_task``: a task that raises
        # (a garbage ``from_id``, a validator's exception) would end the whole pubsub service.
        try:
            await super().push_msg(msg_forwarder, msg)
        except Exception as exc:
            supervise.FAILURES.record("pubsub message", exc)


def _closed(muxed_conn: Any) -> bool:
    """A connection's muxer has ended (None: its handshake is not done yet: open)."""
    return muxed_conn is not None and bool(getattr(muxed_conn, "is_closed", False))
