"""A job's results: pick a folder, fetch them, then look at the files.

``ResultsDirScreen`` asks where to unpack (default ~/nunet-results; each fetch gets its own
folder there, so runs never overwrite each other). ``ResultsScreen`` lists the files; JSON is
shown pretty-printed and CSV as a table, both literally (the files come from the provider).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, DataTable, Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from engine.api import JobResults
from nunet_tui.format import safe, thousands
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.sortable_table import (
    TABLE_BINDINGS,
    Row,
    SortableTables,
    TableSort,
)

DEFAULT_RESULTS_DIR = "~/nunet-results"
MAX_VIEW_BYTES = 2 << 20
MAX_CSV_ROWS = 2000


class ResultsDirScreen(ModalScreen[str | None]):
    """Where to unpack the results: dismissed with the folder, or None."""

    ALLOW_MODE_SWITCH = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="results_folder.cancel")
    ]
    DEFAULT_CSS = """
    ResultsDirScreen {
        align: center middle;
        #dialog {
            width: 70;
            max-width: 100%;
            height: auto;
            border: round $primary;
            background: $surface;
            padding: 1 2;
        }
        #question { text-style: bold; margin-bottom: 1; }
        #hint { color: $text-muted; margin-top: 1; }
        #buttons { height: auto; margin-top: 1; align-horizontal: right; }
        #buttons Button { margin-left: 1; }
    }
    """

    def __init__(self, default: str = DEFAULT_RESULTS_DIR) -> None:
        super().__init__()
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static("Fetch the results into", id="question", markup=False)
            yield Input(self.default, id="folder")
            yield Static(
                "Each fetch unpacks into a new folder there, named after the job.",
                id="hint",
                markup=False,
            )
            with Horizontal(id="buttons"):
                yield Button("Fetch (enter)", id="fetch", variant="primary")
                yield Button("Cancel (esc)", id="cancel")
        yield Footer()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip() or None)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "fetch":
            self.dismiss(self.query_one("#folder", Input).value.strip() or None)
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ResultsScreen(SortableTables, Screen[None]):
    """The unpacked files: Enter (or moving through them) shows one; a CSV file as a table
    that sorts and filters like every list."""

    ALLOW_MODE_SWITCH = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the job", id="results.back"),
        Binding("tab", "app.focus_next", "Next pane", show=False, id="results.next_pane"),
        *TABLE_BINDINGS,
    ]
    DEFAULT_CSS = """
    ResultsScreen {
        #results-body { height: 1fr; padding: 0 1; }
        #files-panel { width: 36; height: 1fr; }
        .-narrow #files-panel { width: 24; }
        #view-panel { width: 1fr; height: 1fr; }
        .panel {
            border: round $primary 60%;
            border-title-style: bold;
            border-subtitle-color: $text-muted;
            padding: 0 1;
        }
        .panel:focus-within { border: round $accent; }
        #files { height: 1fr; background: transparent; }
        #view-text-scroll { height: 1fr; }
        #view-table { height: 1fr; }
        #view-note { color: $text-muted; }
    }
    """

    def __init__(self, results: JobResults) -> None:
        super().__init__()
        self.results = results
        self.shown: str | None = None
        self.sorters = {"view-table": TableSort()}
        self.csv_rows: list[Row] = []
        self.csv_caption = ""  # the panel's subtitle while neither filtered nor sorted

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with Horizontal(id="results-body"):
            with Vertical(id="files-panel", classes="panel") as panel:
                panel.border_title = "Files"
                panel.border_subtitle = f"{len(self.results.files)} · sha256 verified"
                yield OptionList(
                    *(Option(Content(safe(name)), id=name) for name in self.results.files),
                    id="files",
                    compact=True,
                )
            with Vertical(id="view-panel", classes="panel") as panel:
                panel.border_title = safe(self.results.directory)
                yield self.filter_box()
                yield Static(id="view-note", markup=False)
                with VerticalScroll(id="view-text-scroll"):
                    yield Static(id="view-text", markup=False)
                yield DataTable(id="view-table", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        files = self.query_one("#files", OptionList)
        files.focus()
        preferred = next(
            (i for i, n in enumerate(self.results.files) if n.endswith((".json", ".csv"))), 0
        )
        if self.results.files:
            files.highlighted = preferred
            self.show_file(self.results.files[preferred])
        else:
            self._note("The job wrote no files in its output folder.")

    @on(OptionList.OptionHighlighted, "#files")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id and event.option.id != self.shown:
            self.show_file(event.option.id)

    @on(OptionList.OptionSelected, "#files")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self.show_file(event.option.id)
            target = self.query_one(
                "#view-table" if self.query_one("#view-table").display else "#view-text-scroll"
            )
            target.focus()

    def _note(self, text: str) -> None:
        note = self.query_one("#view-note", Static)
        note.update(text)
        note.display = bool(text)
        self.query_one("#view-text-scroll").display = False
        self.query_one("#view-table").display = False

    def show_file(self, name: str) -> None:
        self.shown = name
        path = Path(self.results.directory) / name
        panel = self.query_one("#view-panel", Vertical)
        panel.border_title = safe(name)
        try:
            size = path.stat().st_size
            if size > MAX_VIEW_BYTES:
                self._note(f"{thousands(size)} bytes: too big to show here; open {path}")
                return
            data = path.read_bytes()
        except OSError as exc:
            self._note(safe(f"cannot read {path}: {exc.strerror or exc}"))
            return
        panel.border_subtitle = f"{thousands(len(data))} bytes"
        kind = path.suffix.lower()
        if kind == ".csv":
            self._show_csv(data)
        elif kind == ".json":
            self._show_text(pretty_json(data))
        else:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                self._note(f"binary file, {thousands(len(data))} bytes")
                return
            self._show_text(text)

    def _show_text(self, text: str) -> None:
        self.query_one("#view-note").display = False
        self.query_one("#view-table").display = False
        scroll = self.query_one("#view-text-scroll")
        scroll.display = True
        scroll.scroll_home(animate=False)
        lines = [safe(line.expandtabs()) for line in text.splitlines()]
        self.query_one("#view-text", Static).update(Content("\n".join(lines)))

    def _show_csv(self, data: bytes) -> None:
        try:
            rows = list(csv.reader(io.StringIO(data.decode("utf-8", "replace"))))
        except csv.Error as exc:
            self._note(safe(f"not a readable CSV file: {exc}"))
            return
        if not rows:
            self._note("an empty CSV file")
            return
        self.query_one("#view-note").display = False
        self.query_one("#view-text-scroll").display = False
        table: DataTable[Any] = self.query_one("#view-table", DataTable)
        table.display = True
        table.clear(columns=True)
        header, body = rows[0], rows[1:]
        width = max(len(row) for row in rows)
        header = header + [""] * (width - len(header))
        for index, name in enumerate(header):
            table.add_column(Text(safe(name), style="bold"), key=str(index))
        self.csv_rows = [
            Row(str(at), [Text(safe(cell)) for cell in row] + [Text("")] * (width - len(row)))
            for at, row in enumerate(body[:MAX_CSV_ROWS])
        ]
        self.csv_caption = str(self.query_one("#view-panel", Vertical).border_subtitle or "")
        if len(body) > MAX_CSV_ROWS:
            self.csv_caption = f"first {thousands(MAX_CSV_ROWS)} of {thousands(len(body))} rows"
        self.show_csv_rows()

    def redraw_table(self, table_id: str) -> None:
        self.show_csv_rows()

    def show_csv_rows(self) -> None:
        table: DataTable[Text] = self.query_one("#view-table", DataTable)
        sorter = self.sorters["view-table"]
        shown = sorter.fill(table, self.csv_rows)
        panel = self.query_one("#view-panel", Vertical)
        if sorter.query.strip() or sorter.sort_by is not None:
            panel.border_subtitle = sorter.caption(len(shown), len(self.csv_rows), "row")
        else:
            panel.border_subtitle = self.csv_caption


def pretty_json(data: bytes) -> str:
    """Indented JSON; the text as it is when it does not parse."""
    text = data.decode("utf-8", "replace")
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


__all__ = ["DEFAULT_RESULTS_DIR", "ResultsDirScreen", "ResultsScreen", "pretty_json"]
