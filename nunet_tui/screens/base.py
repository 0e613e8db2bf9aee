"""What every nunet screen shares: the node picture and a way to reach the app.

``NodeView`` and ``NetworkView`` live in nunet_tui/viewmodels/node.py (widgets show them too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Input

from nunet_tui.viewmodels.node import NodeView

if TYPE_CHECKING:
    from textual.widgets import DataTable

    from nunet_tui.app import NunetApp


class NodeScreen(Screen[Any]):
    """A screen that shows the node; ``show_node`` runs whenever the app re-reads it."""

    ALLOW_MODE_SWITCH: ClassVar[bool] = True

    @property
    def nunet(self) -> NunetApp:
        return cast("NunetApp", self.app)

    def on_mount(self) -> None:
        self.watch(self.app, "node", self._node_changed, init=True)

    def _node_changed(self, node: NodeView | None) -> None:
        if node is not None:
            self.show_node(node)

    def show_node(self, node: NodeView) -> None:
        """Redraw from ``node``; screens override this."""


class CapabilityScreen(NodeScreen):
    """A screen opened from a dashboard (peers, chat, network, GPUs): Esc goes back.

    Engine events reach it as ``EngineUpdate`` (``on_engine_update``) while it is on top;
    when it comes back on top it reloads (``reload``), so nothing is missed meanwhile.
    """

    TITLE_TEXT: ClassVar[str] = "this screen"

    def on_screen_resume(self) -> None:
        self.reload()

    def reload(self) -> None:
        """Read again from the engine; screens override this (usually a worker)."""


# A sorting screen's keys, at the end of its own BINDINGS (the footer shows its screen's
# keys first, and at 80 columns the last are cut).
SORT_BINDINGS: list[BindingType] = [
    Binding("o", "sort_next", "Sort", tooltip="Sort by the next column (O reverses)"),
    Binding("O", "sort_reverse", "Reverse", show=False),
]


class FilteredTableScreen(CapabilityScreen):
    """A capability screen with one table and a ``/`` filter box (ids ``#filter`` and
    ``TABLE_ID``): Esc first clears and hides the filter, then goes back.

    Screens that list ``SORTS`` (column key, what it sorts by) also sort, as k9s does: ``o``
    takes the next column, ``O`` reverses, a click on a column's header sorts by it. The
    order stays through refreshes; ``show`` orders its rows with ``sort_rows``."""

    TABLE_ID: ClassVar[str] = ""
    SORTS: ClassVar[tuple[tuple[str, str], ...]] = ()
    sort_by: str | None = None  # a key of SORTS; None: the screen's own order
    sort_descending = True

    def sort_value(self, item: Any, key: str) -> Any:
        """What ``item`` (one row's record) is sorted by for column ``key``; screens with
        SORTS override this. None sorts last either way."""
        return None

    def sort_rows(self, items: list[Any]) -> list[Any]:
        """``items`` in the order chosen (stable: ties keep the screen's own order)."""
        key = self.sort_by
        if key is None:
            return items
        present = [i for i in items if self.sort_value(i, key) is not None]
        absent = [i for i in items if self.sort_value(i, key) is None]
        present.sort(key=lambda i: self.sort_value(i, key), reverse=self.sort_descending)
        return present + absent

    def sort_label(self) -> str:
        """`` · sorted by free RAM ↓`` (empty when unsorted)."""
        labels = dict(self.SORTS)
        if self.sort_by is None or self.sort_by not in labels:
            return ""
        return f" · sorted by {labels[self.sort_by]} {'↓' if self.sort_descending else '↑'}"

    def action_sort_next(self) -> None:
        keys = [key for key, _ in self.SORTS]
        if not keys:
            return
        at = keys.index(self.sort_by) + 1 if self.sort_by in keys else 0
        self.sort_by = keys[at] if at < len(keys) else None
        self.sort_descending = True
        self.show()

    def action_sort_reverse(self) -> None:
        if self.sort_by is not None:
            self.sort_descending = not self.sort_descending
            self.show()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = event.column_key.value
        if key in dict(self.SORTS):
            event.stop()
            if self.sort_by == key:
                self.sort_descending = not self.sort_descending
            else:
                self.sort_by, self.sort_descending = key, True
            self.show()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("sort_next", "sort_reverse"):
            return bool(self.SORTS)
        return True

    def show(self) -> None:
        """Fill the table from what the screen holds, honouring the filter."""

    def _table(self) -> DataTable[Any]:
        from textual.widgets import DataTable  # 10 ms to import: not before the first frame

        return self.query_one(f"#{self.TABLE_ID}", DataTable)

    def action_back(self) -> None:
        field = self.query_one("#filter", Input)
        if field.display:
            field.value = ""
            field.display = False
            self._table().focus()
            self.show()
            return
        self.app.pop_screen()

    def action_filter(self) -> None:
        field = self.query_one("#filter", Input)
        field.display = True
        field.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.show()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self._table().focus()
