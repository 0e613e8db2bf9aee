"""Where py-libp2p (0.8.1) lets a stranger's bytes raise into its own tasks: contained here.

Measured with 0.8.1: a 6-byte frame on ``/meshsub/1.1.0`` whose body is not a valid protobuf
makes ``Pubsub.continuously_read_stream`` raise ``google.protobuf.message.DecodeError``.
``Pubsub.stream_handler`` only catches ``StreamError``/``ParseError``/``IncompleteReadError``,
so it escapes into ``SwarmConn._handle_new_streams``' nursery, then the swarm's service, and
closes the host: the node's network restarts (on a new port with ``tcp/0``). Any other stream
handler that raises does the same, and so does a ``push_msg`` task (a sync topic validator's
exception is not caught by ``Pubsub.validate_msg``).
"""

from __future__ import annotations

import logging
from typing import Any

from libp2p.pubsub.pubsub import Pubsub

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

    async def push_msg(self, msg_forwarder: Any, msg: Any) -> None:
        # py-libp2p 0.8.1 runs ``push_msg`` with ``manager.run_task``: a task that raises
        # (a garbage ``from_id``, a validator's exception) would end the whole pubsub service.
        try:
            await super().push_msg(msg_forwarder, msg)
        except Exception as exc:
            supervise.FAILURES.record("pubsub message", exc)
