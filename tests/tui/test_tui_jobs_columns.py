"""Layouts that follow the terminal: the Jobs table chooses its columns by width (at 80x24
Cost is on screen, not 40 presses of → away; at 160x48 every column), and the submit form
goes back to two columns when a narrow terminal grows."""

from __future__ import annotations

from typing import Any

import pytest

from engine.api import SetMode
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.screens.jobs import COLUMNS, PANEL_CHROME, fit_columns
from tests.pilot import anyio_backend, until

__all__ = ["anyio_backend"]

EVERY = tuple(key for key, _ in COLUMNS)


def test_narrow_keeps_the_id_state_and_cost_and_gives_the_name_what_is_left() -> None:
    columns, name = fit_columns(80 - PANEL_CHROME)
    assert {"job", "state", "cost", "name"} <= set(columns)
    assert columns == tuple(key for key in EVERY if key in columns)  # the table's order
    assert 12 <= name <= 28
    assert fit_columns(160 - PANEL_CHROME) == (EVERY, 28)
    tiny, _ = fit_columns(10)
    assert tiny == ("job",)  # never nothing


@pytest.mark.anyio
async def test_the_table_follows_the_terminal(engine_client: Engine) -> None:
    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=engine_client)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        await pilot.press("j")
        await until(pilot, lambda: type(app.screen).__name__ == "JobsScreen")
        screen: Any = app.screen

        def shown() -> tuple[str, ...]:
            table = screen.query_one("#jobs-table")
            return tuple(str(key.value) for key in table.columns)

        await until(pilot, lambda: "cost" in shown() and "peer" not in shown())
        await pilot.resize_terminal(160, 48)
        await until(pilot, lambda: shown() == EVERY)
        await pilot.resize_terminal(80, 24)
        await until(pilot, lambda: "peer" not in shown() and "cost" in shown())


@pytest.mark.anyio
async def test_the_submit_form_takes_two_columns_again_when_the_terminal_grows(
    engine_client: Engine,
) -> None:
    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=engine_client)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        await pilot.press("s")
        await until(pilot, lambda: type(app.screen).__name__ == "SubmitScreen")
        grid = app.screen.query_one("#submit-grid")

        def side_by_side() -> bool:
            form, side = list(grid.children)[:2]
            return bool(form.region.y == side.region.y and side.region.x > form.region.x)

        await until(pilot, lambda: grid.children[0].region.width > 0 and not side_by_side())
        await pilot.resize_terminal(160, 48)
        await until(pilot, side_by_side)
        await pilot.resize_terminal(80, 24)
        await until(pilot, lambda: not side_by_side())


@pytest.mark.anyio
async def test_the_peers_table_keeps_cpu_ram_and_gpus_at_80x24(engine_client: Engine) -> None:
    """At 80x24 the peers table showed the address, route and channel and lost CPU, RAM and
    GPUs past the right edge: what a consumer picks a provider by."""
    from engine.api import ListPeers, PeerList
    from tests.pilot import FakeEngineClient
    from tests.tui.test_tui_jobs import FAKE_PROVIDER

    engine_client.call_blocking(SetMode(mode="consumer"))
    client = FakeEngineClient(
        {ListPeers: PeerList(channel="nunet-test", peers=(FAKE_PROVIDER,))},
        delegate=engine_client,
    )
    app = NunetApp(client=client)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        await pilot.press("p")
        await until(pilot, lambda: type(app.screen).__name__ == "PeersScreen")
        screen: Any = app.screen
        table = screen.query_one("#peers-table")

        def shown() -> tuple[str, ...]:
            return tuple(str(key.value) for key in table.columns)

        await until(pilot, lambda: table.row_count == 1)
        assert {"peer", "cpu", "ram", "gpu"} <= set(shown()) and "addr" not in shown()
        assert table.virtual_size.width <= 80
        await pilot.resize_terminal(160, 48)
        await until(pilot, lambda: "addr" in shown() and "channel" in shown())
        assert table.row_count == 1


@pytest.mark.anyio
async def test_peers_sort_by_free_ram_and_the_order_survives_a_refresh(
    engine_client: Engine,
) -> None:
    """Every table sorts (o: next column, O: reverse), as k9s does; the peers table by
    price, free CPU, RAM, GPUs and latency, as Vast.ai's offer search."""
    import msgspec

    from engine.api import ListPeers, PeerList
    from tests.pilot import FakeEngineClient
    from tests.tui.test_tui_jobs import FAKE_PROVIDER

    def peer(suffix: str, free_ram: int, price: float) -> Any:
        assert FAKE_PROVIDER.resources is not None
        resources = msgspec.structs.replace(
            FAKE_PROVIDER.resources,
            free_memory_mb=free_ram,
            price_units={"low": round(price * 1e6)},
        )
        return msgspec.structs.replace(
            FAKE_PROVIDER, peer_id=FAKE_PROVIDER.peer_id[:-4] + suffix, resources=resources
        )

    peers = (peer("aaaa", 2000, 3.0), peer("bbbb", 9000, 1.0), peer("cccc", 5000, 2.0))
    engine_client.call_blocking(SetMode(mode="consumer"))
    client = FakeEngineClient(
        {ListPeers: PeerList(channel="nunet-test", peers=peers)}, delegate=engine_client
    )
    app = NunetApp(client=client)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        await pilot.press("p")
        await until(pilot, lambda: type(app.screen).__name__ == "PeersScreen")
        screen: Any = app.screen
        table = screen.query_one("#peers-table")
        await until(pilot, lambda: table.row_count == 3)

        def order() -> list[str]:
            return [str(row.key.value)[-4:] for row in table.ordered_rows]

        await pilot.press("o")  # price, cheapest first
        assert order() == ["bbbb", "cccc", "aaaa"]
        await pilot.press("o", "o")  # free CPU, then free RAM: most first
        assert order() == ["bbbb", "cccc", "aaaa"] and screen.sorter.sort_by == "ram"
        await pilot.press("O")
        assert order() == ["aaaa", "cccc", "bbbb"]
        assert "sorted by free RAM ↑" in str(screen.query_one("#peers-panel").border_subtitle)
        await pilot.press("r")
        await pilot.pause()
        assert order() == ["aaaa", "cccc", "bbbb"]
