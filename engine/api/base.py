"""The bases every facade type derives from: data records, commands and events.

A command names the Struct it is answered with in ``reply`` (``Done`` when there is nothing to
report); ``engine.api.wire.decode_reply`` uses it to turn wire JSON back into typed objects.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from engine.domain.record import Record


class Done(Record, frozen=True):
    """Reply of commands that have nothing to report beyond success."""

    message: str = ""


class Command(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", forbid_unknown_fields=True
):
    reply: ClassVar[type[Any]] = Done


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    at: float
