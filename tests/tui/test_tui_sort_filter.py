"""Every table sorts by any column and filters by text, as k9s does (issue 22 §3): the order
and the filter survive a refresh, and the cursor stays on its record when rows move."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from rich.text import Text
from textual.widgets import DataTable, Input, OptionList

from engine.api import (
    JobInfo,
    JobList,
    ListJobs,
    ListPeers,
    Peer,
    PeerChanged,
    PeerList,
    SetMode,
)
from engine.domain.spec import JobSpec
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.format import DASH
from nunet_tui.widgets.sortable_table import Row, TableSort, cell_value
from nunet_tui.widgets.table_rows import selected_key
from tests.pilot import FakeEngineClient, anyio_backend, on_screen, until
from tests.tui.test_tui_jobs import FAKE_PROVIDER

__all__ = ["anyio_backend"]


def _job(job_id: str, name: str, created_at: float) -> JobInfo:
    return JobInfo(
        job_id=job_id,
        role="consumer",
        state="completed",
        provider="p",
        consumer="c",
        spec=JobSpec(framework="scikit-learn", script_url="http://127.0.0.1:9/x.py", name=name),
        created_at=created_at,
    )


def _peer(suffix: str, free_ram: int, price: float, latency: float | None = 10.0) -> Peer:
    assert FAKE_PROVIDER.resources is not None
    resources = msgspec.structs.replace(
        FAKE_PROVIDER.resources, free_memory_mb=free_ram, price_units={"low": round(price * 1e6)}
    )
    return msgspec.structs.replace(
        FAKE_PROVIDER,
        peer_id=FAKE_PROVIDER.peer_id[:-4] + suffix,
        resources=resources,
        latency_ms=latency,
    )


def _order(table: DataTable[Any]) -> list[str]:
    return [str(row.key.value) for row in table.ordered_rows]


# --- the rules, on rows ------------------------------------------------------------------


def test_cells_sort_as_numbers_times_and_text_and_empty_ones_last() -> None:
    assert cell_value("1,024/2,048") == (0, 1024.0)
    assert cell_value("9.5 ms") == (0, 9.5)
    assert cell_value("01:02:03") == (0, 3723.0)
    assert cell_value("2d 00:00:01") == (0, 172801.0)
    assert cell_value("5 min ago") == (0, 300.0)
    assert cell_value("Beta") == (1, "beta")
    assert cell_value(DASH) is None and cell_value("") is None

    sort = TableSort()
    sort.columns = {"name": "Name", "ram": "RAM"}
    rows = [
        Row(key, [Text(name), Text(ram)])
        for key, name, ram in (("a", "x", "900"), ("b", "y", "10,000"), ("c", "z", DASH))
    ]
    sort.click("ram")  # ascending: a column of the table, not one of the owner's sorts
    assert [r.key for r in sort.arrange(rows)] == ["a", "b", "c"]  # 900 < 10,000, not text
    sort.click("ram")
    assert [r.key for r in sort.arrange(rows)] == ["b", "a", "c"]  # the empty cell stays last
    sort.query = "Y"  # case does not matter
    assert [r.key for r in sort.arrange(rows)] == ["b"]


# --- tables --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_jobs_filter_then_sort_and_both_survive_a_reload(engine_client: Engine) -> None:
    engine_client.call_blocking(SetMode(mode="consumer"))
    jobs = [
        _job("aaaaaaaaaaaa", "alpha-b", 4.0),
        _job("bbbbbbbbbbbb", "beta", 3.0),
        _job("cccccccccccc", "ALPHA-c", 2.0),
        _job("dddddddddddd", "alpha-a", 1.0),
    ]
    client = FakeEngineClient(
        {ListJobs: lambda c: JobList(jobs=tuple(jobs))}, delegate=engine_client
    )
    app = NunetApp(client=client)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        await pilot.press("j")
        await until(pilot, lambda: type(app.screen).__name__ == "JobsScreen")
        screen: Any = app.screen
        table = screen.query_one("#jobs-table", DataTable)
        await until(pilot, lambda: table.row_count == 4)

        await pilot.press("slash", *"alpha", "enter")
        assert _order(table) == ["aaaaaaaaaaaa", "cccccccccccc", "dddddddddddd"]
        assert table.has_focus
        while screen.sorter.sort_by != "name":
            await pilot.press("o")
        await pilot.press("O")  # by name, A to Z
        assert _order(table) == ["dddddddddddd", "aaaaaaaaaaaa", "cccccccccccc"]
        subtitle = str(screen.query_one("#jobs-panel").border_subtitle)
        assert "3 of 4 shown" in subtitle and "sorted by name ↑" in subtitle

        jobs.append(_job("eeeeeeeeeeee", "alpha-0", 5.0))  # newest: first in the own order
        await pilot.press("r")
        await until(pilot, lambda: table.row_count == 4)
        assert _order(table)[0] == "eeeeeeeeeeee"  # alpha-0: still by name, still filtered
        assert "bbbbbbbbbbbb" not in _order(table)

        await pilot.press("escape")  # clears the filter, stays
        assert type(app.screen).__name__ == "JobsScreen" and table.row_count == 5
        await pilot.press("escape")
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")


@pytest.mark.anyio
async def test_peers_selection_follows_its_peer_when_a_refresh_reorders_the_rows(
    engine_client: Engine,
) -> None:
    peers = [_peer("aaaa", 2000, 3.0), _peer("bbbb", 9000, 1.0), _peer("cccc", 5000, 2.0)]
    engine_client.call_blocking(SetMode(mode="consumer"))
    client = FakeEngineClient(
        {ListPeers: lambda c: PeerList(channel="nunet-test", peers=tuple(peers))},
        delegate=engine_client,
    )
    app = NunetApp(client=client)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        await pilot.press("p")
        await until(pilot, lambda: type(app.screen).__name__ == "PeersScreen")
        screen: Any = app.screen
        table = screen.query_one("#peers-table", DataTable)
        await until(pilot, lambda: table.row_count == 3)
        while screen.sorter.sort_by != "ram":
            await pilot.press("o")
        assert [k[-4:] for k in _order(table)] == ["bbbb", "cccc", "aaaa"]  # most free first
        assert str(selected_key(table)).endswith("aaaa")  # the cursor went with its row
        await pilot.press("up")  # on cccc
        assert str(selected_key(table)).endswith("cccc")

        # cccc's heartbeat: almost no RAM free now; it moves to the bottom, the cursor with it.
        peers[2] = _peer("cccc", 100, 2.0)
        client.emit(PeerChanged(peer_id=peers[2].peer_id, peer=peers[2], at=0.0))
        await until(pilot, lambda: _order(table)[-1].endswith("cccc"))
        assert str(selected_key(table)).endswith("cccc")

        # A reload that brings the peers in another order keeps the sort and the cursor.
        peers.reverse()
        await pilot.press("r")
        await pilot.pause()
        assert [k[-4:] for k in _order(table)] == ["bbbb", "aaaa", "cccc"]
        assert str(selected_key(table)).endswith("cccc")

        await pilot.press("slash", *"BBBB")  # the filter: case-insensitive, any cell or the id
        assert [k[-4:] for k in _order(table)] == ["bbbb"]


@pytest.mark.anyio
async def test_who_can_run_it_filters_sorts_by_price_ram_latency_and_picks_the_right_one(
    engine_client: Engine,
) -> None:
    from nunet_tui.screens.submit import SubmitScreen

    peers = (
        _peer("aaaa", 2000, 3.0, latency=5.0),
        _peer("bbbb", 9000, 1.0, latency=50.0),
        _peer("cccc", 5000, 2.0, latency=None),
        _peer("dddd", 7000, 0.5, latency=1.0),
    )
    client = FakeEngineClient(
        {ListPeers: PeerList(channel="nunet-test", peers=peers)}, delegate=engine_client
    )
    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=client)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        await pilot.press("s")
        form: Any = await on_screen(pilot, SubmitScreen)
        options = form.query_one("#who-list", OptionList)
        await until(pilot, lambda: options.option_count == 4)

        def order() -> list[str]:
            ids = [options.get_option_at_index(i).id for i in range(options.option_count)]
            return [str(i)[-4:] for i in ids]

        options.focus()
        await pilot.press("slash", *"zzzz")  # a filter that keeps nobody…
        assert options.option_count == 0
        assert "No provider matches" in str(form.query_one("#who-note").render())
        await pilot.press(*["backspace"] * 4)  # …then none
        await pilot.press("enter")
        assert options.has_focus and options.option_count == 4

        await pilot.press("o")  # price: cheapest first
        assert order() == ["dddd", "bbbb", "cccc", "aaaa"]
        assert "sorted by price ↓" in str(form.query_one("#who").border_subtitle)
        await pilot.press("o")  # free RAM: most first
        assert order() == ["bbbb", "dddd", "cccc", "aaaa"]
        await pilot.press("o", "o")  # latency: fastest first, unknown last
        assert order() == ["dddd", "aaaa", "bbbb", "cccc"]

        # The sort stays when the form is checked again (a peer's advert, a typed field).
        form.refresh_form()
        await pilot.pause()
        assert order() == ["dddd", "aaaa", "bbbb", "cccc"]

        options.highlighted = 2  # bbbb, third by latency
        await pilot.press("enter")
        field = form.query_one("#peer_id", Input)
        await until(pilot, lambda: field.value.endswith("bbbb"))
        assert field.value == peers[1].peer_id
        # The pick redraws the list: the highlight stays on bbbb.
        await until(pilot, lambda: "← picked" in str(options.get_option_at_index(2).prompt))
        assert options.highlighted == 2

        await pilot.press("slash", *"cccc")
        assert order() == ["cccc"]
        await pilot.press("escape")  # clears the filter; the form stays
        assert isinstance(app.screen, SubmitScreen) and options.option_count == 4
        assert not form.query_one("#who-filter", Input).display


@pytest.mark.anyio
async def test_rewards_keys_act_on_the_focused_table(engine_client: Engine) -> None:
    """Two tables on one screen: o, O and / act on the one with the focus; NTX by base units."""
    from engine.api import EscrowList, RewardList
    from tests.tui.test_snapshots_wallet import escrow

    def held(job_id: str, state: str, units: int, age_s: float) -> Any:
        return escrow(job_id, "provider", state, units, age_s=age_s, settled=state == "claimed")

    escrows = (
        held("open0000000a", "verified", 5_000_000, 10),
        held("open0000000b", "verified", 900_000, 20),
        held("open0000000c", "verified", 30_000_000, 30),
        held("done0000000d", "claimed", 2_000_000, 40),
        held("done0000000e", "claimed", 11_000_000, 50),
    )
    engine_client.call_blocking(SetMode(mode="provider"))
    client = FakeEngineClient({RewardList: EscrowList(escrows=escrows)}, delegate=engine_client)
    app = NunetApp(client=client)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")
        await pilot.press("dollar_sign")
        await until(pilot, lambda: type(app.screen).__name__ == "RewardsScreen")
        screen: Any = app.screen
        open_table = screen.query_one("#open-table", DataTable)
        done_table = screen.query_one("#done-table", DataTable)
        await until(pilot, lambda: open_table.row_count == 3 and done_table.row_count == 2)
        assert open_table.has_focus

        await pilot.press("o")  # the open table by locked NTX, most first: 30 > 5 > 0.9
        assert [k[-1] for k in _order(open_table)] == ["c", "a", "b"]
        assert [k[-1] for k in _order(done_table)] == ["d", "e"]  # newest first, untouched

        done_table.focus()
        await pilot.press("o", "O")  # the done table by paid NTX, least first
        assert [k[-1] for k in _order(done_table)] == ["d", "e"]
        await pilot.press("O")
        assert [k[-1] for k in _order(done_table)] == ["e", "d"]
        await pilot.press("slash", *"0000d", "enter")
        assert _order(done_table) == ["done0000000d"] and done_table.has_focus
        assert open_table.row_count == 3  # the other table keeps all its rows
        await pilot.press("escape")  # clears the done table's filter
        assert done_table.row_count == 2 and type(app.screen).__name__ == "RewardsScreen"
