"""The node's Ed25519 identity: made at first start, kept 0600, the same peer id ever after.

The key file uses libp2p's protobuf key serialization, so the network layer can hand it to
py-libp2p unchanged. This module deliberately works with PyNaCl directly: importing py-libp2p
costs about a second, and commands like ``nunet-tui peer self`` must not pay for it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import base58
from nacl.signing import SigningKey, VerifyKey

from engine.errors import EngineError

# libp2p crypto.proto: KeyType Ed25519 = 1; message { KeyType Type = 1; bytes Data = 2; }
_ED25519_PREFIX = bytes([0x08, 0x01, 0x12, 0x20])


@dataclass(frozen=True)
class Identity:
    signing_key: SigningKey

    @property
    def public_key(self) -> VerifyKey:
        return self.signing_key.verify_key

    @property
    def public_key_protobuf(self) -> bytes:
        return _ED25519_PREFIX + bytes(self.public_key)

    @property
    def private_key_protobuf(self) -> bytes:
        return _ED25519_PREFIX + bytes(self.signing_key)

    @property
    def peer_id(self) -> str:
        """The libp2p peer id: an identity multihash of the protobuf public key, base58btc."""
        proto = self.public_key_protobuf
        return base58.b58encode(bytes([0x00, len(proto)]) + proto).decode("ascii")

    def sign(self, message: bytes) -> bytes:
        return self.signing_key.sign(message).signature


def short_peer_id(peer_id: str) -> str:
    """``12D3KooW…x9Fq``: enough to tell peers apart on screen."""
    return peer_id if len(peer_id) <= 14 else f"{peer_id[:8]}…{peer_id[-4:]}"


def load_or_create(path: Path) -> Identity:
    if path.exists():
        return load(path)
    identity = Identity(SigningKey.generate())
    save(identity, path)
    return identity


def load(path: Path) -> Identity:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise EngineError(
            "identity",
            f"{path} is readable by others (mode {mode:o}); run `chmod 600 {path}` and retry",
        )
    data = path.read_bytes()
    if len(data) != len(_ED25519_PREFIX) + 32 or not data.startswith(_ED25519_PREFIX):
        raise EngineError(
            "identity",
            f"{path} is not an Ed25519 libp2p key; move it away to make a new identity "
            "(peers will then see a new peer id)",
        )
    return Identity(SigningKey(data[len(_ED25519_PREFIX) :]))


def save(identity: Identity, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, identity.private_key_protobuf)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
