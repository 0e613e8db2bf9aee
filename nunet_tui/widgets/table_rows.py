"""Filling a DataTable from rows the screen computed, the same way on every screen."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

# What each table shows now: screens recompute their rows on every refresh and event.
_shown: weakref.WeakKeyDictionary[DataTable[Any], tuple[tuple[str, str], ...]] = (
    weakref.WeakKeyDictionary()
)


def selected_key(table: DataTable[Any]) -> str | None:
    """The key of the row under the cursor, if any."""
    if not table.row_count:
        return None
    try:
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
    except Exception:
        return None
    return key.value


def refill(table: DataTable[Text], rows: Sequence[tuple[str, Sequence[Text]]]) -> bool:
    """Show ``rows`` (key, cells), keeping the cursor on the same row; False if unchanged.

    An unchanged table is left alone: clearing it resets its column widths until the next
    idle, so a frame drawn in between shows the columns collapsed, and the cursor flickers.
    """
    signature = tuple((key, repr(cells)) for key, cells in rows)
    if _shown.get(table) == signature and table.row_count == len(rows):
        return False
    _shown[table] = signature
    selected = selected_key(table)
    table.clear()
    for key, cells in rows:
        table.add_row(*cells, key=key)
    if selected is not None and selected in {key for key, _ in rows}:
        table.move_cursor(row=table.get_row_index(selected))
    return True
