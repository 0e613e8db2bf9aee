"""The top line of every screen: app, mode, channel, peer id, network and engine state.

``nunet-tui  provider · nunet-test · 12D3KooW…x9Fq   ● online · 7 peers   ● ready · embedded``
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Label

from nunet_tui.format import safe, short_peer_id
from nunet_tui.viewmodels.node import NetworkView, NodeView

ENGINE_STATES = {
    "starting": ("◌ ", "$text-muted", "starting"),
    "ready": ("● ", "$success", "ready"),
    "error": ("✗ ", "$error", "engine error"),
    "stopped": ("○ ", "$warning", "engine stopped"),
    "offline": ("○ ", "$error", "daemon offline · reconnecting"),
}


class NodeHeader(Horizontal):
    """Watches the app's node picture and engine state; ``mode`` is the screen's mode."""

    DEFAULT_CSS = """
    NodeHeader {
        height: 1;
        width: 1fr;
        dock: top;
        background: $panel;
        #brand { padding: 0 1; background: $primary; color: $text; text-style: bold; }
        #where { width: 1fr; padding: 0 1; }
        #network { width: auto; padding: 0 1; }
        #engine { width: auto; padding: 0 1; }
    }
    """

    def __init__(self, mode: str | None = None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.mode = mode

    def compose(self) -> ComposeResult:
        yield Label("nunet-tui", id="brand", markup=False)
        yield Label("", id="where", markup=False)
        yield Label("", id="network", markup=False)
        yield Label("", id="engine", markup=False)

    def on_mount(self) -> None:
        self.watch(self.app, "node", self._show_node, init=True)
        self.watch(self.app, "engine_state", self._show_engine, init=True)
        if hasattr(self.app, "network"):
            self.watch(self.app, "network", self._show_network, init=True)

    def _show_node(self, node: NodeView | None) -> None:
        parts: list[str] = []
        if self.mode:
            parts.append(self.mode)
        if node is not None:
            if node.onboarding is not None:
                parts.append(safe(node.onboarding.channel))
            parts.append(short_peer_id(node.info.peer_id))
        self.query_one("#where", Label).update(Content(" · ".join(parts)))
        self._show_engine(getattr(self.app, "engine_state", "starting"))

    def _show_engine(self, state: str) -> None:
        mark, style, word = ENGINE_STATES.get(state, ENGINE_STATES["starting"])
        node: NodeView | None = getattr(self.app, "node", None)
        parts: list[str | tuple[str, str]] = [(mark, style), word]
        if state == "ready" and node is not None:
            parts.append((" · daemon" if node.info.daemon else " · embedded", "$text-muted"))
        self.query_one("#engine", Label).update(Content.assemble(*parts))

    def _show_network(self, network: NetworkView) -> None:
        self.query_one("#network", Label).update(network_state(network))


def network_state(network: NetworkView) -> Content:
    """``● online · 3 peers``, ``○ offline``, ``○ network off`` (one-shot or test engines)."""
    if network.state == "online":
        count = network.peers
        return Content.assemble(
            ("● ", "$success"), "online", (f" · {count} peer{'s' if count != 1 else ''}", "")
        )
    if network.state == "offline":
        return Content.assemble(("○ ", "$warning"), "offline")
    if network.state == "off":
        return Content.assemble(("○ ", "$text-muted"), ("network off", "$text-muted"))
    return Content("")
