"""First run: provider or consumer? The answer is stored; ``m`` switches later."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Center, Middle, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Label, OptionList, Static
from textual.widgets.option_list import Option

from engine.api import Mode
from nunet_tui.widgets.node_header import NodeHeader

CHOICES: tuple[tuple[Mode, str, str], ...] = (
    (
        "provider",
        "Provider",
        "Offer this machine's CPU, RAM and GPUs to the network and earn NTX "
        "for the ML jobs it runs.",
    ),
    (
        "consumer",
        "Consumer",
        "Run ML jobs on other people's machines and pay for the compute in NTX.",
    ),
)


class ModeChooserScreen(Screen[Mode]):
    """Dismissed with the chosen mode."""

    ALLOW_MODE_SWITCH = False
    AUTO_FOCUS = "#choices"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "choose('provider')", "Provider", id="mode_chooser.provider"),
        Binding("c", "choose('consumer')", "Consumer", id="mode_chooser.consumer"),
    ]
    DEFAULT_CSS = """
    ModeChooserScreen {
        #chooser {
            width: 76;
            max-width: 100%;
            height: auto;
            border: round $primary;
            border-title-style: bold;
            padding: 1 2;
        }
        #chooser-intro { margin-bottom: 1; }
        #choices { height: auto; border: none; padding: 0; }
        #choices > .option-list--option { padding: 0 1; }
        #chooser-hint { margin-top: 1; color: $text-muted; }
    }
    """

    def compose(self) -> ComposeResult:
        yield NodeHeader()
        with Middle(), Center(), Vertical(id="chooser") as chooser:
            chooser.border_title = "Welcome to nunet-tui"
            yield Static(
                "How will you use this node? Pick one to start; you can switch at any time with m.",
                id="chooser-intro",
            )
            yield OptionList(
                *(
                    Option(
                        Content.assemble((title, "bold"), "\n", (text, "$text-muted")),
                        id=mode,
                    )
                    for mode, title, text in CHOICES
                ),
                id="choices",
            )
            yield Label("↑↓ move · Enter choose · p provider · c consumer", id="chooser-hint")
        yield Footer()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option_id in ("provider", "consumer"):
            self.dismiss(event.option_id)  # type: ignore[arg-type]

    def action_choose(self, mode: str) -> None:
        if mode in ("provider", "consumer"):
            self.dismiss(mode)  # type: ignore[arg-type]
