"""An EngineClient that is handed out now and opens its engine later, in a thread.

The TUI paints its first frame before the engine modules (trio, libp2p, the node) are even
imported: it gets a ``DeferredClient`` and calls ``start()`` once the frame is up. Calls made
meanwhile wait for the engine; if it cannot open, they fail with its EngineError. This module
imports nothing heavy, so the first frame never waits for it.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.api import Command
from engine.client import EngineClient, EventCallback, Subscribers
from engine.errors import EngineError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PendingEngine:
    """Which engine a client will reach, decided before anything heavy is loaded."""

    embedded: bool
    """True: an engine in this process (the home's lock is held already); False: a daemon."""
    open: Callable[[], EngineClient]
    """Start the embedded engine or connect to the daemon (seconds; call once)."""
    release: Callable[[], None]
    """Give up without opening (frees the home's lock)."""


class DeferredClient:
    """An EngineClient whose engine opens on ``start()``; until then calls wait for it."""

    def __init__(self, pending: PendingEngine) -> None:
        self._pending = pending
        self._opened: concurrent.futures.Future[EngineClient] = concurrent.futures.Future()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._subscribers = Subscribers()
        self._wants_events = False
        self._subscribed = False
        self._closed = False
        self._failure: EngineError | None = None

    @property
    def embedded(self) -> bool:
        return self._pending.embedded

    @property
    def open_error(self) -> EngineError | None:
        """Why the engine did not open, once it tried (None: opened, not yet, or never
        started because the app ended first)."""
        return self._failure

    def start(self) -> None:
        """Open the engine in a thread now; idempotent, and a no-op once closed."""
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._open, name="nunet-open", daemon=True)
            self._thread.start()

    def _open(self) -> None:
        try:
            client = self._pending.open()
        except EngineError as exc:
            self._fail(exc)
            return
        except OSError as exc:  # a disk full, a socket gone meanwhile: still one clear line
            self._fail(
                EngineError("engine_start", f"the engine did not start: {exc.strerror or exc}")
            )
            return
        except Exception as exc:
            log.exception("the engine did not start")
            self._fail(EngineError("engine_start", f"the engine did not start: {exc}"))
            return
        self._opened.set_result(client)
        try:
            self._subscribe_inner()
        except EngineError as exc:
            log.warning("could not subscribe to the engine's events: %s", exc.message)

    def _fail(self, error: EngineError) -> None:
        self._failure = error
        self._opened.set_exception(error)

    def _subscribe_inner(self) -> None:
        """Once the engine is open and someone subscribed: one subscription, fanned out."""
        with self._lock:
            if not (self._wants_events and self._opened.done()) or self._subscribed:
                return
            if self._opened.exception() is not None:
                return
            self._subscribed = True
        self._opened.result().subscribe(self._subscribers.deliver)

    def _client(self, timeout: float | None) -> EngineClient:
        try:
            return self._opened.result(timeout)
        except concurrent.futures.TimeoutError:
            raise EngineError("timeout", "the engine did not start in time") from None

    # --- EngineClient ----------------------------------------------------------------------

    def _waiter(self) -> concurrent.futures.Future[EngineClient]:
        """The client, for one caller: cancelling it (a worker cancelled as the app quits)
        leaves the opening itself alone, as asyncio.wrap_future would not."""
        waiter: concurrent.futures.Future[EngineClient] = concurrent.futures.Future()

        def copy(opened: concurrent.futures.Future[EngineClient]) -> None:
            if not waiter.set_running_or_notify_cancel():
                return
            if (exc := opened.exception()) is not None:
                waiter.set_exception(exc)
            else:
                waiter.set_result(opened.result())

        self._opened.add_done_callback(copy)
        return waiter

    async def call(self, command: Command) -> Any:
        import asyncio  # 25 ms that a scripting command, which never awaits, does not pay

        client = await asyncio.wrap_future(self._waiter())
        return await client.call(command)

    def call_blocking(self, command: Command, timeout: float = 30.0) -> Any:
        return self._client(timeout).call_blocking(command, timeout)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        unsubscribe = self._subscribers.add(callback)
        with self._lock:
            self._wants_events = True
        self._subscribe_inner()
        return unsubscribe

    def close(self) -> None:
        """Wait for an opening under way, then stop or disconnect what it opened."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is None:
            self._pending.release()
            self._opened.set_exception(EngineError("closed", "the engine was not started"))
            return
        thread.join()
        if self._opened.exception() is None:
            self._opened.result().close()
