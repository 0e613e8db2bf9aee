"""A provider's display name: the rule it must meet, and the one way a peer is labelled.

A name is the provider's own words, signed in its advert (engine/domain/wire.py), so a relay
cannot change it, but the provider itself may be hostile: a name is never shown alone (two
peers may pick the same one), always with the peer id it came with, as ``name · 12D3…abcd``.
The rule is the same for ``[provider] display_name`` and for a name received on the wire:
at most ``MAX_DISPLAY_NAME`` characters after NFC normalisation, every character printable
(no controls, no bidi overrides or isolates, no other format characters, no line
separators: ``str.isprintable``), no leading or trailing space, and neither of the label's
own separators ``·`` and ``…`` (so a name cannot fake a second peer id after it). Lives in
``engine`` because the CLI (no Textual) and the TUI both label peers with it.
"""

from __future__ import annotations

import unicodedata

from engine.domain.safe_text import safe
from engine.identity import short_peer_id

MAX_DISPLAY_NAME = 32
# In a table or list (``peer_label(name_width=...)``): a name is cut to this, its id kept.
TABLE_NAME_WIDTH = 16
SEPARATOR = " · "
_RESERVED = ("\u00b7", "\u2026")  # the label's separator and the short id's ellipsis
RULE = (
    f"at most {MAX_DISPLAY_NAME} printable characters, no control, bidi or format characters, "
    "no '·' or '…', no leading or trailing space"
)


def display_name_problem(name: str) -> str | None:
    """Why ``name`` (already NFC) is not an acceptable display name, or None; "" is fine."""
    if len(name) > MAX_DISPLAY_NAME:
        return f"{len(name)} characters, at most {MAX_DISPLAY_NAME}"
    if not name.isprintable():
        bad = next(ch for ch in name if not ch.isprintable())
        return f"contains the non-printable character U+{ord(bad):04X}"
    if any(ch in name for ch in _RESERVED):
        return "contains '·' or '…', which the app uses to show the peer id"
    if name != name.strip():
        return "starts or ends with a space"
    return None


def normalise(name: str) -> str:
    """The NFC form: what is checked, advertised and shown."""
    return unicodedata.normalize("NFC", name)


def received_name(name: str) -> str:
    """A name from a peer's advert as it is kept: the name when it meets the rule, else ""
    (the peer is then shown by its id alone, as one without a name)."""
    if not name:
        return ""
    if normalise(name) != name or display_name_problem(name) is not None:
        return ""
    return name


def peer_label(
    peer_id: str, name: str = "", *, full_id: bool = False, name_width: int | None = None
) -> str:
    """``name · 12D3KooW…abcd`` (``full_id``: the whole peer id), or the id alone without a
    name; ``name_width`` cuts a longer name to that many characters, the last one ``…``.
    Plain text, escaped for a terminal: callers put it in ``Content``/``Text`` as a plain
    string or print it, never parse it as markup."""
    shown_id = safe(peer_id) if full_id else safe(short_peer_id(peer_id))
    if not name:
        return shown_id
    # A name that reached here passed the rule; ``safe`` is the second fence, for a caller
    # that forgot to check (it keeps a bad name visible as escapes, on one line).
    shown = safe(name)
    if name_width is not None and len(shown) > name_width:
        shown = shown[: max(1, name_width - 1)] + "\u2026"
    return f"{shown}{SEPARATOR}{shown_id}"
