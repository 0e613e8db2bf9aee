"""UnixFS import and read-back (engine/data/): the CIDs the reference importer gives, pinned;
the round trip; and what a DAG from someone else may not do."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from engine.data.dag import export, file_bytes, summarize, walk
from engine.data.unixfs import (
    DIRECTORY,
    FILE,
    Link,
    Node,
    UnixfsData,
    UnixfsError,
    decode_node,
    directory_node,
    encode_node,
    encode_unixfs,
    import_file,
)
from engine.domain.cid import DAG_PB, RAW, Cid, CidError
from tests.data.fixtures import EMPTY_CID, HELLO_CID, PINNED, make


class Blocks(dict[Cid, bytes]):
    """An in-memory blockstore: put and get, verified like the real one."""

    def put(self, cid: Cid, block: bytes) -> None:
        assert cid.verify(block)
        self[cid] = block

    def get_block(self, cid: Cid) -> bytes:
        block = self[cid]
        assert cid.verify(block), f"{cid} does not hash to itself"
        return block


def _import(path: Path, blocks: Blocks) -> Node:
    if path.is_dir():
        return directory_node({c.name: _import(c, blocks) for c in path.iterdir()}, blocks.put)
    with path.open("rb") as handle:
        return import_file(handle, blocks.put)


def test_small_and_empty_files_are_one_raw_block_with_the_cids_ipfs_gives() -> None:
    for data, expected in ((b"hello\n", HELLO_CID), (b"", EMPTY_CID)):
        blocks = Blocks()
        node = import_file(io.BytesIO(data), blocks.put)
        assert str(node.cid) == expected and node.cid.codec == RAW
        assert list(blocks) == [node.cid]


@pytest.mark.parametrize("name", list(PINNED))
def test_files_and_folders_get_the_reference_importers_cids(tmp_path: Path, name: str) -> None:
    make(tmp_path, (name,))
    blocks = Blocks()
    node = _import(tmp_path / name, blocks)
    assert str(node.cid) == PINNED[name]
    # Read back byte for byte, and every block reached once from the root.
    out = tmp_path / "out"
    out.mkdir()
    written = export(node.cid, blocks.get_block, out, name)
    assert _tree(written) == _tree(tmp_path / name)
    assert {cid for cid, _ in walk(node.cid, blocks.get_block)} == set(blocks)
    summary = summarize(node.cid, blocks.get_block)
    assert summary.size == node.file_size and summary.blocks == len(blocks)


def _tree(root: Path) -> dict[str, bytes | None]:
    if root.is_file():
        return {"": root.read_bytes()}
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def test_cids_are_parsed_strictly() -> None:
    cid = Cid.parse(HELLO_CID)
    assert str(cid) == HELLO_CID and Cid.from_bytes(cid.binary) == cid
    for text, says in (
        ("QmWATWQ7fVPP2EFGu71UkfnqhYXDYH566qy47CnJDgvs8u", "CIDv0"),
        ("zb2rhe5P4gXftAwvA4eXQ5HJwsER2owDyS9sKaQRRVQPn93bA", "base32"),
        ("bafy!!!!", "not base32"),
        ("b" + "a" * 300, "not a CID"),
        ("", "not a CID"),
    ):
        with pytest.raises(CidError, match=says):
            Cid.parse(text)
    sha512 = bytes((1, 0x55, 0x13, 64)) + bytes(64)
    with pytest.raises(CidError, match="only sha2-256"):
        Cid.from_bytes(sha512)
    cbor = bytes((1, 0x71, 0x12, 32)) + bytes(32)
    with pytest.raises(CidError, match="only raw and dag-pb"):
        Cid.from_bytes(cbor)


def _put_node(blocks: Blocks, links: list[Link], meta: UnixfsData) -> Cid:
    block = encode_node(links, encode_unixfs(meta))
    cid = Cid.of(DAG_PB, block)
    blocks[cid] = block
    return cid


def _leaf(blocks: Blocks, data: bytes) -> Cid:
    cid = Cid.of(RAW, data)
    blocks[cid] = data
    return cid


def test_a_file_node_whose_sizes_do_not_add_up_is_refused(tmp_path: Path) -> None:
    blocks = Blocks()
    leaf = _leaf(blocks, b"1234")
    lies = [
        UnixfsData(FILE, filesize=4, blocksizes=(3,)),  # the leaf holds 4
        UnixfsData(FILE, filesize=400, blocksizes=(4,)),  # claims more than its parts
        UnixfsData(FILE, filesize=4, blocksizes=(4, 4)),  # two sizes, one link
    ]
    for meta in lies:
        root = _put_node(blocks, [Link(leaf, "", 4)], meta)
        with pytest.raises(UnixfsError):
            b"".join(file_bytes(root, blocks.get_block))


def test_names_from_a_dag_never_leave_the_output_folder(tmp_path: Path) -> None:
    blocks = Blocks()
    leaf = _leaf(blocks, b"x")
    out = tmp_path / "out"
    out.mkdir()
    for name in ("..", "../escape", "a/b", "", "bell\x07", "/etc/passwd"):
        root = _put_node(blocks, [Link(leaf, name, 1)], UnixfsData(DIRECTORY))
        with pytest.raises(UnixfsError):
            export(root, blocks.get_block, out, "fetched")
        (out / "fetched").rmdir()  # made before the bad entry was met
    assert not (tmp_path / "escape").exists() and sorted(out.iterdir()) == []


def test_a_dag_may_not_nest_without_end_or_hold_unbounded_links(tmp_path: Path) -> None:
    blocks = Blocks()
    child = _put_node(blocks, [], UnixfsData(DIRECTORY))
    for _ in range(40):  # 40 folders deep
        child = _put_node(blocks, [Link(child, "d", 1)], UnixfsData(DIRECTORY))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(UnixfsError, match="deeper"):
        export(child, blocks.get_block, out, "deep")
    many = encode_node([Link(child, f"n{i}", 1) for i in range(9000)], None)
    with pytest.raises(UnixfsError, match="over 8192 links"):
        decode_node(many)
    symlink = _put_node(blocks, [], UnixfsData(4, data=b"/etc/passwd"))
    with pytest.raises(UnixfsError, match="symlink"):
        export(symlink, blocks.get_block, out, "link")
