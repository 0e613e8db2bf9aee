"""What every nunet screen shares: the node picture and a way to reach the app."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual.screen import Screen

from engine.api import Capacity, NodeInfo, Onboarding

if TYPE_CHECKING:
    from nunet_tui.app import NunetApp


@dataclass(frozen=True)
class NodeView:
    """One consistent reading of the node: info plus the full and onboarded capacity."""

    info: NodeInfo
    full: Capacity
    onboarded: Capacity | None = None

    @property
    def onboarding(self) -> Onboarding | None:
        return self.info.onboarded


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
