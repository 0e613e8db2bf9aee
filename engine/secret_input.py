"""Secrets typed or piped in: one rule for where a secret ends.

``echo pw | nunet-tui wallet unlock``, ``printf 'pw\\r\\n' > passphrase_file`` and a mnemonic
pasted into stdin all carry the one line end their writer added, and nothing else of it is
noise: exactly one trailing ``\\n`` or ``\\r\\n`` is dropped, every other character (spaces,
a second newline) is part of the secret. Every reader of a secret uses ``secret_text``.
"""

from __future__ import annotations

from typing import TextIO

from engine.errors import EngineError

# Far above any passphrase, mnemonic or API key; a secret is never a stream to slurp whole.
MAX_SECRET_CHARS = 64 * 1024


def secret_text(text: str) -> str:
    """``text`` without the one line end its writer added (``\\r\\n`` or ``\\n``)."""
    if text.endswith("\r\n"):
        return text[:-2]
    if text.endswith("\n"):
        return text[:-1]
    return text


def read_secret(stream: TextIO, what: str) -> str:
    """A secret from a pipe or file: at most ``MAX_SECRET_CHARS``, one line end dropped."""
    data = stream.read(MAX_SECRET_CHARS + 1)
    if len(data) > MAX_SECRET_CHARS:
        raise EngineError(
            "secret_too_long",
            f"the {what} on stdin is over {MAX_SECRET_CHARS:,} characters: give only the secret",
        )
    return secret_text(data)
