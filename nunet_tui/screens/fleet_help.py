"""``?`` on the fleet screen: its keys (the fleet app has none of the dashboard's places)."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from nunet_tui.widgets.key_table import KeyTable

ABOUT = (
    "Each rig of config.toml's [fleet] rigs, polled every few seconds, each on its own: a "
    "rig that does not answer is unreachable (the reason below the table) and never holds "
    "up the others. Alerts: offline, unreachable, a GPU at 85 °C or more, under 5 GB of "
    "disk free. Paid today: NTX paid to the rig as provider by escrows settled since "
    "midnight. A rig behind SSH: forward its socket (ssh -L /tmp/rig.sock:<its socket>) or "
    "its API port and list that. Enter opens a rig's dashboard in place when the rig is on "
    "this machine (quit it to come back here); for a rig elsewhere it shows the command."
)


class FleetHelpScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "escape,question_mark",
            "app.pop_screen",
            "Back",
            key_display="esc",
            id="fleet_help.back",
        ),
    ]
    DEFAULT_CSS = """
    FleetHelpScreen {
        #help { padding: 0 1; }
        .panel { height: auto; border: round $primary 60%; border-title-style: bold; padding: 0 1; }
    }
    """

    def __init__(self, under: Screen[Any]) -> None:
        super().__init__()
        self.rows: list[tuple[str, str]] = [
            ("↑ ↓", "select a rig"),
            *[
                (
                    binding.key_display or under.app.get_key_display(binding),
                    binding.tooltip or binding.description,
                )
                for binding in _bindings(under)
            ],
            ("ctrl+q", "quit"),
        ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            with Vertical(classes="panel") as panel:
                panel.border_title = "Keys on the fleet"
                yield KeyTable(self.rows, keys=True)
            with Vertical(classes="panel") as panel:
                panel.border_title = "What it shows"
                yield Static(ABOUT, markup=False)
        yield Footer()


def _bindings(screen: Screen[Any]) -> list[Binding]:
    """The screen's own bindings as the keymap has them now (a ``[keys]`` remap shown)."""
    seen: dict[str, Binding] = {}
    for active in screen.active_bindings.values():
        binding_id = active.binding.id or ""
        # The fleet's own keys: not Textual's focus and copy keys every screen has.
        if binding_id.startswith("fleet.") and active.binding.action not in seen:
            seen[active.binding.action] = active.binding
    return list(seen.values())
