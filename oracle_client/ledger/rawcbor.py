"""Slices of a transaction's original CBOR bytes.

Hashes are over the bytes a wallet signed, not over pycardano's re-encoding: the tx id is the
hash of the body as sent, the script data hash covers the redeemers and datums as sent, the
auxiliary data hash the metadata as sent. Re-encoding could differ (indefinite lists, set tags)
and would then reject valid transactions or, worse, accept signatures over other bytes.
"""

from __future__ import annotations

import io

from pycardano.cbor import cbor2

_ARRAY = 4
_MAP = 5


def _header(raw: bytes, major: int, what: str) -> tuple[int, int]:
    """(item count, header length) of a definite array or map at the start of `raw`."""
    if not raw:
        raise ValueError(f"{what}: empty")
    first = raw[0]
    if first >> 5 != major:
        raise ValueError(f"{what}: expected a CBOR {'array' if major == _ARRAY else 'map'}")
    info = first & 0x1F
    if info < 24:
        return info, 1
    if info in (24, 25, 26, 27):
        size = 1 << (info - 24)
        if len(raw) < 1 + size:
            raise ValueError(f"{what}: truncated")
        return int.from_bytes(raw[1 : 1 + size], "big"), 1 + size
    raise ValueError(f"{what}: indefinite-length encoding is not supported here")


def _items(raw: bytes, start: int, count: int, what: str) -> tuple[list[bytes], int]:
    stream = io.BytesIO(raw)
    stream.seek(start)
    decoder = cbor2.CBORDecoder(stream)
    out: list[bytes] = []
    for _ in range(count):
        begin = stream.tell()
        try:
            decoder.decode()
        except Exception as exc:  # cbor2 raises several types; all mean "not CBOR"
            raise ValueError(f"{what}: {exc}") from exc
        out.append(raw[begin : stream.tell()])
    return out, stream.tell()


def array_items(raw: bytes, what: str = "transaction") -> list[bytes]:
    """Raw bytes of each element of a definite CBOR array that spans all of `raw`."""
    count, offset = _header(raw, _ARRAY, what)
    if count > len(raw):
        raise ValueError(f"{what}: truncated")
    items, end = _items(raw, offset, count, what)
    if end != len(raw):
        raise ValueError(f"{what}: {len(raw) - end} trailing bytes")
    return items


def map_values(raw: bytes, what: str) -> dict[int, bytes]:
    """Raw bytes of each value of a definite CBOR map with small unsigned integer keys."""
    count, offset = _header(raw, _MAP, what)
    if count * 2 > len(raw):
        raise ValueError(f"{what}: truncated")
    items, end = _items(raw, offset, count * 2, what)
    if end != len(raw):
        raise ValueError(f"{what}: {len(raw) - end} trailing bytes")
    out: dict[int, bytes] = {}
    for key_raw, value_raw in zip(items[0::2], items[1::2], strict=True):
        key = cbor2.loads(key_raw)
        if not isinstance(key, int) or key in out:
            raise ValueError(f"{what}: keys must be distinct integers")
        out[key] = value_raw
    return out
