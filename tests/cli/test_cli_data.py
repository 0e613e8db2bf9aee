"""`nunet-tui data add | get | ls | pin | unpin | rm` as a user runs them (issue 26): the CID
IPFS gives, the folder back byte for byte, and errors of one line that leave the store as it
was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.config import Paths
from tests.conftest import run_cli
from tests.data.fixtures import PINNED, make


def _data(*args: str, home: Paths) -> Any:
    result = run_cli("data", *args, "--json", home=home)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _fails(*args: str, home: Paths) -> str:
    result = run_cli("data", *args, home=home)
    assert result.returncode == 1 and result.stdout == "", result
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    return result.stderr


def test_add_get_pin_and_remove_a_dataset(node_home: Paths, tmp_path: Path) -> None:
    make(tmp_path / "in", ("dataset", "three-chunks.bin"))
    folder = _data("add", str(tmp_path / "in" / "dataset"), home=node_home)
    assert folder["cid"] == PINNED["dataset"] and folder["kind"] == "directory"
    assert folder["size"] == 300_000 + 8 + 5 + 2 and folder["pinned"] is True
    file = _data("add", str(tmp_path / "in" / "three-chunks.bin"), "--no-pin", home=node_home)
    assert file["cid"] == PINNED["three-chunks.bin"] and file["pinned"] is False
    listed = _data("ls", home=node_home)
    assert {r["cid"] for r in listed["roots"]} == {folder["cid"], file["cid"]}

    out = tmp_path / "out"
    out.mkdir()
    got = _data("get", folder["cid"], "-o", str(out), home=node_home)
    assert got["path"] == str(out / "dataset")
    for path in (tmp_path / "in" / "dataset").rglob("*"):
        copy = out / "dataset" / path.relative_to(tmp_path / "in" / "dataset")
        assert copy.is_dir() if path.is_dir() else copy.read_bytes() == path.read_bytes()
    # Written once: a second get into the same folder is refused, the first copy untouched.
    assert "exists" in _fails("get", folder["cid"], "-o", str(out), home=node_home)

    assert _data("pin", file["cid"], home=node_home)["pinned"] is True
    assert _data("unpin", file["cid"], home=node_home)["pinned"] is False
    removed = _data("rm", folder["cid"], home=node_home)
    assert removed["blocks"] == folder["blocks"] == 9  # its own; the file keeps its 4
    assert [r["cid"] for r in _data("ls", home=node_home)["roots"]] == [file["cid"]]
    # Not here any more: it would come from peers, which a node without its network cannot ask.
    assert "needs a running node" in _fails(
        "get", folder["cid"], "-o", str(tmp_path), home=node_home
    )


def test_bad_cids_and_paths_are_one_line_each(node_home: Paths, tmp_path: Path) -> None:
    assert "CIDv0" in _fails(
        "get", "QmWATWQ7fVPP2EFGu71UkfnqhYXDYH566qy47CnJDgvs8u", home=node_home
    )
    assert "not base32" in _fails("pin", "bafy!!", home=node_home)
    assert "no such file" in _fails("add", str(tmp_path / "absent"), home=node_home)
    (tmp_path / "link").symlink_to("/etc")
    assert "links are not followed" in _fails("add", str(tmp_path / "link"), home=node_home)
    assert "is not here" in _fails("rm", PINNED["dataset"], home=node_home)


def test_a_fifo_or_socket_in_a_folder_is_refused_not_waited_on(
    node_home: Paths, tmp_path: Path
) -> None:
    import os
    import socket

    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "ok.txt").write_text("fine")
    os.mkfifo(folder / "pipe")
    said = _fails("add", str(folder), home=node_home)
    assert "is a FIFO, not a file or folder" in said
    (folder / "pipe").unlink()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(folder / "sock"))
        assert "socket or device" in _fails("add", str(folder), home=node_home)
    assert _data("ls", home=node_home)["roots"] == []  # nothing recorded by a refused add
