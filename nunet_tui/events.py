"""Engine events dispatched by type, in one place.

A screen (or the app) marks each method that handles one kind of event with
``@handles(JobChanged)``; ``dispatch_event(event)`` calls the method for the event's type, and an
event nobody here handles is ignored. The table is built once per class (``__init_subclass__``,
inherited handlers included), so dispatching is one dictionary look-up, not a chain of
``isinstance`` tests that grows with every event a screen learns to show.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from engine.api import Event

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "_handles_events"


def handles(*kinds: type[Event]) -> Callable[[F], F]:
    """Mark a method ``(self, event)`` as the handler of these event types."""

    def mark(method: F) -> F:
        setattr(method, _MARK, kinds)
        return method

    return mark


class EventHandlers:
    """Mixin: ``dispatch_event(event)`` calls the ``@handles`` method for ``type(event)``."""

    event_handlers: ClassVar[dict[type[Event], str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table: dict[type[Event], str] = {}
        for klass in reversed(cls.__mro__):  # a subclass's handler wins over its base's
            for name, member in vars(klass).items():
                for kind in getattr(member, _MARK, ()):
                    table[kind] = name
        cls.event_handlers = table

    def dispatch_event(self, event: Event) -> bool:
        """Handle ``event``; False when this class has no handler for its type."""
        name = self.event_handlers.get(type(event))
        if name is None:
            return False
        getattr(self, name)(event)
        return True
