"""The base of every plain data record: the domain's (offers, peers) and the API's alike.

Immutable msgspec Structs that refuse unknown fields, so the very same objects travel
in-process, over the control socket and through tests (engine/api re-exports them).
"""

from __future__ import annotations

import msgspec


class Record(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every plain data object the facade hands out."""
