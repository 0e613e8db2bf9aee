"""Sorting and filtering a list as k9s does, for any screen or widget that shows one.

``TableSort`` is one list's state: the column it is sorted by, which way, and the ``/``
filter's text. It lives as long as its owner, so the order and the filter survive the owner's
refreshes; the owner recomputes its rows (``Row``: key, the cells as shown, the record) and
hands them to ``fill`` (a ``DataTable``, the cursor kept on the same key) or ``arrange``
(any other list). A column sorts by its record's value where the owner gives one
(``sort_value``: amounts in base units, times as numbers), else by its cell's text read as a
number where it is one ("1,024/2,048", "12 ms", "00:03:10", "5 min ago"), else as text;
empty cells sort last either way.

``SortableTables`` is the keys for an owner of one or more DataTables: ``o`` the next column,
``O`` reverse, a click on a header sorts by it, ``/`` opens the owner's ``#filter`` box; with
several tables they act on the focused one. ``TABLE_BINDINGS`` lists them for a footer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from textual.binding import Binding, BindingType
from textual.widgets import Input

from nunet_tui.format import DASH, plural

if TYPE_CHECKING:
    from rich.text import Text
    from textual.content import Content
    from textual.dom import DOMNode
    from textual.widgets import DataTable

# The keys, at the end of the owner's own BINDINGS (``TABLE_BINDINGS``): the footer shows a
# screen's keys in order, then the app's, and cuts the last at 80 columns. ``?`` comes first
# so that it is never cut: the help it opens lists the rest.
HELP_BINDING = Binding(
    "question_mark",
    "app.help",
    "Help",
    key_display="?",
    tooltip="Every key of this screen",
    id="table.help",
)
FILTER_BINDING = Binding(
    "slash",
    "filter",
    "Filter",
    key_display="/",
    tooltip="Filter the list by any text in a row",
    id="table.filter",
)
SORT_BINDINGS: list[BindingType] = [
    Binding(
        "o",
        "sort_next",
        "Sort",
        tooltip="Sort by the next column (O reverses)",
        id="table.sort_next",
    ),
    Binding(
        "O",
        "sort_reverse",
        "Reverse",
        show=False,
        tooltip="Reverse the sort",
        id="table.sort_reverse",
    ),
]
TABLE_BINDINGS: list[BindingType] = [HELP_BINDING, FILTER_BINDING, *SORT_BINDINGS]
FILTER_PLACEHOLDER = "filter: any text in a row (Enter keeps it, Esc clears)"


class Row(NamedTuple):
    key: str
    cells: Sequence[Text | Content]  # one per column of the table now, as shown
    record: Any = None  # what ``sort_value`` reads
    extra: str = ""  # more text ``/`` finds: the full ids the cells shorten


class _Auto:
    """``sort_value``'s answer for "sort by the cell's text"."""


AUTO: Any = _Auto()

_AGO = re.compile(r"(\d+) (s|min|h|d) ago")
_AGO_SECONDS = {"s": 1, "min": 60, "h": 3600, "d": 86_400}
_HMS = re.compile(r"(?:(\d+)d )?(\d+):(\d\d):(\d\d)")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")
_EMPTY = {"", DASH, "-", "?", "n/a", "never", "none"}


def cell_value(text: str) -> tuple[int, float | str] | None:
    """What a cell sorts by: ``(0, number)`` before ``(1, text)``; None when empty."""
    text = text.strip()
    if text.lower() in _EMPTY:
        return None
    if text == "just now":
        return (0, 0.0)
    if ago := _AGO.fullmatch(text):
        return (0, float(ago[1]) * _AGO_SECONDS[ago[2]])
    if hms := _HMS.fullmatch(text):
        days, hours, minutes, seconds = (int(part or 0) for part in hms.groups())
        return (0, float(((days * 24 + hours) * 60 + minutes) * 60 + seconds))
    if number := _NUMBER.match(text):
        return (0, float(number[0].replace(",", "")))
    return (1, text.lower())


class TableSort:
    """One list's sort and filter (see the module's doc).

    ``sorts`` (key, label): the sorts the owner chose first, best first (``o`` starts with
    them, descending); some may be no column (the peers' price). ``sort_value(record, key)``
    is what a row sorts by, or ``AUTO`` for its cell's text; a larger value is better for
    the owner's own sorts (the first press shows the best first)."""

    def __init__(
        self,
        sorts: Sequence[tuple[str, str]] = (),
        sort_value: Callable[[Any, str], Any] | None = None,
    ) -> None:
        self.sorts = dict(sorts)
        self.sort_value = sort_value
        self.columns: dict[str, str] = {}  # the table's columns now: key, label
        self.sort_by: str | None = None  # None: the owner's own order
        self.descending = True
        self.query = ""

    # --- choosing ------------------------------------------------------------------------

    def keys(self) -> list[str]:
        """What ``o`` goes through: the owner's sorts, then every other column."""
        return [*self.sorts, *(key for key in self.columns if key not in self.sorts)]

    def label(self, key: str) -> str:
        return self.sorts.get(key) or self.columns.get(key) or key

    def next(self) -> None:
        keys = self.keys()
        at = keys.index(self.sort_by) + 1 if self.sort_by in keys else 0
        self.choose(keys[at] if at < len(keys) else None)

    def choose(self, key: str | None) -> None:
        """Sort by ``key``: the owner's sorts best first, other columns ascending."""
        self.sort_by = key
        self.descending = key in self.sorts

    def reverse(self) -> bool:
        if self.sort_by is None:
            return False
        self.descending = not self.descending
        return True

    def click(self, key: str) -> None:
        """A click on a header: sort by it, or the other way when it is the sort already."""
        if self.sort_by == key:
            self.reverse()
        else:
            self.choose(key)

    # --- arranging -----------------------------------------------------------------------

    def matches(self, row: Row) -> bool:
        query = self.query.strip().lower()
        if not query:
            return True
        text = " ".join([row.extra, *(cell.plain for cell in row.cells)])
        return query in text.lower()

    def value(self, row: Row, key: str) -> Any:
        if self.sort_value is not None:
            value = self.sort_value(row.record, key)
            if value is not AUTO:
                return value
        keys = list(self.columns)
        if key not in keys or keys.index(key) >= len(row.cells):
            return None
        return cell_value(row.cells[keys.index(key)].plain)

    def order(self, rows: Iterable[Row]) -> list[Row]:
        """``rows`` in the chosen order (stable: ties keep the owner's order; empty last)."""
        rows = list(rows)
        key = self.sort_by
        if key is None:
            return rows
        values = [(self.value(row, key), row) for row in rows]
        present = [(value, row) for value, row in values if value is not None]
        present.sort(key=lambda pair: pair[0], reverse=self.descending)
        return [row for _, row in present] + [row for value, row in values if value is None]

    def arrange(self, rows: Iterable[Row]) -> list[Row]:
        """The rows the filter keeps, in the chosen order."""
        return self.order(row for row in rows if self.matches(row))

    def fill(self, table: DataTable[Text], rows: Iterable[Row]) -> list[Row]:
        """Show ``rows`` in ``table``, filtered and sorted (the cursor stays on its key);
        the rows shown."""
        from nunet_tui.widgets.table_rows import refill  # DataTable: not before the first frame

        self.columns = {str(key.value): column.label.plain for key, column in table.columns.items()}
        shown = self.arrange(rows)
        refill(table, [(row.key, cast("Sequence[Text]", row.cells)) for row in shown])
        return shown

    # --- saying --------------------------------------------------------------------------

    def sort_label(self) -> str:
        """`` · sorted by free RAM ↓`` (empty when unsorted)."""
        if self.sort_by is None:
            return ""
        return f" · sorted by {self.label(self.sort_by)} {'↓' if self.descending else '↑'}"

    def caption(self, shown: int, total: int, noun: str) -> str:
        """``2 of 5 shown`` while filtered, else ``5 jobs``; then the sort."""
        count = f"{shown} of {total} shown" if self.query.strip() else plural(total, noun)
        return count + self.sort_label()


class SortableTables:
    """The sort and filter keys for a screen or widget owning DataTables (a mixin; list
    ``TABLE_BINDINGS`` at the end of the owner's BINDINGS).

    ``sorters`` maps each table's id to its ``TableSort``; the owner yields an ``Input``
    with id ``filter`` (``filter_box``), hidden until ``/``, and redraws a table in
    ``redraw_table`` (by default ``show()``). Esc (``action_back``) first clears the filter.
    """

    sorters: dict[str, TableSort]
    filter_target: str | None = None

    # --- what the owner gives -------------------------------------------------------------

    def redraw_table(self, table_id: str) -> None:
        show = getattr(self, "show", None)
        if show is not None:
            show()

    @staticmethod
    def filter_box() -> Input:
        """The ``/`` box, hidden; not focusable while hidden (a screen's first focus, and
        tab, would land in it: Textual's focus skips hidden widgets by visibility only)."""
        box = Input(placeholder=FILTER_PLACEHOLDER, id="filter")
        box.display = False
        box.can_focus = False
        return box

    # --- which table ---------------------------------------------------------------------

    def _node(self) -> DOMNode:
        node: DOMNode = self  # type: ignore[assignment]
        return node

    def _focused_table(self) -> str | None:
        """The id of the table the keys act on: the focused one, else the first shown."""
        from textual.widgets import DataTable  # 10 ms to import: not before the first frame

        focused = self._node().screen.focused
        if isinstance(focused, DataTable) and focused.id in self.sorters:
            return focused.id
        for table_id in self.sorters:
            found = self._node().query(f"#{table_id}")
            if found and found.first().display:
                return table_id
        return None

    def _table_widget(self, table_id: str) -> Any:
        return self._node().query_one(f"#{table_id}")

    # --- actions -------------------------------------------------------------------------

    def action_sort_next(self) -> None:
        table_id = self._focused_table()
        if table_id is not None:
            self.sorters[table_id].next()
            self.redraw_table(table_id)

    def action_sort_reverse(self) -> None:
        table_id = self._focused_table()
        if table_id is not None and self.sorters[table_id].reverse():
            self.redraw_table(table_id)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        table_id = event.data_table.id
        if table_id in self.sorters and event.column_key.value is not None:
            event.stop()
            self.sorters[table_id].click(event.column_key.value)
            self.redraw_table(table_id)

    def action_filter(self) -> None:
        table_id = self._focused_table()
        if table_id is None:
            return
        self.filter_target = table_id
        box = self._node().query_one("#filter", Input)
        box.value = self.sorters[table_id].query
        box.display = box.can_focus = True
        box.focus()

    def clear_filter(self) -> bool:
        """Esc: clear and hide the filter box (True), or nothing to clear (False)."""
        box = self._node().query_one("#filter", Input)
        if not box.display:
            return False
        box.value = ""
        box.display = box.can_focus = False
        if self.filter_target is not None:
            self.sorters[self.filter_target].query = ""
            self._table_widget(self.filter_target).focus()
            self.redraw_table(self.filter_target)
        return True

    def action_back(self) -> None:
        if not self.clear_filter():
            self.go_back()

    def go_back(self) -> None:
        """What Esc does once the filter is gone: back to the screen below."""
        self._node().app.pop_screen()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter" and self.filter_target is not None:
            event.stop()
            self.sorters[self.filter_target].query = event.value
            self.redraw_table(self.filter_target)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter" and self.filter_target is not None:
            event.stop()
            self._table_widget(self.filter_target).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("sort_next", "sort_reverse", "filter"):
            return bool(self.sorters)
        check: Callable[[str, tuple[object, ...]], bool | None] = super().check_action  # type: ignore[misc]
        return check(action, parameters)


__all__ = [
    "AUTO",
    "FILTER_BINDING",
    "HELP_BINDING",
    "SORT_BINDINGS",
    "TABLE_BINDINGS",
    "Row",
    "SortableTables",
    "TableSort",
    "cell_value",
]
