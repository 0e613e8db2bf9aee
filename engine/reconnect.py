"""An attached client that notices its daemon going away at once and reconnects with backoff.

The TUI attached to a daemon (``nunet-tui --home H`` while ``nunet-tui daemon`` runs) must
not go on showing "ready" for a daemon that stopped, nor stay dead once it is back (a
`systemctl restart`, an upgrade). ``ReconnectingClient`` wraps one ``ControlClient`` at a time:
when the daemon ends the connection it tells its subscribers at once with
``DaemonConnection(online=False)``, calls fail with ``EngineError(DAEMON_GONE)`` saying when the
next try is, and a thread tries again after 0.25 s, then twice as long each time up to 10 s.
Once connected it subscribes again for the same callbacks and says
``DaemonConnection(online=True)``; the app then reads the node afresh.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from engine import api
from engine.client import EventCallback, Subscribers
from engine.control_client import DAEMON_GONE, ControlClient
from engine.errors import EngineError

log = logging.getLogger("nunet.reconnect")

FIRST_RETRY_S = 0.25
MAX_RETRY_S = 10.0

Connect = Callable[[Callable[[str], None]], ControlClient]
"""Make a new ControlClient that calls the given ``on_lost`` (raises OSError/EngineError)."""


def backoff(attempt: int, first: float = FIRST_RETRY_S, most: float = MAX_RETRY_S) -> float:
    """Seconds before try number ``attempt`` (0-based): first, doubling, capped at ``most``."""
    return float(min(most, first * (2 ** min(attempt, 32))))


class ReconnectingClient:
    """An EngineClient over a daemon's socket that survives the daemon's restarts."""

    def __init__(
        self,
        connect: Connect,
        *,
        first_retry_s: float = FIRST_RETRY_S,
        max_retry_s: float = MAX_RETRY_S,
    ) -> None:
        self._connect = connect
        self._first, self._most = first_retry_s, max_retry_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._subscribers = Subscribers()
        self._subscribed = False  # once: the inner client's own subscription fans out
        self._closed = False
        self._next_try_at = 0.0
        self._client: ControlClient | None = connect(self._lost)  # the first one must work

    # --- EngineClient ----------------------------------------------------------------------

    @property
    def embedded(self) -> bool:
        return False

    @property
    def online(self) -> bool:
        with self._lock:
            return self._client is not None

    def submit(self, command: api.Command) -> Future[Any]:
        with self._lock:
            client = self._client
        if client is None:
            future: Future[Any] = Future()
            future.set_exception(EngineError(DAEMON_GONE, self._offline_text()))
            return future
        return client.submit(command)

    async def call(self, command: api.Command) -> Any:
        import asyncio

        return await asyncio.wrap_future(self.submit(command))

    def call_blocking(self, command: api.Command, timeout: float = 30.0) -> Any:
        with self._lock:
            client = self._client
        if client is None:
            raise EngineError(DAEMON_GONE, self._offline_text())
        return client.call_blocking(command, timeout)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        unsubscribe = self._subscribers.add(callback)
        with self._lock:
            client = self._client
            first = not self._subscribed
            self._subscribed = True
        if client is not None and first:
            client.subscribe(self._subscribers.deliver)
        return unsubscribe

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        self._wake.set()
        if client is not None:
            client.close()

    # --- the connection's life -------------------------------------------------------------

    def _offline_text(self) -> str:
        wait = max(0.0, self._next_try_at - time.monotonic())
        return f"the daemon is not running: reconnecting (next try in {wait:.0f} s)"

    def _lost(self, reason: str) -> None:
        """From the old client's reader thread: say so at once, then reconnect in a thread."""
        with self._lock:
            if self._closed or self._client is None:
                return
            self._client = None
            self._next_try_at = time.monotonic() + self._first
        log.info("daemon connection lost (%s); reconnecting", reason)
        self._subscribers.deliver(
            api.DaemonConnection(
                at=time.time(), online=False, detail=reason, retry_in_s=self._first
            )
        )
        threading.Thread(target=self._reconnect, name="nunet-reconnect", daemon=True).start()

    def _reconnect(self) -> None:
        attempt = 0
        while True:
            delay = backoff(attempt, self._first, self._most)
            self._wake.wait(delay)
            with self._lock:
                if self._closed:
                    return
            try:
                client = self._connect(self._lost)
            except (OSError, EngineError) as exc:
                attempt += 1
                with self._lock:
                    self._next_try_at = time.monotonic() + backoff(attempt, self._first, self._most)
                log.debug("reconnect attempt %d failed: %s", attempt, exc)
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    return
                self._client = client
                wanted = self._subscribed
            try:
                if wanted:
                    client.subscribe(self._subscribers.deliver)
            except EngineError:  # gone again before it answered: its on_lost starts over
                return
            log.info("reconnected to the daemon after %d failed attempt(s)", attempt)
            self._subscribers.deliver(
                api.DaemonConnection(
                    at=time.time(), online=True, detail="reconnected to the daemon"
                )
            )
            return
