"""Our UnixFS importer against the reference one (ipfs-unixfs-importer, what Helia adds with,
run by tests/interop/js/unixfs_cids.mjs with `ipfs add --cid-version 1`'s settings): the same
root CID for random files and folders. scripts/test.sh installs the JS side (`npm ci`);
nothing is downloaded here."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.data.dag import walk
from engine.data.unixfs import Node, directory_node, import_file
from engine.domain.cid import Cid

JS = Path(__file__).parent / "js"


def _reference(path: Path) -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: install Node.js >= 20 (scripts/test.sh needs it too)")
    if not (JS / "node_modules" / "ipfs-unixfs-importer").is_dir():
        pytest.fail(f"{JS}/node_modules is missing: run scripts/test.sh (it runs `npm ci` there)")
    done = subprocess.run(
        [node, str(JS / "unixfs_cids.mjs"), str(path)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return str(json.loads(done.stdout)["cid"])


def _ours(path: Path, blocks: dict[Cid, bytes]) -> Node:
    if path.is_dir():
        entries = {c.name: _ours(c, blocks) for c in path.iterdir() if not c.name.startswith(".")}
        return directory_node(entries, blocks.__setitem__)
    with path.open("rb") as handle:
        return import_file(handle, blocks.__setitem__)


def _random_tree(root: Path, rng: random.Random, depth: int = 0) -> None:
    root.mkdir()
    names = ["a", "B", "z.txt", "données", "日本", "with space", "0", "-dash", ".hidden"]
    for name in rng.sample(names, rng.randint(0, 5)):
        if depth < 3 and rng.random() < 0.3:
            _random_tree(root / name, rng, depth + 1)
        else:
            # Around the chunk size and its multiples, where off-by-ones live.
            size = rng.choice(
                [0, 1, 262_143, 262_144, 262_145, 3 * 262_144, rng.randint(0, 2_000_000)]
            )
            (root / name).write_bytes(rng.randbytes(size))


@pytest.mark.parametrize("seed", range(4))
def test_random_files_and_folders_get_the_reference_cid(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    tree = tmp_path / "tree"
    _random_tree(tree, rng)
    blocks: dict[Cid, bytes] = {}
    node = _ours(tree, blocks)
    assert str(node.cid) == _reference(tree)
    assert all(cid.verify(block) for cid, block in walk(node.cid, blocks.__getitem__))
    single = tmp_path / "single.bin"
    single.write_bytes(rng.randbytes(rng.randint(262_145, 1_500_000)))
    assert str(_ours(single, {}).cid) == _reference(single)
