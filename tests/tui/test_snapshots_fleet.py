"""SVG snapshots of the fleet screen (``nunet-tui fleet``) at 80x24 and 160x48: three rigs
from tests/fakes/fleet.py (one online with a hot GPU and a running job, one paused with
little disk, one unreachable). Update with ``pytest --snapshot-update`` and read the
pictures' text before committing them."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

from nunet_tui.fleet_app import FleetApp
from tests.fakes.fleet import NOW, FakeRigs
from tests.tui.test_snapshots import _until

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]


async def all_polled(pilot: Pilot[Any]) -> None:
    await _until(pilot, lambda: len(getattr(pilot.app.screen, "snapshots", {})) == 3)
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES)
def test_fleet(snap_compare: Any, size: tuple[int, int]) -> None:
    app = FleetApp(FakeRigs(), refresh_s=0, clock=lambda: NOW)
    assert snap_compare(app, terminal_size=size, run_before=all_polled)


@pytest.mark.parametrize("size", SIZES)
def test_fleet_unreachable_rig_selected(snap_compare: Any, size: tuple[int, int]) -> None:
    app = FleetApp(FakeRigs(), refresh_s=0, clock=lambda: NOW)

    async def select_third(pilot: Pilot[Any]) -> None:
        await all_polled(pilot)
        await pilot.press("down", "down")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=select_third)
