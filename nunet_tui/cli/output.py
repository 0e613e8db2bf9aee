"""How scripting commands print: one JSON object, or a few readable lines.

What a command's result looks like is decided in formatters.py (one registry by result
type); this module only writes. Every line the CLI writes goes through ``show``,
``show_json`` or ``show_error``: a peer's words and the user's own input reach the terminal
escaped (engine/domain/safe_text.py), never as escape sequences, bidi overrides or extra lines.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TextIO

from engine.domain.safe_text import safe, safe_json


def safe_lines(text: str) -> str:
    """Lines built by the CLI, each escaped on its own: the line breaks kept."""
    return "\n".join(safe(line) for line in text.split("\n"))


def show(text: str, file: TextIO | None = None, *, flush: bool = False) -> None:
    print(safe_lines(text), file=file if file is not None else sys.stdout, flush=flush)


def show_json(
    data: Any, *, indent: int | None = 2, file: TextIO | None = None, flush: bool = False
) -> None:
    out = file if file is not None else sys.stdout
    print(safe_json(data, indent=indent), file=out, flush=flush)


def show_error(message: str) -> None:
    """The one line a failed command writes on stderr."""
    print(f"nunet-tui: error: {safe(message)}", file=sys.stderr)


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``, else a usage error naming
    the range (argparse adds the option's name)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text[:40]!r} is not a whole number (from {low} to {high})"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, not {text[:40]}")
        return value

    return parse
