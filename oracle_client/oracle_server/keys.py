"""The oracle's Ed25519 signing key: created on first start, kept 0600, never regenerated.

Every escrow datum names this key, so losing or replacing it strands the locked funds until
their deadlines: refuse to run with a key file others can read, and never overwrite one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nacl.signing import SigningKey

_SEED_LEN = 32


class KeyFileError(Exception):
    pass


def load_or_create_key(path: Path) -> SigningKey:
    """The key in ``path`` (hex seed on one line), made there first if the file is absent."""
    try:
        return _load(path)
    except FileNotFoundError:
        pass
    key = SigningKey.generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written whole to a private temporary file, then linked into place: link() fails if the
    # name exists, so two oracles starting at once can never each keep a different key, and
    # nobody ever reads a half-written file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(bytes(key).hex() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    except FileExistsError:
        return _load(path)
    finally:
        tmp.unlink(missing_ok=True)
    return key


def _load(path: Path) -> SigningKey:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeyFileError(
            f"{path} is readable by others (mode {mode:o}): run `chmod 600 {path}` and retry"
        )
    text = path.read_text(encoding="ascii").strip()
    try:
        seed = bytes.fromhex(text)
    except ValueError:
        seed = b""
    if len(seed) != _SEED_LEN:
        raise KeyFileError(f"{path} does not hold a 32-byte Ed25519 seed in hex")
    return SigningKey(seed)
