"""Walking a UnixFS DAG: the blocks under a root (for pinning, removing and serving), and a
root read back into a file or folder (``data get``).

The DAG may have come from a peer: each block is decoded under ``unixfs``'s bounds, the walk
is bounded in depth and in entries, a File node's block sizes must match its links and add up
to its file size, and every name becomes a path only through ``safe_paths.inside`` below the
output folder (no separator, no "..", no control characters, no link followed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.data.unixfs import (
    DIRECTORY,
    FILE,
    MAX_DEPTH,
    UnixfsError,
    decode_node,
    decode_unixfs,
    type_name,
)
from engine.domain.cid import DAG_PB, RAW, Cid
from engine.domain.safe_paths import inside, relative_problem, shown

MAX_ENTRIES = 100_000  # files and folders in one root

GetBlock = Callable[[Cid], bytes]


@dataclass(frozen=True)
class Summary:
    kind: str  # "file" or "directory"
    size: int  # content bytes (a folder: its files' together)
    blocks: int
    dag_bytes: int


def children(cid: Cid, block: bytes) -> list[Cid]:
    """The CIDs a block links to (none for a raw leaf)."""
    if cid.codec == RAW:
        return []
    return [link.cid for link in decode_node(block).links]


def walk(root: Cid, get: GetBlock) -> Iterator[tuple[Cid, bytes]]:
    """Every block under ``root`` once (depth first), each verified by ``get``."""
    seen: set[Cid] = set()
    stack = [(root, 0)]
    while stack:
        cid, depth = stack.pop()
        if cid in seen:
            continue
        if depth > MAX_DEPTH * 2 or len(seen) >= MAX_ENTRIES * 8:
            raise UnixfsError(f"the DAG under {root} is deeper or larger than this node reads")
        seen.add(cid)
        block = get(cid)
        yield cid, block
        stack.extend((child, depth + 1) for child in reversed(children(cid, block)))


def summarize(root: Cid, get: GetBlock) -> Summary:
    blocks = dag_bytes = 0
    for _, block in walk(root, get):
        blocks += 1
        dag_bytes += len(block)
    kind, size = _kind_and_size(root, get, 0)
    return Summary(kind, size, blocks, dag_bytes)


def _kind_and_size(cid: Cid, get: GetBlock, depth: int) -> tuple[str, int]:
    """A file's size as its root says it (``file_bytes`` checks it when read); a folder's,
    its entries' together."""
    if depth > MAX_DEPTH:
        raise UnixfsError(f"folders nested deeper than {MAX_DEPTH}")
    block = get(cid)
    if cid.codec == RAW:
        return "file", len(block)
    node = decode_node(block)
    meta = decode_unixfs(node.data or b"")
    if meta.type == FILE:
        return "file", meta.filesize if meta.filesize is not None else len(meta.data)
    if meta.type == DIRECTORY:
        return "directory", sum(_kind_and_size(link.cid, get, depth + 1)[1] for link in node.links)
    raise UnixfsError(f"{cid} is a UnixFS {type_name(meta.type)}, which this node does not read")


def export(root: Cid, get: GetBlock, out: Path, name: str) -> Path:
    """Writes ``root`` as ``out/name`` (a file, or a folder and everything in it); refuses
    when it exists. Returns the path written."""
    if why := relative_problem(name) or ("/" in name and "has a '/'"):
        raise UnixfsError(f"name {shown(name)} {why}")
    target = inside(out, name, what="data")
    if target.exists():
        raise UnixfsError(f"{target} exists: choose another folder (-o) or remove it")
    entries = [0]
    _export(root, get, out, name, 0, entries)
    return target


def _export(cid: Cid, get: GetBlock, out: Path, rel: str, depth: int, entries: list[int]) -> None:
    if depth > MAX_DEPTH:
        raise UnixfsError(f"folders nested deeper than {MAX_DEPTH}")
    entries[0] += 1
    if entries[0] > MAX_ENTRIES:
        raise UnixfsError(f"more than {MAX_ENTRIES} files and folders")
    block = get(cid)
    target = inside(out, rel, what="data")
    if cid.codec == RAW:
        target.write_bytes(block)
        return
    node = decode_node(block)
    meta = decode_unixfs(node.data or b"")
    if meta.type == DIRECTORY:
        target.mkdir()
        for link in node.links:
            if why := relative_problem(link.name) or ("/" in link.name and "has a '/'"):
                raise UnixfsError(f"{cid} names an entry {shown(link.name)}, which {why}")
            _export(link.cid, get, out, f"{rel}/{link.name}", depth + 1, entries)
        return
    if meta.type != FILE:
        raise UnixfsError(
            f"{cid} is a UnixFS {type_name(meta.type)}, which this node does not read"
        )
    with target.open("xb") as handle:
        for piece in file_bytes(cid, get):
            handle.write(piece)


def file_bytes(cid: Cid, get: GetBlock, depth: int = 0) -> Iterator[bytes]:
    """A UnixFS file's content, in order, checked against the sizes its nodes claim."""
    if depth > MAX_DEPTH:
        raise UnixfsError(f"a file tree deeper than {MAX_DEPTH}")
    block = get(cid)
    if cid.codec == RAW:
        yield block
        return
    if cid.codec != DAG_PB:
        raise UnixfsError(f"{cid}: not a UnixFS block")
    node = decode_node(block)
    meta = decode_unixfs(node.data or b"")
    if meta.type != FILE:
        raise UnixfsError(f"{cid} is a {type_name(meta.type)} inside a file")
    if len(meta.blocksizes) != len(node.links):
        raise UnixfsError(f"{cid}: {len(node.links)} links but {len(meta.blocksizes)} sizes")
    declared = len(meta.data) + sum(meta.blocksizes)
    if meta.filesize is not None and meta.filesize != declared:
        raise UnixfsError(f"{cid} says {meta.filesize} bytes but its parts hold {declared}")
    yield meta.data
    for link, size in zip(node.links, meta.blocksizes, strict=True):
        got = 0
        for piece in file_bytes(link.cid, get, depth + 1):
            got += len(piece)
            if got > size:
                raise UnixfsError(f"{link.cid} holds more than the {size} bytes {cid} says")
            yield piece
        if got != size:
            raise UnixfsError(f"{link.cid} holds {got} bytes, {cid} says {size}")
