"""Blocks on disk, one file each, named by CID (``<home>/data/blocks/<cid>``).

A block is written once, atomically (a temporary file renamed into place), and hashed again
every time it is read: a file changed on disk, by a crash or by anyone, is never served or
used as the block its name says (it is deleted, and the read says which block was bad).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from engine.data.unixfs import MAX_BLOCK_BYTES
from engine.domain.cid import Cid


def write_atomically(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` whole or not at all (a temporary file beside it, renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class BlockMissing(LookupError):
    def __init__(self, cid: Cid) -> None:
        super().__init__(f"block {cid} is not here")
        self.cid = cid


class BlockCorrupt(ValueError):
    def __init__(self, cid: Cid) -> None:
        super().__init__(f"block {cid} on disk does not hash to its CID: removed")
        self.cid = cid


class Blockstore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, cid: Cid) -> Path:
        return self.root / str(cid)  # a CID's text is base32: a safe file name

    def has(self, cid: Cid) -> bool:
        return self.path(cid).is_file()

    def put(self, cid: Cid, block: bytes) -> None:
        if not cid.verify(block):
            raise BlockCorrupt(cid)
        path = self.path(cid)
        if not path.is_file():
            write_atomically(path, block)

    def get(self, cid: Cid) -> bytes:
        path = self.path(cid)
        try:
            with path.open("rb") as handle:
                block = handle.read(MAX_BLOCK_BYTES + 1)
        except FileNotFoundError:
            raise BlockMissing(cid) from None
        if not cid.verify(block):
            path.unlink(missing_ok=True)
            raise BlockCorrupt(cid)
        return block

    def delete(self, cid: Cid) -> int:
        """Removes the block; its size (0 when it was not here)."""
        path = self.path(cid)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return 0
        return size

    def cids(self) -> list[Cid]:
        out = []
        if self.root.is_dir():
            for path in self.root.iterdir():
                if not path.name.startswith("."):
                    try:
                        out.append(Cid.parse(path.name))
                    except ValueError:
                        continue
        return out
