"""``d``: the files and folders this node keeps by content id (issue 26; engine/data/).

One row per root (``DataList``): its CID (shortened; the selected row's in full on the line
below), name, kind, size, blocks, pinned or not, age. The line under the table sums the disk
and what bitswap did since the node started (blocks served, received, unasked, refused,
peers dropped). ``a`` adds a path, ``g`` fetches a CID into a folder, ``p``/``u`` pin and
unpin, ``d`` removes (asks first), ``c`` copies the CID, ``r`` reads the list again.

An add or a fetch may take minutes: each runs in a worker of its own, named on the busy line
("adding ~/x…", "fetching bafy…") while the table stays usable. When the engine refuses, its
dialog opens again with what was typed and the engine's sentence under the fields.
Names come from whoever added the data (a fetched root's from its peer): shown literally.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import DataTable, Footer, Static

from engine import api
from engine.errors import EngineError
from nunet_tui.format import DASH, ELLIPSIS, ago, byte_size, plural, safe, table_cell, tilde
from nunet_tui.screens.base import (
    FILTER_BINDING,
    HELP_BINDING,
    SORT_BINDINGS,
    FilteredTableScreen,
)
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.screens.data_dialogs import AddPathScreen, DataFetch, GetCidScreen
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.sortable_table import AUTO, Row
from nunet_tui.widgets.table_columns import fit, used_width
from nunet_tui.widgets.table_rows import selected_key

COLUMNS = (
    ("cid", "CID"),
    ("name", "Name"),
    ("kind", "Kind"),
    ("size", "Size"),
    ("blocks", "Blocks"),
    ("pinned", "Pinned"),
    ("age", "Added"),
)
# Cells each column needs (the name takes what is left, between NAME_WIDTH's bounds).
WIDTHS = {"cid": 14, "name": 12, "kind": 6, "size": 8, "blocks": 7, "pinned": 6, "age": 10}
NAME_WIDTH = (12, 60)
KEPT_FIRST = ("cid", "name", "size", "pinned", "kind", "age", "blocks")
PANEL_CHROME = 6  # the panel's margin, border and padding
CID_HEAD, CID_TAIL = 9, 4  # "bafkreigh…x4k2": past the "bafy"/"bafk" every CIDv1 starts with


def short_cid(cid: str) -> str:
    cid = safe(cid)
    if len(cid) <= CID_HEAD + CID_TAIL + 1:
        return cid
    return f"{cid[:CID_HEAD]}{ELLIPSIS}{cid[-CID_TAIL:]}"


def fit_columns(width: int) -> tuple[tuple[str, ...], int]:
    """The columns that fit ``width`` cells, and the name's width."""
    columns = fit([key for key, _ in COLUMNS], WIDTHS, KEPT_FIRST, width)
    spare = width - used_width(columns, WIDTHS)
    return columns, min(NAME_WIDTH[1], NAME_WIDTH[0] + max(0, spare))


class DataScreen(FilteredTableScreen):
    TABLE_ID = "data-table"
    TITLE_TEXT = "the data"
    CSS_PATH = "jobs.tcss"  # the jobs list's panel and table
    SORTS = (("size", "size"), ("age", "newest"), ("blocks", "blocks"))
    DEFAULT_CSS = """
    DataScreen #data-table { height: 1fr; }
    DataScreen #data-busy { height: auto; padding: 0 1; color: $text-warning; }
    DataScreen #data-detail { height: auto; max-height: 3; padding: 0 1; color: $text-muted; }
    DataScreen #data-summary { height: auto; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the dashboard", id="data.back"),
        Binding("a", "add", "Add", tooltip="Add a file or folder by its CID", id="data.add"),
        Binding("g", "get", "Get", tooltip="Fetch a CID into a folder", id="data.get"),
        # p, u, d and c are always on (without a row they do nothing): a key turned off
        # here would fall through to the app's (p Peers, c Chat, d this screen again).
        Binding("p", "pin", "Pin", tooltip="Keep the selected root", id="data.pin"),
        Binding("u", "unpin", "Unpin", tooltip="Let the selected root be removed", id="data.unpin"),
        Binding("d", "remove", "Remove", tooltip="Remove the selected root (asks)", id="data.rm"),
        # ? before the rest: at 80 columns the footer cuts the keys at its end (the list is
        # read again after every action: r matters less).
        HELP_BINDING,
        Binding("r", "reload", "Refresh", tooltip="Read the list again", id="data.reload"),
        Binding("c", "copy_cid", "Copy", tooltip="Copy the selected CID", id="data.copy"),
        FILTER_BINDING,
        *SORT_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.listing: api.DataRoots | None = None
        self.roots: dict[str, api.DataRoot] = {}
        self.problem: str | None = None
        self.loaded = False
        self.busy: dict[int, str] = {}  # what the workers are doing now, by a number each
        self._next_busy = 0
        self.columns: tuple[str, ...] = tuple(key for key, _ in COLUMNS)
        self.name_width = NAME_WIDTH[1]

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with Vertical(id="jobs-panel") as panel:
            panel.border_title = "Data by CID"
            yield self.filter_box()
            yield Static(id="data-busy", markup=False)
            yield Static(id="jobs-note")
            table: DataTable[Text] = DataTable(
                id="data-table", cursor_type="row", zebra_stripes=True
            )
            self._add_columns(table)
            yield table
            yield Static(id="data-detail", markup=False)
            yield Static(id="data-summary")
        yield Footer()

    def _add_columns(self, table: DataTable[Text]) -> None:
        labels = dict(COLUMNS)
        for key in self.columns:
            table.add_column(labels[key], key=key)

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#data-busy").display = False
        self.query_one("#data-table", DataTable).focus()

    def on_resize(self, event: events.Resize) -> None:
        columns, name_width = fit_columns(event.size.width - PANEL_CHROME)
        if (columns, name_width) == (self.columns, self.name_width):
            return
        self.columns, self.name_width = columns, name_width
        table: DataTable[Text] = self.query_one("#data-table", DataTable)
        table.clear(columns=True)
        self._add_columns(table)
        self.show()

    # --- reading -------------------------------------------------------------------------

    def reload(self) -> None:
        self.load()

    def action_reload(self) -> None:
        self.load()

    @work(exclusive=True, group="refresh")
    async def load(self) -> None:
        try:
            listing: api.DataRoots = await self.nunet.client.call(api.DataList())
        except EngineError as exc:
            self.problem = safe(exc.message)
        else:
            self.problem = None
            self.listing = listing
            self.roots = {root.cid: root for root in listing.roots}
        self.loaded = True
        self.show()

    # --- showing -------------------------------------------------------------------------

    def sort_value(self, item: Any, key: str) -> Any:
        root: api.DataRoot = item
        if key == "size":
            return root.size
        if key == "blocks":
            return root.blocks
        if key == "age":
            return root.added_at
        return AUTO

    def show(self) -> None:
        if not self.is_mounted:
            return
        table: DataTable[Text] = self.query_one("#data-table", DataTable)
        note = self.query_one("#jobs-note", Static)
        panel = self.query_one("#jobs-panel", Vertical)
        now = self.nunet.clock()
        found = list(self.roots.values())
        rows = [
            Row(
                root.cid,
                [
                    table_cell(cell)
                    for key, cell in root_cells(root, now, self.name_width).items()
                    if key in self.columns
                ],
                root,
                extra=f"{root.cid} {safe(root.name)}",
            )
            for root in found
        ]
        shown = self.sorter.fill(table, rows)
        pinned = sum(1 for root in found if root.pinned)
        panel.border_subtitle = self.sorter.caption(len(shown), len(found), "root") + (
            f" · {pinned} pinned" if found else ""
        )
        table.display = bool(shown)
        note.display = not shown and self.loaded
        if self.problem is not None:
            note.update(Content(self.problem))
        elif not found:
            note.update(
                Content.assemble(
                    ("Nothing kept yet. ", "bold"),
                    "Press a to add a file or folder (its CID is the one ",
                    ("ipfs add --cid-version 1", "bold"),
                    " gives), g to fetch a CID from peers.",
                )
            )
        elif not shown:
            note.update(Content.assemble("No root matches ", (repr(self.sorter.query), "bold")))
        self._detail()
        self._summary()

    def _detail(self) -> None:
        """The selected root in full: its CID, its name as given, what it takes on disk."""
        detail = self.query_one("#data-detail", Static)
        root = self._selected()
        detail.display = root is not None
        if root is None:
            return
        pinned = "pinned" if root.pinned else "not pinned: may be removed to make room"
        detail.update(
            f"{safe(root.cid)}  {safe(root.name)} · {root.size:,} bytes, "
            f"{root.dag_bytes:,} on disk · {pinned}"
        )

    def _summary(self) -> None:
        summary = self.query_one("#data-summary", Static)
        listing = self.listing
        summary.display = listing is not None
        if listing is None:
            return
        x = listing.exchange
        dropped = len(x.bad_peers)
        summary.update(
            Content.assemble(
                ("On disk: ", "bold"),
                f"{plural(listing.blocks, 'block')}, {byte_size(listing.bytes)}",
                ("   Bitswap since start: ", "bold"),
                f"{x.served_blocks:,} served ({byte_size(x.served_bytes)}) · "
                f"{x.received_blocks:,} received · {x.unwanted_blocks:,} unasked · "
                f"{x.refused:,} refused · ",
                (f"{plural(dropped, 'peer')} dropped", "bold $text-error" if dropped else ""),
            )
        )

    def _busy_line(self) -> None:
        line = self.query_one("#data-busy", Static)
        line.display = bool(self.busy)
        line.update(" · ".join(self.busy.values()))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail()

    # --- actions -------------------------------------------------------------------------

    def _selected(self) -> api.DataRoot | None:
        cid = selected_key(self.query_one("#data-table", DataTable))
        return self.roots.get(cid) if cid is not None else None

    def _start(self, what: str) -> int:
        self._next_busy += 1
        self.busy[self._next_busy] = what
        self._busy_line()
        return self._next_busy

    def _done(self, ticket: int) -> None:
        self.busy.pop(ticket, None)
        self._busy_line()

    def action_add(self) -> None:
        self.add_path()

    @work(group="data-add")
    async def add_path(self) -> None:
        typed, error = "", ""
        while True:
            answer = await self.app.push_screen_wait(AddPathScreen(typed, error))
            if not isinstance(answer, str):
                return
            typed = answer
            path = os.path.abspath(os.path.expanduser(typed))
            ticket = self._start(f"adding {tilde(path)}…")
            try:
                root: api.DataRoot = await self.nunet.client.call(api.DataAdd(path=path))
            except EngineError as exc:
                error = safe(exc.message)
                if self.app.screen is not self:  # moved on meanwhile: say it where they are
                    self.notify(error, title="Add", severity="error", markup=False)
                    return
                continue
            finally:
                self._done(ticket)
            self.notify(f"{safe(root.name)}: {root.cid}", title="Added", markup=False)
            self.load()
            return

    def action_get(self) -> None:
        root = self._selected()
        self.get_cid(DataFetch(root.cid if root else "", tilde(os.getcwd())))

    @work(group="data-get")
    async def get_cid(self, asked: DataFetch) -> None:
        error = ""
        while True:
            answer = await self.app.push_screen_wait(GetCidScreen(asked, error))
            if not isinstance(answer, DataFetch):
                return
            asked = answer
            out = os.path.abspath(os.path.expanduser(asked.folder))
            peers = (asked.peer,) if asked.peer else ()
            ticket = self._start(f"fetching {short_cid(asked.cid)} into {tilde(out)}…")
            try:
                done: api.DataExported = await self.nunet.client.call(
                    api.DataGet(cid=asked.cid, out=out, peers=peers)
                )
            except EngineError as exc:
                error = safe(exc.message)
                if self.app.screen is not self:
                    self.notify(error, title="Get", severity="error", markup=False)
                    return
                continue
            finally:
                self._done(ticket)
            self.notify(
                f"{tilde(done.path)} ({byte_size(done.size)})", title="Fetched", markup=False
            )
            self.load()
            return

    @work(group="data-op")
    async def action_pin(self) -> None:
        root = self._selected()
        if root is None:
            return
        ticket = self._start(f"pinning {short_cid(root.cid)}…")  # fetches what is missing
        try:
            await self.nunet.client.call(api.DataPin(cid=root.cid))
        except EngineError as exc:
            self.notify(safe(exc.message), title="Pin", severity="error", markup=False)
        else:
            self.notify(f"{short_cid(root.cid)} is kept until unpinned", title="Pinned")
        finally:
            self._done(ticket)
        self.load()

    @work(group="data-op")
    async def action_unpin(self) -> None:
        root = self._selected()
        if root is None:
            return
        try:
            await self.nunet.client.call(api.DataUnpin(cid=root.cid))
        except EngineError as exc:
            self.notify(safe(exc.message), title="Unpin", severity="error", markup=False)
        else:
            self.notify(f"{short_cid(root.cid)} may be removed to make room", title="Unpinned")
        self.load()

    @work(group="data-op")
    async def action_remove(self) -> None:
        root = self._selected()
        if root is None:
            return
        confirmed = await self.app.push_screen_wait(
            ConfirmScreen(
                f"Remove {short_cid(root.cid)}?",
                Content.assemble(
                    (safe(root.name), "bold"),
                    f" ({byte_size(root.size)}) and every block no other root holds are "
                    "deleted from this node. Files written out with g stay.",
                ),
                confirm_label="Remove",
                danger=True,
            )
        )
        if not confirmed:
            return
        try:
            gone: api.DataRemoved = await self.nunet.client.call(api.DataRemove(cid=root.cid))
        except EngineError as exc:
            self.notify(safe(exc.message), title="Remove", severity="error", markup=False)
        else:
            self.notify(
                f"{short_cid(gone.cid)}: {plural(gone.blocks, 'block')}, "
                f"{byte_size(gone.bytes)} freed",
                title="Removed",
                markup=False,
            )
        self.load()

    def action_copy_cid(self) -> None:
        root = self._selected()
        if root is None:
            return
        self.app.copy_to_clipboard(root.cid)
        self.notify(f"{safe(root.cid)} (copied)", title="CID", markup=False)


def root_cells(root: api.DataRoot, now: float, name_width: int) -> dict[str, Content]:
    """One root's cells by column key, as shown (the name literally, cut to ``name_width``)."""
    name = safe(root.name)
    if len(name) > name_width:
        name = name[: name_width - 1] + ELLIPSIS
    return {
        "cid": Content.styled(short_cid(root.cid), "bold"),
        "name": Content(name),
        "kind": Content("folder" if root.kind == "directory" else safe(root.kind)),
        "size": Content(byte_size(root.size)),
        "blocks": Content(f"{root.blocks:,}"),
        "pinned": Content.styled("pinned", "$text-success") if root.pinned else Content(DASH),
        "age": Content(ago(root.added_at, now)),
    }


__all__ = ["DataScreen", "fit_columns", "root_cells", "short_cid"]
