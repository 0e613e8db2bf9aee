"""Data by CID between real daemons over bitswap (issue 26 §1): a node fetches a folder that
another node added, finding it through the DHT's provider records, and then serves it too."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.data.fixtures import PINNED, make, pattern


@pytest.mark.timeout(180)
def test_a_folder_added_on_one_node_is_fetched_by_cid_on_another(
    daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    boot = daemons("boot", 70)
    holder = daemons("holder", 71, bootstrap=boot.addrs()[0])
    fetcher = daemons("fetcher", 72, bootstrap=boot.addrs()[0])
    source = make(tmp_path / "in", ("dataset",)) / "dataset"
    (source / "weights.bin").write_bytes(pattern(3_000_000, "weights"))  # 12 chunks
    added = holder.cli("data", "add", str(source))
    cid = added["cid"]
    assert cid != PINNED["dataset"]  # the weights are in it too

    out = tmp_path / "out"
    out.mkdir()
    # The boot node has nothing; the holder's provider record in the DHT names it.
    got = wait_for(
        lambda: _try_get(fetcher, cid, out),
        "the fetcher never got the folder from the holder",
        60,
    )
    written = Path(got["path"])
    for path in source.rglob("*"):
        copy = written / path.relative_to(source)
        assert copy.is_dir() if path.is_dir() else copy.read_bytes() == path.read_bytes()
    listed = {r["cid"]: r for r in fetcher.cli("data", "ls")["roots"]}
    assert listed[cid]["pinned"] is False and listed[cid]["blocks"] == added["blocks"]

    # Fetched, it serves it: with the holder's copy removed, a third node gets it from the
    # fetcher, asked by name.
    holder.cli("data", "rm", cid)
    third = daemons("third", 73, bootstrap=boot.addrs()[0])
    again = tmp_path / "again"
    again.mkdir()
    pinned = wait_for(
        lambda: _try(third, "data", "pin", cid, "--from", fetcher.peer_id),
        "the third node never got the folder from the fetcher",
        60,
    )
    assert pinned["pinned"] is True and pinned["size"] == added["size"]


def _try_get(daemon: Daemon, cid: str, out: Path) -> dict[str, object] | None:
    return _try(daemon, "data", "get", cid, "-o", str(out))


def _try(daemon: Daemon, *args: str) -> dict[str, object] | None:
    result = run_cli(*args, "--json", home=daemon.home, timeout=120)
    if result.returncode != 0:
        assert "Traceback" not in result.stderr, result.stderr
        return None
    return dict(json.loads(result.stdout))


__all__ = ["daemons"]  # the fixture, imported for pytest
