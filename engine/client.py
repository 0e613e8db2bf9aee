"""What the TUI and the CLI hold: an engine they can call, embedded or across the socket.

``Engine`` (embedded, engine/facade.py) and ``ControlClient`` (a running daemon's socket,
engine/control.py) both satisfy this protocol, so nothing above the engine knows which it has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from engine.api import Command, Event

EventCallback = Callable[[Event], None]


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
