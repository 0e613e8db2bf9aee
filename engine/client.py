"""What the TUI and the CLI hold: an engine they can call, embedded or across the socket.

``Engine`` (embedded, engine/facade.py) and ``ControlClient`` (a running daemon's socket,
engine/control_client.py) both satisfy this protocol, so nothing above the engine knows which
it has.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from engine.api import Command, Event

EventCallback = Callable[[Event], None]

log = logging.getLogger("nunet.client")


class Subscribers:
    """Event callbacks, added and removed from any thread: each event reaches every one, and
    one that raises is logged, never stopping the others (the embedded engine, the control
    client and the reconnecting client all hand events out this way)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[EventCallback] = []

    def __len__(self) -> int:
        with self._lock:
            return len(self._callbacks)

    def add(self, callback: EventCallback) -> Callable[[], None]:
        """Add ``callback``; returns what removes it again (idempotent)."""
        with self._lock:
            self._callbacks.append(callback)

        def remove() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return remove

    def deliver(self, event: Event) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(event)
            except Exception:
                log.exception("an event callback failed")


class EngineClient(Protocol):
    @property
    def embedded(self) -> bool:
        """True when the engine runs in this process, False when attached to a daemon."""
        ...

    async def call(self, command: Command) -> Any:
        """Run a command from asyncio code; returns ``command.reply`` or raises EngineError."""
        ...

    def call_blocking(self, command: Command, timeout: float = 30.0) -> Any:
        """Run a command from plain synchronous code (the CLI)."""
        ...

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Deliver every event to ``callback`` from a background thread; returns unsubscribe.

        The callback must be thread-safe and quick (the TUI passes ``App.post_message``).
        """
        ...

    def close(self) -> None:
        """Stop an embedded engine or disconnect from a daemon; idempotent."""
        ...
