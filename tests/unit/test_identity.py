from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engine.errors import EngineError
from engine.identity import load, load_or_create, short_peer_id


def test_created_once_private_and_stable(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "identity.key"
    first = load_or_create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert first.peer_id.startswith("12D3KooW")
    assert load_or_create(path).peer_id == first.peer_id


def test_peer_id_and_key_file_match_libp2p(tmp_path: Path) -> None:
    """Our PyNaCl-only identity must be the very key and id py-libp2p derives."""
    from libp2p.crypto.serialization import deserialize_private_key
    from libp2p.peer.id import ID

    path = tmp_path / "identity.key"
    ours = load_or_create(path)
    theirs = deserialize_private_key(path.read_bytes())
    assert ID.from_pubkey(theirs.get_public_key()).pretty() == ours.peer_id
    message = b"advert"
    assert theirs.get_public_key().verify(message, ours.sign(message))


def test_world_readable_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "identity.key"
    load_or_create(path)
    os.chmod(path, 0o644)
    with pytest.raises(EngineError, match="chmod 600"):
        load(path)


def test_corrupt_key_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "identity.key"
    path.write_bytes(b"garbage")
    os.chmod(path, 0o600)
    with pytest.raises(EngineError, match="not an Ed25519 libp2p key"):
        load(path)


def test_short_peer_id() -> None:
    assert short_peer_id("12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5") == "12D3KooW…KPH5"
