"""Untrusted text (a peer's words, a user's own input) made safe to show on a terminal.

One escaper for the CLI, the TUI and the engine's messages: a string from outside is shown
literally, never obeyed. Anything ``str.isprintable`` refuses (C0 and C1 controls, DEL, the
Unicode bidi overrides and isolates U+202A-U+202E and U+2066-U+2069, the other format
characters of category Cf, line and paragraph separators) becomes a visible ``\\x1b``,
``\\u202e`` or ``\\U000e0001`` escape. Lives in ``engine`` because everything above it may
import it and it imports nothing heavy (the CLI stays free of Textual).
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def safe(text: object) -> str:
    """``text`` for a terminal: printable characters as they are (brackets and backslashes
    included), every other one as a visible escape. The result is one line."""
    text = str(text)
    if text.isprintable():  # the common case: one C-level pass
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _json_escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON spells an astral character as a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def safe_json(data: Any, *, indent: int | None = None) -> str:
    """``json.dumps`` whose output is safe on a terminal and still the same JSON: readable
    non-ASCII stays, but DEL, C1 controls, bidi and format characters become ``\\uXXXX``
    escapes (json.dumps leaves those raw, even though it escapes C0 itself)."""
    text = json.dumps(data, indent=indent, ensure_ascii=False)
    # Outside strings json.dumps writes only printable ASCII and the newlines of indent, so
    # every non-printable character left is inside a string, where \\uXXXX means the same.
    if text.replace("\n", "").isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == "\n" else _json_escape(ch) for ch in text)


def control_character(text: str) -> str | None:
    """The first character of ``text`` a terminal or a file manager would obey or hide, or
    None: Cc (C0, DEL and C1 such as U+009B, a one-byte CSI), Cf (bidi overrides such as
    U+202E, which shows "txt.exe" as "exe.txt", and other invisible formatting) and Cs (lone
    surrogates, which no file system name holds). The one rule for names from a peer: here,
    for results (the packing child imports nothing of ours), and in ``engine.domain.safe_paths``."""
    for char in text:
        if unicodedata.category(char) in ("Cc", "Cf", "Cs"):
            return char
    return None
