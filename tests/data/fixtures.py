"""Files whose CIDs the reference UnixFS importer computed (ipfs-unixfs-importer 17.1.1 with
`ipfs add --cid-version 1`'s settings, tests/interop/js/unixfs_cids.mjs), made from a
sha256 chain so that they are the same bytes everywhere without being stored."""

from __future__ import annotations

import hashlib
from pathlib import Path

HELLO_CID = "bafkreicysg23kiwv34eg2d7qweipxwosdo2py4ldv42nbauguluen5v6am"  # b"hello\n"
EMPTY_CID = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"
# What the reference gives for the files ``make`` writes.
PINNED = {
    "three-chunks.bin": "bafybeif7gashsus4udyu6yjt2sfckh2hfwawqif74nhuzevgbopcvmarii",
    "two-levels.bin": "bafybeie7kdyczgarpvwein7q7rjzwhrvdvtytjzcs7djjhx4vj4evrbmze",
    "dataset": "bafybeidtzgpk2qhh4ckmyi3ea5njj4p763bddlml6pmmnjabbfqrfduygm",
}


def pattern(size: int, seed: str) -> bytes:
    out = bytearray()
    block = seed.encode()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


def make(root: Path, names: tuple[str, ...] = tuple(PINNED)) -> Path:
    """Three chunks (one level), 176 chunks (two levels of 174 links), and a folder with a
    subfolder, an empty folder, a chunked file and a non-ASCII name."""
    root.mkdir(parents=True, exist_ok=True)
    if "three-chunks.bin" in names:
        (root / "three-chunks.bin").write_bytes(pattern(600_000, "three"))
    if "two-levels.bin" in names:
        (root / "two-levels.bin").write_bytes(pattern(175 * 262_144 + 1, "levels"))
    if "dataset" in names:
        data = root / "dataset"
        (data / "train").mkdir(parents=True, exist_ok=True)
        (data / "empty").mkdir(exist_ok=True)
        (data / "train" / "x.csv").write_bytes(b"a,b\n1,2\n")
        (data / "README").write_text("data\n")
        (data / "big.bin").write_bytes(pattern(300_000, "big"))
        (data / "é ü.txt").write_text("ü")
    return root
