"""Pilot tests of the Data screen (issue 26) on a real embedded engine: add a file by its
path (a), see it listed, unpin (u), pin (p), remove (d, confirmed); a bad path brings the
dialog back with the engine's sentence under the field and the path as typed; a peer's
name with markup and a bidi override is shown literally."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Input

from engine import api
from engine.domain.cid import RAW, Cid
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.format import byte_size
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.screens.data import DataScreen, fit_columns, short_cid
from nunet_tui.screens.data_dialogs import AddPathScreen, GetCidScreen
from nunet_tui.screens.help import HelpScreen
from tests.pilot import FakeEngineClient, anyio_backend, on_screen, rows, text_of, until

__all__ = ["anyio_backend"]

pytestmark = pytest.mark.anyio


async def _data_screen(pilot: Pilot[Any]) -> DataScreen:
    app: Any = pilot.app
    await until(pilot, lambda: app.node is not None and app.mode == "provider")
    await pilot.press("d")
    screen: DataScreen = await on_screen(pilot, DataScreen)
    await until(pilot, lambda: screen.loaded)
    return screen


async def _type(pilot: Pilot[Any], field: str, text: str) -> None:
    box = pilot.app.screen.query_one(field, Input)
    box.value = ""
    box.focus()
    await pilot.pause()
    await pilot.press(*text)


async def test_add_list_unpin_pin_remove_by_keys(engine_client: Engine, tmp_path: Path) -> None:
    engine_client.call_blocking(api.SetMode(mode="provider"))
    data = tmp_path / "weights.bin"
    # 1 MiB: four different 256 KiB chunks (251 does not divide 2**18) and a File node
    data.write_bytes(bytes(i % 251 for i in range(2**20)))
    app = NunetApp(client=engine_client)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _data_screen(pilot)
        table = screen.query_one("#data-table", DataTable)
        assert "Nothing kept yet" in text_of(screen, "#jobs-note")

        await pilot.press("a")
        await on_screen(pilot, AddPathScreen)
        await _type(pilot, "#data-path", str(data))
        await pilot.press("enter")
        await on_screen(pilot, DataScreen)
        await until(pilot, lambda: len(screen.roots) == 1)
        root = next(iter(screen.roots.values()))
        assert (root.name, root.kind, root.size, root.blocks) == ("weights.bin", "file", 2**20, 5)
        await until(pilot, lambda: table.row_count == 1)
        (row,) = rows(table)
        assert short_cid(root.cid) in row and "weights.bin" in row and "1.0 MiB" in row
        assert "pinned" in row
        assert root.cid in text_of(screen, "#data-detail")  # the full CID under the table
        assert "On disk: 5 blocks" in text_of(screen, "#data-summary")
        assert "0 refused" in text_of(screen, "#data-summary")
        assert not screen.busy

        await pilot.press("u")
        await until(pilot, lambda: not screen.roots[root.cid].pinned)
        assert "pinned" not in rows(table)[0]
        await pilot.press("p")
        await until(pilot, lambda: screen.roots[root.cid].pinned)

        copied: list[str] = []
        app.copy_to_clipboard = copied.append  # type: ignore[method-assign]
        await pilot.press("c")
        assert copied == [root.cid]

        await pilot.press("d")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("n")  # asked first: nothing removed
        await on_screen(pilot, DataScreen)
        assert root.cid in screen.roots
        await pilot.press("d")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("y")
        await on_screen(pilot, DataScreen)
        await until(pilot, lambda: not screen.roots)
        assert engine_client.call_blocking(api.DataList()).roots == ()
        assert "On disk: 0 blocks" in text_of(screen, "#data-summary")


class GatedClient(FakeEngineClient):
    """The real engine behind a gate for ``DataAdd``: the add stays in flight until the
    test opens it, as a large folder's would."""

    def __init__(self, delegate: Engine) -> None:
        super().__init__(delegate=delegate)
        self.gate = asyncio.Event()

    async def call(self, command: api.Command) -> Any:
        if isinstance(command, api.DataAdd):
            await self.gate.wait()
        return await super().call(command)


async def test_an_add_in_flight_is_named_and_the_screen_stays_usable(
    engine_client: Engine, tmp_path: Path
) -> None:
    engine_client.call_blocking(api.SetMode(mode="provider"))
    kept = tmp_path / "kept.txt"
    kept.write_text("first\n")
    first = engine_client.call_blocking(api.DataAdd(path=str(kept)))
    big = tmp_path / "big"
    big.mkdir()
    (big / "a.txt").write_text("a\n")
    client = GatedClient(engine_client)
    app = NunetApp(client=client)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _data_screen(pilot)
        await pilot.press("a")
        await on_screen(pilot, AddPathScreen)
        await _type(pilot, "#data-path", str(big))
        await pilot.press("enter")
        await on_screen(pilot, DataScreen)
        await until(pilot, lambda: "adding " in text_of(screen, "#data-busy"))
        assert text_of(screen, "#data-busy").endswith("big…")
        # Meanwhile the list works: c copies the root that is there, r reads it again.
        copied: list[str] = []
        app.copy_to_clipboard = copied.append  # type: ignore[method-assign]
        await pilot.press("c", "r")
        assert copied == [first.cid]
        client.gate.set()
        await until(pilot, lambda: len(screen.roots) == 2 and not screen.busy)
        assert not screen.query_one("#data-busy").display


async def test_a_bad_path_is_one_line_under_the_field(
    engine_client: Engine, tmp_path: Path
) -> None:
    engine_client.call_blocking(api.SetMode(mode="provider"))
    missing = tmp_path / "no-such-folder"
    app = NunetApp(client=engine_client)
    async with app.run_test(size=(80, 24)) as pilot:
        await _data_screen(pilot)
        await pilot.press("a")
        await on_screen(pilot, AddPathScreen)
        await _type(pilot, "#data-path", str(missing))
        await pilot.press("enter")
        # The engine refuses: the dialog is back with the path as typed and the reason.
        await until(
            pilot,
            lambda: isinstance(app.screen, AddPathScreen) and bool(app.screen.error),
        )
        dialog = app.screen
        assert dialog.query_one("#data-path", Input).value == str(missing)
        error = text_of(dialog, ".data-error")
        assert error == f"{missing}: no such file or folder (links are not followed)"
        assert "\n" not in error
        await pilot.press("escape")
        screen = await on_screen(pilot, DataScreen)
        assert not screen.roots and not screen.busy


async def test_get_without_the_blocks_says_why_and_keeps_the_fields(
    engine_client: Engine, tmp_path: Path
) -> None:
    """g with a CID nobody here has, on a node without the network: the engine's sentence
    under the fields, the CID and folder as typed."""
    engine_client.call_blocking(api.SetMode(mode="provider"))
    cid = str(Cid.of(RAW, b"hello"))
    app = NunetApp(client=engine_client)
    async with app.run_test(size=(80, 24)) as pilot:
        await _data_screen(pilot)
        await pilot.press("g")
        await on_screen(pilot, GetCidScreen)
        await _type(pilot, "#data-cid", cid)
        await _type(pilot, "#data-folder", str(tmp_path))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, GetCidScreen) and bool(app.screen.error))
        dialog = app.screen
        assert dialog.query_one("#data-cid", Input).value == cid
        assert dialog.query_one("#data-folder", Input).value == str(tmp_path)
        assert text_of(dialog, ".data-error").startswith(f"fetching {cid} from peers needs")
        await pilot.press("escape")
        await on_screen(pilot, DataScreen)


async def test_get_writes_the_selected_root_into_a_folder(
    engine_client: Engine, tmp_path: Path
) -> None:
    """g on a listed root: its CID is filled in, the folder is typed; the file comes out."""
    engine_client.call_blocking(api.SetMode(mode="provider"))
    source = tmp_path / "notes.txt"
    source.write_text("kept by its content id\n")
    root = engine_client.call_blocking(api.DataAdd(path=str(source)))
    out = tmp_path / "out"
    out.mkdir()
    app = NunetApp(client=engine_client)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _data_screen(pilot)
        await until(pilot, lambda: screen.query_one("#data-table", DataTable).row_count == 1)
        await pilot.press("g")
        dialog = await on_screen(pilot, GetCidScreen)
        assert dialog.query_one("#data-cid", Input).value == root.cid
        await _type(pilot, "#data-folder", str(out))
        await pilot.press("enter")
        await on_screen(pilot, DataScreen)
        await until(pilot, lambda: (out / "notes.txt").exists() and not screen.busy)
        assert (out / "notes.txt").read_text() == "kept by its content id\n"
        assert any(n.title == "Fetched" for n in app._notifications)


async def test_a_peer_supplied_name_is_shown_literally(
    engine_client: Engine, tmp_path: Path
) -> None:
    engine_client.call_blocking(api.SetMode(mode="provider"))
    hostile = tmp_path / "[bold red]x\u202etxt.exe"
    hostile.write_bytes(b"not what it says")
    root = engine_client.call_blocking(api.DataAdd(path=str(hostile)))
    app = NunetApp(client=engine_client)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _data_screen(pilot)
        await until(pilot, lambda: root.cid in screen.roots)
        table = screen.query_one("#data-table", DataTable)
        await until(pilot, lambda: table.row_count == 1)
        assert "[bold red]x\\u202etxt.exe" in rows(table)[0]
        assert "[bold red]x\\u202etxt.exe" in text_of(screen, "#data-detail")
        assert "\u202e" not in text_of(screen, "#data-detail")


async def test_help_names_the_data_keys(engine_client: Engine) -> None:
    engine_client.call_blocking(api.SetMode(mode="consumer"))
    app = NunetApp(client=engine_client)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.node is not None and app.mode == "consumer")
        await pilot.press("d")
        await on_screen(pilot, DataScreen)
        await pilot.press("question_mark")
        help_screen = await on_screen(pilot, HelpScreen)
        assert help_screen.under_title == "the data"
        keys = dict(help_screen.under_keys)
        for key in ("a", "g", "r"):
            assert key in keys, keys


def test_the_columns_fit_80_and_160_columns() -> None:
    narrow, name_narrow = fit_columns(80 - 6)
    assert "blocks" not in narrow and {"cid", "name", "size", "pinned", "age"} <= set(narrow)
    assert name_narrow >= 12
    wide, name_wide = fit_columns(160 - 6)
    assert len(wide) == 7 and name_wide == 60


def test_sizes_read_in_binary_units_and_stay_narrow() -> None:
    assert [byte_size(n) for n in (0, 1023, 1024, 1536, 10 * 1024, 5 * 2**30, 3 * 2**40)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "10 KiB",
        "5.0 GiB",
        "3.0 TiB",
    ]
    assert max(len(byte_size(n)) for n in range(0, 2**50, 2**50 // 997)) <= 8
    cid = "bafkreibm6jg3ux5qumhcn2b3flc3tyu6dmlb4xa7u5bf44yegnrjhc4yeq"
    assert short_cid(cid) == "bafkreibm…4yeq"
    assert short_cid("bafy\u202e") == "bafy\\u202e"  # escaped, never obeyed
