"""SVG snapshots of the Data screen (issue 26) at 80x24 and 160x48, on a real embedded
engine: before it starts, the node's data store (engine/data/service.py, with a pinned
clock) adds a folder, a file, an unpinned file and a file whose name carries markup and a
bidi override (shown literally); the app's clock is pinned too. The add dialog's picture has
the engine's sentence for a path that does not exist. Update with ``pytest
--snapshot-update`` and look at the pictures before committing them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from textual.pilot import Pilot
from textual.widgets import Input

from engine.api import DataAdd, DataRoot, SetMode
from engine.config import Paths
from engine.data.service import NodeData
from nunet_tui.app import NunetApp
from tests.tui.test_snapshots import EngineFactory, _quiet, _until, host_engine, settled

__all__ = ["host_engine"]

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]
T0 = 1_750_000_000.0
NOW = T0 + 3 * 86_400
MISSING = "/nonexistent/datasets/cifar10"


def _pattern(size: int, seed: int) -> bytes:
    """``size`` bytes whose 256 KiB chunks all differ (251 does not divide 2**18)."""
    return bytes((i + seed) % 251 for i in range(size))


def data_tree(root: Path) -> list[tuple[Path, float, bool]]:
    """The files and folders to add: (path, when, pinned)."""
    folder = root / "cifar10-subset"
    (folder / "train").mkdir(parents=True)
    for n in range(3):
        (folder / "train" / f"batch_{n}.bin").write_bytes(_pattern(300_000 + n, n))
    (folder / "labels.txt").write_text("airplane\nautomobile\nbird\ncat\n")
    weights = root / "resnet18-weights.pt"
    weights.write_bytes(_pattern(2_500_000, 7))
    scratch = root / "scratch.csv"
    scratch.write_text("epoch,loss\n1,2.30\n2,1.71\n")
    hostile = root / "[bold red]invoice\u202efdp.exe"
    hostile.write_bytes(b"a name that tries to look like something else")
    return [
        (folder, T0, True),
        (weights, T0 + 86_400, True),
        (scratch, NOW - 600, False),
        (hostile, NOW - 5, True),
    ]


@pytest.fixture
def stored_data(node_home: Paths, tmp_path: Path) -> Iterator[list[DataRoot]]:
    now = [T0]
    data = NodeData(node_home.state_dir / "data", clock=lambda: now[0])
    added: list[DataRoot] = []
    for path, when, pinned in data_tree(tmp_path / "files"):
        now[0] = when
        added.append(trio.run(data.add, DataAdd(path=str(path), pin=pinned)))
    yield added


def _app(host_engine: EngineFactory) -> NunetApp:
    engine = host_engine()
    engine.call_blocking(SetMode(mode="provider"))
    return NunetApp(client=engine, clock=lambda: NOW)


async def _listed(pilot: Pilot[Any]) -> None:
    await _until(pilot, lambda: len(getattr(pilot.app.screen, "roots", ())) == 4)


@pytest.mark.parametrize("size", SIZES)
def test_data_list(
    snap_compare: Any,
    stored_data: list[DataRoot],
    host_engine: EngineFactory,
    size: tuple[int, int],
) -> None:
    app = _app(host_engine)
    assert snap_compare(
        app, terminal_size=size, run_before=settled("DataScreen", keys=["d"], then=_listed)
    )


@pytest.mark.parametrize("size", SIZES)
def test_data_add_refused(
    snap_compare: Any,
    stored_data: list[DataRoot],
    host_engine: EngineFactory,
    size: tuple[int, int],
) -> None:
    """a, a path that is not there: the dialog again, the path kept, the engine's line."""
    app = _app(host_engine)

    async def refused(pilot: Pilot[Any]) -> None:
        await _listed(pilot)
        await pilot.press("a")
        await _until(pilot, lambda: type(pilot.app.screen).__name__ == "AddPathScreen")
        pilot.app.screen.query_one("#data-path", Input).value = MISSING
        await pilot.press("enter")
        await _until(pilot, lambda: bool(getattr(pilot.app.screen, "error", "")))
        await _quiet(pilot)

    assert snap_compare(
        app, terminal_size=size, run_before=settled("DataScreen", keys=["d"], then=refused)
    )
