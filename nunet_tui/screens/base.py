"""What every nunet screen shares: the node picture and a way to reach the app.

``NodeView`` and ``NetworkView`` live in nunet_tui/viewmodels/node.py (widgets show them too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual.screen import Screen

from nunet_tui.events import EventHandlers
from nunet_tui.messages import EngineUpdate
from nunet_tui.viewmodels.node import NodeView
from nunet_tui.widgets.sortable_table import (
    AUTO,
    FILTER_BINDING,
    HELP_BINDING,
    SORT_BINDINGS,
    TABLE_BINDINGS,
    SortableTables,
    TableSort,
)

if TYPE_CHECKING:
    from nunet_tui.app import NunetApp


class NodeScreen(EventHandlers, Screen[Any]):
    """A screen that shows the node; ``show_node`` runs whenever the app re-reads it.

    The engine's events reach the screen on top as ``EngineUpdate``; each goes to the
    screen's method marked ``@handles(ItsType)`` (nunet_tui/events.py), if it has one."""

    ALLOW_MODE_SWITCH: ClassVar[bool] = True

    @property
    def nunet(self) -> NunetApp:
        return cast("NunetApp", self.app)

    def on_mount(self) -> None:
        self.watch(self.app, "node", self._node_changed, init=True)

    def on_engine_update(self, message: EngineUpdate) -> None:
        self.dispatch_event(message.event)

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


class FilteredTableScreen(SortableTables, CapabilityScreen):
    """A capability screen with one table (``TABLE_ID``) and a ``/`` filter box (``#filter``,
    ``filter_box``): Esc first clears and hides the filter, then goes back.

    It sorts as k9s does (``sortable_table``): ``o`` the next column (the screen's ``SORTS``
    first), ``O`` reverses, a click on a header sorts by it; the order and the filter stay
    through refreshes. ``show`` hands its rows to ``sorter.fill``."""

    TABLE_ID: ClassVar[str] = ""
    SORTS: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init__(self) -> None:
        super().__init__()
        self.sorters = {self.TABLE_ID: TableSort(self.SORTS, self.sort_value)}

    @property
    def sorter(self) -> TableSort:
        return self.sorters[self.TABLE_ID]

    def sort_value(self, item: Any, key: str) -> Any:
        """What ``item`` (one row's record) is sorted by for column ``key`` (larger first
        for the screen's own SORTS); ``AUTO``: the cell's text. None sorts last."""
        return AUTO

    def show(self) -> None:
        """Fill the table from what the screen holds, honouring the filter and the sort."""


__all__ = [
    "FILTER_BINDING",
    "HELP_BINDING",
    "SORT_BINDINGS",
    "TABLE_BINDINGS",
    "CapabilityScreen",
    "FilteredTableScreen",
    "NodeScreen",
]
