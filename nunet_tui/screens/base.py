"""What every nunet screen shares: the node picture and a way to reach the app.

``NodeView`` and ``NetworkView`` live in nunet_tui/viewmodels/node.py (widgets show them too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

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


class FilteredTableScreen(CapabilityScreen):
    """A capability screen with one table and a ``/`` filter box (ids ``#filter`` and
    ``TABLE_ID``): Esc first clears and hides the filter, then goes back."""

    TABLE_ID: ClassVar[str] = ""

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
