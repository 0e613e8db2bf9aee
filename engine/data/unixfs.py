"""UnixFS (the IPFS file format) on dag-pb: importing a file or folder into blocks, and reading
blocks back into one, the same blocks and CIDs as ``ipfs add --cid-version 1``.

Import: a file is cut into 256 KiB chunks, each a raw block; more than one chunk are joined by
dag-pb File nodes in a balanced tree of 174 links a node (go-ipfs's and js-ipfs's balanced
layout); a folder is a dag-pb Directory node linking its entries by name, sorted (dag-pb's
canonical order). tests/data/test_unixfs_interop.py checks the CIDs against the reference
importer (ipfs-unixfs-importer), and pins a few.

Reading blocks that came from someone else is the hostile half: every node is decoded under
bounds (its size, its links, the depth of the tree, the entries a folder has, the bytes a
file says it holds), every name is checked as a relative path component before it becomes a
file (engine/domain/safe_paths.py), and sizes a node claims must add up to what its children
hold, or the whole read stops with the block that lied named.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from engine.domain.cid import DAG_PB, RAW, Cid, CidError, read_varint, varint

CHUNK_BYTES = 262_144
MAX_LINKS_PER_NODE = 174
# A folder node over this (names plus CIDs) would be a HAMT shard in IPFS; we refuse to make
# one rather than make a different CID.
SHARD_THRESHOLD_BYTES = 262_144
MAX_BLOCK_BYTES = 1 << 20  # bitswap's own limit is 2 MiB; UnixFS blocks stay far below
MAX_NODE_LINKS = 8192  # a 256 KiB folder of one-letter names holds about 6,000
MAX_DEPTH = 32  # folders in folders, and file trees (174^4 chunks is 240 TB)
MAX_NAME_BYTES = 255

DIRECTORY = 1
FILE = 2
_TYPES = {0: "raw", 1: "directory", 2: "file", 3: "metadata", 4: "symlink", 5: "HAMT shard"}


class UnixfsError(ValueError):
    """A DAG we cannot make or will not read, said in one line."""


@dataclass(frozen=True)
class Node:
    """What a parent links to: the child's CID, the content bytes under it (a File node's
    blocksizes), and the bytes of every block under it (a link's Tsize)."""

    cid: Cid
    file_size: int
    dag_size: int


@dataclass(frozen=True)
class Link:
    cid: Cid
    name: str
    tsize: int


@dataclass(frozen=True)
class PbNode:
    links: tuple[Link, ...]
    data: bytes | None


@dataclass(frozen=True)
class UnixfsData:
    type: int
    data: bytes = b""
    filesize: int | None = None
    blocksizes: tuple[int, ...] = ()


# -- protobuf, by hand: two small messages, every length bounded by the block it is in --------


def _field(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def _len_field(number: int, payload: bytes) -> bytes:
    return _field(number, 2) + varint(len(payload)) + payload


def encode_node(links: list[Link], data: bytes | None) -> bytes:
    """dag-pb's canonical form: links (sorted by the caller where names matter) before data."""
    out = bytearray()
    for link in links:
        body = _len_field(1, link.cid.binary) + _len_field(2, link.name.encode())
        body += _field(3, 0) + varint(link.tsize)
        out += _len_field(2, body)
    if data is not None:
        out += _len_field(1, data)
    return bytes(out)


def encode_unixfs(data: UnixfsData) -> bytes:
    out = bytearray(_field(1, 0) + varint(data.type))
    if data.data:
        out += _len_field(2, data.data)
    if data.filesize is not None:
        out += _field(3, 0) + varint(data.filesize)
    for size in data.blocksizes:
        out += _field(4, 0) + varint(size)
    return bytes(out)


def _fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of a protobuf message, bounded by ``buf``."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = read_varint(buf, pos)
            yield number, wire_type, value
        elif wire_type == 2:
            size, pos = read_varint(buf, pos)
            if pos + size > len(buf):
                raise UnixfsError("a field runs past the end of its block")
            yield number, wire_type, buf[pos : pos + size]
            pos += size
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
        else:
            raise UnixfsError(f"protobuf wire type {wire_type} in a dag-pb block")
    if pos != len(buf):
        raise UnixfsError("a field runs past the end of its block")


def decode_node(block: bytes) -> PbNode:
    if len(block) > MAX_BLOCK_BYTES:
        raise UnixfsError(f"a block of {len(block)} bytes (at most {MAX_BLOCK_BYTES})")
    links: list[Link] = []
    data: bytes | None = None
    try:
        for number, wire_type, value in _fields(block):
            if number == 2 and isinstance(value, bytes):
                if len(links) >= MAX_NODE_LINKS:
                    raise UnixfsError(f"a node with over {MAX_NODE_LINKS} links")
                links.append(_decode_link(value))
            elif number == 1 and isinstance(value, bytes):
                data = value
            else:
                raise UnixfsError(f"dag-pb field {number} (wire type {wire_type})")
    except CidError as exc:
        raise UnixfsError(f"a link's CID: {exc}") from None
    return PbNode(tuple(links), data)


def _decode_link(buf: bytes) -> Link:
    cid: Cid | None = None
    name, tsize = "", 0
    for number, _, value in _fields(buf):
        if number == 1 and isinstance(value, bytes):
            cid = Cid.from_bytes(value)
        elif number == 2 and isinstance(value, bytes):
            if len(value) > MAX_NAME_BYTES:
                raise UnixfsError(f"a link name of {len(value)} bytes")
            try:
                name = value.decode()
            except UnicodeDecodeError:
                raise UnixfsError("a link name that is not UTF-8") from None
        elif number == 3 and isinstance(value, int):
            tsize = value
    if cid is None:
        raise UnixfsError("a link without a CID")
    return Link(cid, name, tsize)


def decode_unixfs(buf: bytes) -> UnixfsData:
    type_: int | None = None
    data, filesize, sizes = b"", None, []
    for number, _, value in _fields(buf):
        if number == 1 and isinstance(value, int):
            type_ = value
        elif number == 2 and isinstance(value, bytes):
            data = value
        elif number == 3 and isinstance(value, int):
            filesize = value
        elif number == 4 and isinstance(value, int):
            sizes.append(value)
        elif number == 4 and isinstance(value, bytes):  # packed
            pos = 0
            while pos < len(value):
                size, pos = read_varint(value, pos)
                sizes.append(size)
        if len(sizes) > MAX_NODE_LINKS:
            raise UnixfsError(f"a node with over {MAX_NODE_LINKS} block sizes")
    if type_ is None:
        raise UnixfsError("a UnixFS node without a type")
    return UnixfsData(type_, data, filesize, tuple(sizes))


def type_name(type_: int) -> str:
    return _TYPES.get(type_, f"type {type_}")


# -- import -----------------------------------------------------------------------------------

Put = Callable[[Cid, bytes], None]


def import_file(
    stream: BinaryIO, put: Put, on_bytes: Callable[[int], None] = lambda n: None
) -> Node:
    """Chunks ``stream`` into raw leaves and joins them in a balanced tree; ``put`` takes each
    block as it is made (a file is never held whole)."""
    leaves: list[Node] = []
    while True:
        chunk = stream.read(CHUNK_BYTES)
        if not chunk and leaves:
            break
        cid = Cid.of(RAW, chunk)
        put(cid, chunk)
        leaves.append(Node(cid, len(chunk), len(chunk)))
        on_bytes(len(chunk))
        if len(chunk) < CHUNK_BYTES:
            break
    level = leaves
    while len(level) > 1:
        level = [
            _file_node(level[i : i + MAX_LINKS_PER_NODE], put)
            for i in range(0, len(level), MAX_LINKS_PER_NODE)
        ]
    return level[0]


def _file_node(children: list[Node], put: Put) -> Node:
    if len(children) == 1:
        return children[0]
    size = sum(child.file_size for child in children)
    meta = UnixfsData(FILE, filesize=size, blocksizes=tuple(c.file_size for c in children))
    links = [Link(child.cid, "", child.dag_size) for child in children]
    block = encode_node(links, encode_unixfs(meta))
    cid = Cid.of(DAG_PB, block)
    put(cid, block)
    return Node(cid, size, len(block) + sum(child.dag_size for child in children))


def directory_node(entries: dict[str, Node], put: Put) -> Node:
    """A Directory node linking ``entries`` by name (sorted by their bytes, as dag-pb's
    canonical form has them)."""
    names = sorted(entries, key=lambda name: name.encode())
    estimate = sum(len(name.encode()) + len(entries[name].cid.binary) for name in names)
    if estimate > SHARD_THRESHOLD_BYTES:
        raise UnixfsError(
            f"a folder of {len(names)} entries is too large for one node: IPFS would shard it "
            "(HAMT), which this node does not make; split it into smaller folders"
        )
    links = [Link(entries[name].cid, name, entries[name].dag_size) for name in names]
    block = encode_node(links, encode_unixfs(UnixfsData(DIRECTORY)))
    cid = Cid.of(DAG_PB, block)
    put(cid, block)
    size = sum(entry.file_size for entry in entries.values())
    return Node(cid, size, len(block) + sum(link.tsize for link in links))
