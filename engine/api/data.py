"""Data by content id (issue 26; engine/data/): files and folders added as UnixFS, kept by
CID, read back out."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from engine.api.base import Command, Record

CidText = Annotated[str, Meta(min_length=1, max_length=128)]
PathText = Annotated[str, Meta(min_length=1, max_length=4096)]


class DataRoot(Record, frozen=True):
    """A file or folder this node keeps, by its root CID."""

    cid: str
    name: str  # the file or folder name it was added or fetched under
    kind: str  # "file" or "directory"
    size: int  # content bytes (a folder's: its files' together)
    blocks: int
    dag_bytes: int  # what its blocks take on disk
    pinned: bool  # kept until unpinned; an unpinned root may be removed to make room
    added_at: float  # POSIX seconds


class BlockExchange(Record, frozen=True):
    """Bitswap since this node started (engine/data/bitswap.py)."""

    served_blocks: int = 0
    served_bytes: int = 0
    received_blocks: int = 0
    unwanted_blocks: int = 0  # blocks peers sent that nobody asked for
    refused: int = 0  # wants and streams over a peer's, address's or subnet's bounds
    bad_peers: tuple[str, ...] = ()  # dropped for unasked blocks: never asked again


class DataRoots(Record, frozen=True):
    roots: tuple[DataRoot, ...] = ()
    blocks: int = 0  # every block on disk, roots' or not
    bytes: int = 0
    exchange: BlockExchange = BlockExchange()


class DataExported(Record, frozen=True):
    cid: str
    path: str
    size: int


class DataRemoved(Record, frozen=True):
    cid: str
    blocks: int  # blocks removed (those no other root holds)
    bytes: int


class DataAdd(Command, tag="data_add", frozen=True):
    """``path`` on this node's machine (the CLI sends it absolute)."""

    reply = DataRoot
    path: PathText
    hidden: bool = False  # a folder's dot files too (`ipfs add -r --hidden`)
    pin: bool = True


class DataGet(Command, tag="data_get", frozen=True):
    """Writes the root as ``out``/its name; ``out`` absolute, on this node's machine."""

    reply = DataExported
    cid: CidText
    out: PathText
    # Peers to ask first (peer ids), before the DHT's providers and our connections.
    peers: tuple[Annotated[str, Meta(max_length=128)], ...] = ()


class DataList(Command, tag="data_ls", frozen=True):
    reply = DataRoots


class DataPin(Command, tag="data_pin", frozen=True):
    """Keep ``cid`` (fetched from peers first when it is not all here)."""

    reply = DataRoot
    cid: CidText
    peers: tuple[Annotated[str, Meta(max_length=128)], ...] = ()


class DataUnpin(Command, tag="data_unpin", frozen=True):
    reply = DataRoot
    cid: CidText


class DataRemove(Command, tag="data_rm", frozen=True):
    reply = DataRemoved
    cid: CidText
