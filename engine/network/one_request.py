"""Serving a protocol of one request and one answer per stream, such as the advert exchange
and address confirmation: the stream then ends on both sides within a deadline."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from engine.domain import wire

log = logging.getLogger("nunet.network")


async def serve_one_request(
    stream: Any,
    max_request: int,
    respond: Callable[[bytes], Awaitable[bytes]],
    timeout_s: float,
    what: str,
) -> None:
    """Read one frame, write what ``respond`` makes of it (raw bytes; nothing when empty),
    and end the stream within ``timeout_s``.

    ``close()`` only half-closes (our FIN): a peer that never closes its side, or sends no
    request at all, used to keep the stream open for good (issue 21). We wait for its FIN
    until the deadline and reset the stream otherwise; anything but its FIN is a breach."""
    done = False
    try:
        with trio.move_on_after(timeout_s):
            data = await wire.read_frame(stream, max_request)
            if data is None:
                return
            answer = await respond(data)
            if answer:
                await stream.write(answer)
            await stream.close()
            done = await wire.at_end(stream)
    except Exception as exc:
        log.info("%s from %s refused: %s", what, stream.muxed_conn.peer_id, exc)
    finally:
        if not done:
            with contextlib.suppress(Exception):
                await stream.reset()
