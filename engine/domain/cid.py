"""Content ids: CIDv1 with a sha2-256 multihash, for the two codecs UnixFS uses (raw leaves and
dag-pb nodes), written in base32 as IPFS writes them ("bafk…" for raw, "bafy…" for dag-pb).

A CID from a user or a peer is parsed here and nowhere else: anything but CIDv1 / sha2-256 /
raw or dag-pb is refused with one line that says what it was, and a block is used only after
``Cid.verify`` has hashed it.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

RAW = 0x55
DAG_PB = 0x70
CODECS = {RAW: "raw", DAG_PB: "dag-pb"}
SHA2_256 = 0x12
DIGEST_BYTES = 32
MAX_CID_TEXT = 128  # a CIDv1 of sha2-256 in base32 is 59 characters


class CidError(ValueError):
    """Not a CID we take, said in one line."""


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, next position); at most 9 bytes (a uint64), as multiformats allows."""
    value = shift = 0
    for i in range(pos, min(pos + 9, len(buf))):
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1
        shift += 7
    raise CidError("a varint runs past its end or over 9 bytes")


@dataclass(frozen=True, order=True)
class Cid:
    codec: int
    digest: bytes

    @classmethod
    def of(cls, codec: int, block: bytes) -> Cid:
        return cls(codec, hashlib.sha256(block).digest())

    @classmethod
    def from_bytes(cls, buf: bytes) -> Cid:
        """A CID's binary form (as a dag-pb link holds it)."""
        version, pos = read_varint(buf, 0)
        if version != 1:
            raise CidError(f"CID version {version}: only CIDv1 is taken")
        codec, pos = read_varint(buf, pos)
        if codec not in CODECS:
            raise CidError(f"codec 0x{codec:x}: only raw and dag-pb blocks are taken")
        hash_code, pos = read_varint(buf, pos)
        size, pos = read_varint(buf, pos)
        if hash_code != SHA2_256 or size != DIGEST_BYTES:
            raise CidError(f"multihash 0x{hash_code:x}/{size}: only sha2-256 is taken")
        digest = buf[pos:]
        if len(digest) != DIGEST_BYTES:
            raise CidError(f"a sha2-256 digest of {len(digest)} bytes")
        return cls(codec, bytes(digest))

    @classmethod
    def parse(cls, text: str) -> Cid:
        """A CID as people write it: base32 CIDv1 ("bafy…", "bafk…")."""
        text = text.strip()
        if not text or len(text) > MAX_CID_TEXT:
            raise CidError("not a CID: give a CIDv1 such as bafy… or bafk…")
        if text.startswith("Qm"):
            raise CidError(
                f"{text[:12]}… is a CIDv0: give its CIDv1 (ipfs cid format -v 1 -b base32)"
            )
        if text[0] != "b":
            raise CidError(f"{text[:12]!r}: only base32 CIDs (starting with b) are taken")
        body = text[1:].upper()
        try:
            raw = base64.b32decode(body + "=" * (-len(body) % 8))
        except ValueError:
            raise CidError(f"{text[:16]!r} is not base32") from None
        return cls.from_bytes(raw)

    @property
    def binary(self) -> bytes:
        return varint(1) + varint(self.codec) + bytes((SHA2_256, DIGEST_BYTES)) + self.digest

    def __str__(self) -> str:
        return "b" + base64.b32encode(self.binary).decode().lower().rstrip("=")

    def verify(self, block: bytes) -> bool:
        """Whether ``block`` is the block this CID names."""
        return hashlib.sha256(block).digest() == self.digest
