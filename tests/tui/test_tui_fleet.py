"""The fleet screen (``nunet-tui fleet``) with the fake rig source (tests/fakes/fleet.py):
pause and resume reach the selected rig, a slow rig holds up neither the others nor the keys,
Enter says how to open a rig's dashboard, ``?`` lists the screen's keys. The real rigs are
in tests/daemons/test_fleet.py."""

from __future__ import annotations

import pytest

from nunet_tui.fleet_app import FleetApp
from nunet_tui.screens.fleet import FleetScreen
from nunet_tui.screens.fleet_help import FleetHelpScreen
from tests.fakes.fleet import NOW, FakeRigs
from tests.pilot import anyio_backend, on_screen, text_of, until

__all__ = ["anyio_backend"]
pytestmark = pytest.mark.anyio


def _app(rigs: FakeRigs) -> FleetApp:
    return FleetApp(rigs, refresh_s=0, clock=lambda: NOW)


async def test_space_pauses_then_resumes_the_selected_rig() -> None:
    rigs = FakeRigs()
    app = _app(rigs)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await on_screen(pilot, FleetScreen)
        await until(pilot, lambda: len(screen.snapshots) == 3)
        await pilot.press("space")  # rig-1, active
        await until(pilot, lambda: screen.snapshots["rig-1"].paused)
        assert "Pause" in rigs.asked["rig-1"] and rigs.states["rig-1"] == "paused"
        await pilot.press("space")
        await until(pilot, lambda: not screen.snapshots["rig-1"].paused)
        assert rigs.asked["rig-1"].count("Resume") == 1
        # The unreachable rig: nothing is sent, a warning says why.
        await pilot.press("down", "down", "space")
        await pilot.pause()
        assert "Pause" not in rigs.asked["rig-3"] and "Resume" not in rigs.asked["rig-3"]
        assert any("unreachable" in str(n.message) for n in app._notifications)


async def test_a_slow_rig_holds_up_neither_the_others_nor_the_keys() -> None:
    rigs = FakeRigs(hold="rig-1")
    app = _app(rigs)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await on_screen(pilot, FleetScreen)
        await until(pilot, lambda: {"rig-2", "rig-3"} <= set(screen.snapshots))
        assert "rig-1" not in screen.snapshots
        assert "polling" in text_of(screen, "#fleet-detail-text")
        await pilot.press("down")  # the keys answer while rig-1 is still out
        assert "rig-2" in text_of(screen, "#fleet-detail-text")
        await pilot.press("r")  # rig-1 is not asked again while its poll is out
        await until(pilot, lambda: rigs.asked["rig-2"].count("GetInfo") == 2)
        rigs.release.set()
        await until(pilot, lambda: "rig-1" in screen.snapshots)
        assert screen.snapshots["rig-1"].state == "online"
        assert rigs.asked["rig-1"].count("GetInfo") == 1


async def test_enter_shows_how_to_open_the_rigs_dashboard_and_help_lists_the_keys() -> None:
    app = _app(FakeRigs())
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await on_screen(pilot, FleetScreen)
        await until(pilot, lambda: len(screen.snapshots) == 3)
        await pilot.press("enter")
        assert "nunet-tui --home /srv/nunet/rig-1 --attach" in text_of(screen, "#fleet-detail-text")
        await pilot.press("question_mark")
        help_screen = await on_screen(pilot, FleetHelpScreen)
        keys = " ".join(f"{k} {t}" for k, t in help_screen.rows)
        for words in ("space", "Pause the selected rig", "Poll every rig again", "dashboard"):
            assert words in keys
        assert "Focus Next" not in keys  # Textual's own keys are not the fleet's
        await pilot.press("escape")
        await on_screen(pilot, FleetScreen)


async def test_enter_on_a_rig_listed_by_socket_names_its_host_and_home() -> None:
    app = _app(FakeRigs())
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await on_screen(pilot, FleetScreen)
        await until(pilot, lambda: len(screen.snapshots) == 3)
        await pilot.press("down", "enter")
        shown = text_of(screen, "#fleet-detail-text")
        assert "on the host that runs it: nunet-tui --home /srv/nunet/rig --attach" in shown


async def test_enter_on_a_rig_of_this_machine_ends_the_fleet_with_its_home() -> None:
    """The command line then opens the app attached to that home (and the fleet after it)."""
    app = FleetApp(FakeRigs(), refresh_s=0, clock=lambda: NOW, attach=True)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await on_screen(pilot, FleetScreen)
        await until(pilot, lambda: len(screen.snapshots) == 3)
        await pilot.press("down", "enter")  # rig-2: a socket that is not its home's
        assert "on the host that runs it" in text_of(screen, "#fleet-detail-text")
        await pilot.press("down", "enter")  # rig-3: unreachable
        assert app.is_running
        await pilot.press("up", "up", "enter")  # rig-1: listed by its home
    assert app.return_value == "/srv/nunet/rig-1"
