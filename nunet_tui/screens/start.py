"""The first screen: shown while the engine answers its first questions, or says why not."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Center, Middle
from textual.content import Content
from textual.widgets import Footer, Static

from nunet_tui.format import safe
from nunet_tui.screens.base import NodeScreen
from nunet_tui.widgets.node_header import NodeHeader


class StartScreen(NodeScreen):
    DEFAULT_CSS = """
    StartScreen {
        #start-message { width: auto; max-width: 70; padding: 1 2; border: round $primary; }
    }
    """

    def compose(self) -> ComposeResult:
        yield NodeHeader()
        with Middle(), Center():
            yield Static("Starting the node engine…", id="start-message")
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.watch(self.app, "engine_state", self._show_state, init=True)

    def _show_state(self, state: str) -> None:
        message = self.query_one("#start-message", Static)
        if state == "error":
            error = getattr(self.app, "startup_error", None) or "unknown error"
            message.update(
                Content.assemble(
                    ("The engine did not start\n\n", "bold $error"),
                    safe(error),
                    ("\n\nPress q to quit.", "$text-muted"),
                )
            )
        elif state == "ready":
            message.update("Node ready.")
        else:
            message.update("Starting the node engine…")
