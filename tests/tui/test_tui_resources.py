"""The provider's Resources screen (``e``) on a real embedded engine: specs, custom resources
and pools created, edited and deleted, each field checked as it is typed by the engine's own
rules (engine/domain/specs.py), at 80x24 and 160x48."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static

from engine.api import OnboardRequest, ResourceList, ResourceSpec, SetMode, SpecAdd
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.screens.provider_dashboard import ProviderDashboard
from nunet_tui.screens.resources import ResourcesScreen
from tests.conftest import TEST_ADDRESS
from tests.pilot import anyio_backend, on_screen, rows, text_of, until

__all__ = ["anyio_backend"]

pytestmark = pytest.mark.anyio
MEMBER = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW"


def provider_app(engine: Engine) -> NunetApp:
    engine.call_blocking(SetMode(mode="provider"))
    engine.call_blocking(OnboardRequest(memory_mb=8000, cpu_mhz=4000, address=TEST_ADDRESS))
    return NunetApp(client=engine)


async def open_resources(pilot: Pilot[Any]) -> ResourcesScreen:
    await on_screen(pilot, ProviderDashboard)
    await until(pilot, lambda: pilot.app.node is not None)  # type: ignore[attr-defined]
    await pilot.press("e")
    screen: ResourcesScreen = await on_screen(pilot, ResourcesScreen)
    await until(pilot, lambda: screen.listing is not None)
    return screen


async def type_into(pilot: Pilot[Any], screen: ResourcesScreen, box_id: str, text: str) -> None:
    box = screen.query_one(f"#{box_id}", Input)
    box.focus()
    box.value = ""
    await pilot.pause()
    await pilot.press(*text)
    await pilot.pause()


def _problems_shown(screen: ResourcesScreen, kind: str) -> list[str]:
    return [
        str(w.id)
        for w in screen.query(".problems").results(Static)
        if str(w.id).startswith(f"{kind}-") and w.display
    ]


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
async def test_specs_created_edited_and_deleted_checked_as_typed(
    engine_client: Engine, size: tuple[int, int]
) -> None:
    app = provider_app(engine_client)
    async with app.run_test(size=size) as pilot:
        screen = await open_resources(pilot)
        specs = screen.query_one("#spec-table", DataTable)
        # None defined: NuNet's tiers are sold, and the screen says so.
        assert [r.split()[0] for r in rows(specs)] == ["low", "moderate", "high"]
        assert "Low/Moderate/High tiers" in text_of(screen, "#spec-note")

        await pilot.press("n")
        await until(pilot, lambda: screen.open_kind == "spec")
        # Nothing typed yet: nothing shown as wrong (the new form opened full of errors).
        await pilot.pause()
        assert not _problems_shown(screen, "spec")
        # Narrow: the form takes the table's place; wide: it stands beside it.
        assert screen.query_one("#spec-list").display == (size[0] >= 120)
        await type_into(pilot, screen, "spec-name", "gpu large")
        await type_into(pilot, screen, "spec-cpu_cores", "99")
        # The onboarded capacity bounds it, said under the field while it is typed.
        assert "give 1 to 2" in text_of(screen, "#spec-cpu_cores-problems")
        await type_into(pilot, screen, "spec-cpu_cores", "2")
        assert not screen.query_one("#spec-cpu_cores-problems").display
        await type_into(pilot, screen, "spec-ram_mb", "4096")
        await type_into(pilot, screen, "spec-price_units_hour", "2.45")
        await type_into(pilot, screen, "spec-min_charge_units", "0.0000001")
        assert "more than 6 decimals" in text_of(screen, "#spec-min_charge_units-problems")
        await pilot.press("ctrl+s")  # refused here: nothing is sent with a problem showing
        assert "has problems" in text_of(screen, "#status")
        await type_into(pilot, screen, "spec-min_charge_units", "0.01")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: screen.open_kind is None)
        await until(pilot, lambda: "Saved" in text_of(screen, "#status"))
        assert any("gpu large" in r and "2.45 NTX/h" in r for r in rows(specs))
        saved = engine_client.call_blocking(ResourceList())
        assert [(s.name, s.price_units_hour, s.min_charge_units) for s in saved.specs] == [
            ("gpu large", 2_450_000, 10_000)
        ]

        # Edit: the name stays, the price changes; the engine keeps one spec.
        specs.focus()
        await pilot.press("e")
        await until(pilot, lambda: screen.open_kind == "spec")
        assert screen.query_one("#spec-name", Input).disabled
        await type_into(pilot, screen, "spec-price_units_hour", "3")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: screen.open_kind is None)
        saved = engine_client.call_blocking(ResourceList())
        assert [(s.name, s.price_units_hour) for s in saved.specs] == [("gpu large", 3_000_000)]

        # Delete asks first; then the tiers are back.
        specs.focus()
        await pilot.press("d")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: "Deleted" in text_of(screen, "#status"))
        assert engine_client.call_blocking(ResourceList()).defaults


async def test_pools_groups_and_custom_resources(engine_client: Engine) -> None:
    app = provider_app(engine_client)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_resources(pilot)
        await pilot.press("4")
        await pilot.press("N")
        await until(pilot, lambda: screen.open_kind == "group")
        await type_into(pilot, screen, "group-name", "students")
        await type_into(pilot, screen, "group-members", "not-a-peer")
        assert text_of(screen, "#group-members-problems")
        await type_into(pilot, screen, "group-members", MEMBER)
        assert not screen.query_one("#group-members-problems").display
        await pilot.press("ctrl+s")
        await until(pilot, lambda: screen.open_kind is None)

        await pilot.press("n")
        await until(pilot, lambda: screen.open_kind == "pool")
        await pilot.pause()
        assert not _problems_shown(screen, "pool")
        await type_into(pilot, screen, "pool-name", "lab")
        await type_into(pilot, screen, "pool-groups", "nobody")
        assert "nobody" in text_of(screen, "#pool-groups-problems")
        await type_into(pilot, screen, "pool-groups", "students")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: screen.open_kind is None)
        listing = engine_client.call_blocking(ResourceList())
        assert [(p.name, p.groups) for p in listing.pools] == [("lab", ("students",))]
        assert "lab" in rows(screen.query_one("#pool-table", DataTable))[0]

        # A custom resource from a GPU this machine does not have is refused as typed.
        await pilot.press("escape")  # nothing open: back to the dashboard
        await on_screen(pilot, ProviderDashboard)
        await pilot.press("e")
        screen = await on_screen(pilot, ResourcesScreen)
        await until(pilot, lambda: screen.listing is not None)
        await pilot.press("2")
        await pilot.press("n")
        await until(pilot, lambda: screen.open_kind == "custom")
        await type_into(pilot, screen, "custom-name", "TPU 1684X")
        await type_into(pilot, screen, "custom-from_gpus", "5")
        assert text_of(screen, "#custom-from_gpus-problems")
        await type_into(pilot, screen, "custom-from_gpus", "")
        await type_into(pilot, screen, "custom-kind", "accelerator")
        await type_into(pilot, screen, "custom-model", "Sophon BM1684X")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: screen.open_kind is None, timeout=10)
        customs = engine_client.call_blocking(ResourceList()).customs
        assert [(c.name, c.kind, c.from_gpus) for c in customs] == [
            ("TPU 1684X", "accelerator", None)
        ]


async def test_a_change_through_another_door_shows_at_once(engine_client: Engine) -> None:
    """The CLI (here: the engine's command) adds a spec while the screen is open."""
    app = provider_app(engine_client)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_resources(pilot)
        engine_client.call_blocking(
            SpecAdd(
                spec=ResourceSpec(name="from cli", cpu_cores=1, ram_mb=1024, price_units_hour=1)
            )
        )
        specs = screen.query_one("#spec-table", DataTable)
        await until(pilot, lambda: any("from cli" in r for r in rows(specs)))
        assert "0.000001 NTX/h" in rows(specs)[0]
