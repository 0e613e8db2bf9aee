"""libp2p Ed25519 peer ids <-> public keys, without py-libp2p.

An Ed25519 peer id ("12D3KooW...") is base58btc(identity multihash(protobuf PublicKey)): the
public key is inside the id, so a receipt signature can be checked against the peer id alone.
py-libp2p takes ~1 s to import and the oracle never needs a network stack, so the few bytes of
base58 and protobuf are decoded here.

    multihash   = varint(code=0x00 identity) varint(len) digest
    PublicKey   = { 1: KeyType (varint, Ed25519 = 1), 2: bytes Data (32 bytes) }
"""

from __future__ import annotations

_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
_IDENTITY = 0x00
_SHA2_256 = 0x12
_KEY_TYPE_ED25519 = 1
_ED25519_LEN = 32
# Far above any inline key id (52 chars for Ed25519); bounds the big-int work.
_MAX_TEXT = 128


class PeerIdError(ValueError):
    """The text is not a peer id that carries an Ed25519 public key."""


def b58decode(text: str) -> bytes:
    if not text or len(text) > _MAX_TEXT:
        raise PeerIdError("peer id is empty or too long")
    number = 0
    for char in text:
        digit = _INDEX.get(char)
        if digit is None:
            raise PeerIdError(f"peer id contains {char!r}, which base58 never uses")
        number = number * 58 + digit
    body = number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b""
    # Each leading '1' stands for a zero byte that the integer cannot carry.
    zeros = len(text) - len(text.lstrip("1"))
    return b"\x00" * zeros + body


def b58encode(data: bytes) -> str:
    number = int.from_bytes(data, "big")
    out = []
    while number:
        number, digit = divmod(number, 58)
        out.append(_ALPHABET[digit])
    zeros = len(data) - len(data.lstrip(b"\x00"))
    return "1" * zeros + "".join(reversed(out))


def public_key_from_peer_id(peer_id: str) -> bytes:
    """The 32-byte Ed25519 public key inside ``peer_id``."""
    raw = b58decode(peer_id)
    code, pos = _read_varint(raw, 0)
    length, pos = _read_varint(raw, pos)
    if code == _SHA2_256:
        raise PeerIdError("peer id is a hash of its key (RSA or other): not an Ed25519 peer id")
    if code != _IDENTITY:
        raise PeerIdError(f"peer id uses multihash code {code:#x}, not the identity hash")
    if length != len(raw) - pos:
        raise PeerIdError("peer id multihash length does not match its contents")
    key = _ed25519_from_protobuf(raw[pos:])
    # One key, one id: a re-ordered or padded encoding of the same key is refused, so two
    # different strings can never stand for the same peer in a receipt or the oracle's store.
    if peer_id_from_public_key(key) != peer_id:
        raise PeerIdError("peer id is not in libp2p's canonical encoding")
    return key


def peer_id_from_public_key(public_key: bytes) -> str:
    if len(public_key) != _ED25519_LEN:
        raise PeerIdError("an Ed25519 public key is 32 bytes")
    proto = bytes([0x08, _KEY_TYPE_ED25519, 0x12, _ED25519_LEN]) + public_key
    return b58encode(bytes([_IDENTITY, len(proto)]) + proto)


def _ed25519_from_protobuf(message: bytes) -> bytes:
    key_type: int | None = None
    data: bytes | None = None
    pos = 0
    while pos < len(message):
        tag, pos = _read_varint(message, pos)
        field, wire = tag >> 3, tag & 7
        if field == 1 and wire == 0 and key_type is None:
            key_type, pos = _read_varint(message, pos)
        elif field == 2 and wire == 2 and data is None:
            size, pos = _read_varint(message, pos)
            if pos + size > len(message):
                raise PeerIdError("peer id public key is cut off")
            data, pos = message[pos : pos + size], pos + size
        else:
            # Unknown or repeated fields would let two ids name one key: refuse them.
            raise PeerIdError(f"peer id public key has an unexpected field {field}")
    if key_type != _KEY_TYPE_ED25519:
        raise PeerIdError(f"peer id key type is {key_type}, not Ed25519 (1)")
    if data is None or len(data) != _ED25519_LEN:
        raise PeerIdError("peer id Ed25519 key is not 32 bytes")
    return data


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise PeerIdError("peer id is cut off or malformed")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
