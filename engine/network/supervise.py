"""Containment: a failing handler or task is logged once, counted, and never takes siblings down.

In trio an exception that leaves a task cancels its whole nursery. py-libp2p runs every
inbound stream's handler inside the connection's nursery, which sits inside the swarm's
service, so one handler that raises on a stranger's bytes used to close the host and restart
the node's network. Everything a peer can reach, and every long-running loop, goes through
one of the wrappers here instead:

- ``guarded(name, fn)``: a one-shot task or handler; a failure ends only that call.
- ``guard_stream(name, handler)``: a stream handler; the stream is also reset.
- ``supervised(name, fn)``: a loop that must keep running; restarted with backoff.

Failures are counted per name in ``FAILURES`` (shown by ``network status``). The first failure
of each (name, exception type) is logged at WARNING, later ones at DEBUG: a peer that sends
the same bad frame a million times costs one log line, not a million.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from engine.domain.safe_text import safe

log = logging.getLogger("nunet.supervise")

# Restart delays for a supervised loop; reset once it has run for HEALTHY_S.
BACKOFF_S: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
HEALTHY_S = 60.0
# Bounds what one stranger's exception text can put in the log.
MAX_MESSAGE_CHARS = 200


class Failures:
    """Contained failures: counted per name; each kind logged in full only the first time."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._logged: set[tuple[str, str]] = set()

    def record(self, name: str, exc: BaseException) -> None:
        self.count(name)
        kind = (name, type(exc).__name__)
        text = _describe(exc)
        if kind in self._logged:
            log.debug("%s failed again (%s); contained", name, text)
            return
        self._logged.add(kind)
        log.warning(
            "%s failed (%s); contained, further %s failures are counted in `network status`",
            name,
            text,
            type(exc).__name__,
        )
        log.debug("%s failure traceback", name, exc_info=exc)

    def count(self, name: str) -> None:
        """A failure its caller logs itself (with more context than we have)."""
        self.counts[name] = self.counts.get(name, 0) + 1

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)


# One registry per process: the node runs one network, and its status shows these counts.
FAILURES = Failures()


def guarded(
    name: str, fn: Callable[..., Awaitable[Any]], failures: Failures | None = None
) -> Callable[..., Awaitable[None]]:
    """``fn`` whose ``Exception`` is recorded and swallowed; cancellation passes through."""

    async def call(*args: Any) -> None:
        try:
            await fn(*args)
        except Exception as exc:
            (failures or FAILURES).record(name, exc)

    return call


def guard_stream(
    name: str, handler: Callable[[Any], Awaitable[Any]], failures: Failures | None = None
) -> Callable[[Any], Awaitable[None]]:
    """A stream handler that never raises into py-libp2p; a failed stream is reset."""

    async def handle(stream: Any) -> None:
        try:
            await handler(stream)
        except Exception as exc:
            protocol = _protocol(stream)
            (failures or FAILURES).record(f"{name} {protocol}" if protocol else name, exc)
            await reset_quietly(stream)

    return handle


async def supervised(
    name: str,
    fn: Callable[[], Awaitable[Any]],
    *,
    failures: Failures | None = None,
    backoff: Sequence[float] = BACKOFF_S,
) -> None:
    """Run ``fn`` until it returns; after each failure wait (jittered, growing) and run it again."""
    attempt = 0
    while True:
        began = trio.current_time()
        try:
            await fn()
            return
        except Exception as exc:
            (failures or FAILURES).record(name, exc)
        if trio.current_time() - began >= HEALTHY_S:
            attempt = 0
        delay = backoff[min(attempt, len(backoff) - 1)] if backoff else 0.0
        attempt += 1
        log.info("restarting %s in %.1fs", name, delay)
        await trio.sleep(delay * random.uniform(0.8, 1.2))


async def reset_quietly(stream: Any) -> None:
    with trio.move_on_after(1.0):
        try:
            await stream.reset()
        except Exception:
            log.debug("stream reset failed", exc_info=True)


def _protocol(stream: Any) -> str:
    try:
        return str(stream.get_protocol() or "")
    except Exception:
        return ""


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    # Exception text may carry a stranger's bytes: shown literally, never as terminal codes.
    text = safe(text)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + "…"
    return text
