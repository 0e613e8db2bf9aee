"""``?``: every key that works where you are, and what the command palette offers."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.node_header import NodeHeader

EVERYWHERE: tuple[tuple[str, str], ...] = (
    ("ctrl+p", "command palette: switch mode, onboard, pause, resume, offboard, help, quit"),
    ("?", "this help"),
    ("m", "switch between provider and consumer mode"),
    ("g", "GPUs: live load, memory, temperature, power (provider mode)"),
    ("p", "peers on this channel"),
    ("c", "chat with peers"),
    ("n", "network status: the channel's resources and load"),
    ("j", "jobs: the ones you bought and the ones this machine runs"),
    ("s", "submit an ML job (consumer mode)"),
    ("b", "notebooks: JupyterLab on a provider (consumer mode)"),
    ("w", "wallet: address, NTX and ADA balance, transactions"),
    ("$ or R", "rewards: claim what paid jobs earned, locks and refunds"),
    ("e", "resources: specs, prices, custom GPUs, pools (provider mode)"),
    ("a", "account: recharges, what jobs paid and got back (consumer mode)"),
    ("tab", "next field or button · shift+tab previous"),
    ("esc", "back / close"),
    ("q", "quit (ctrl+q also quits, even inside a text field)"),
)


class HelpScreen(Screen[None]):
    """Lists the keys of the screen it was opened from, then the ones that work everywhere."""

    ALLOW_MODE_SWITCH = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "escape,question_mark", "app.pop_screen", "Back", key_display="esc", id="help.back"
        ),
    ]
    DEFAULT_CSS = """
    HelpScreen {
        #help { padding: 0 1; }
        .panel {
            height: auto;
            border: round $primary 60%;
            border-title-style: bold;
            padding: 0 1;
        }
    }
    """

    def __init__(self, under: Screen[Any]) -> None:
        super().__init__()
        self.under_keys = _screen_keys(under)
        self.under_title = _screen_title(under)
        # A key the screen binds itself is said once, in its own words ("esc" was "Back" on
        # the screen's list and "back / close" again under "Keys everywhere").
        taken = {key for keys, _ in self.under_keys for key in keys.split(" or ")}
        self.everywhere_keys = [
            (keys, text)
            for keys, text in EVERYWHERE
            if not taken.intersection(keys.replace(" or ", " ").split())
        ]

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with VerticalScroll(id="help"):
            if self.under_keys:
                with Vertical(classes="panel", id="here") as panel:
                    panel.border_title = f"Keys on {self.under_title}"
                    yield KeyTable(self.under_keys, keys=True)
            with Vertical(classes="panel", id="everywhere") as panel:
                panel.border_title = "Keys everywhere"
                yield KeyTable(self.everywhere_keys, keys=True)
        yield Footer()


def _screen_title(screen: Screen[Any]) -> str:
    titles = {
        "ProviderDashboard": "the provider dashboard",
        "ConsumerDashboard": "the consumer dashboard",
        "OnboardingScreen": "the onboarding form",
        "ModeChooserScreen": "the mode chooser",
        "StartScreen": "the start screen",
        "PeersScreen": "the peers list",
        "ChatScreen": "the chat",
        "NetworkScreen": "the network status",
        "GpuScreen": "the GPU view",
        "JobsScreen": "the jobs list",
        "NotebooksScreen": "the notebooks",
        "JobDetailScreen": "the job",
        "SubmitScreen": "the submit form",
        "ResultsScreen": "the job's results",
        "GpuDoctorScreen": "the GPU doctor",
        "MlImagesScreen": "the ML images",
        "WalletScreen": "the wallet",
        "RewardsScreen": "the rewards",
    }
    return titles.get(type(screen).__name__, "this screen")


def _screen_keys(screen: Screen[Any]) -> list[tuple[str, str]]:
    """The screen's own bindings that are enabled now (not the app-wide ones): those in the
    footer, and those kept out of it (a full footer at 80 columns) that say what they do."""
    app = screen.app
    # One line per action: a binding of several keys ("left,h") is one binding per key here,
    # and each was a line of its own (the same help line twice).
    lines: dict[tuple[str, str], list[str]] = {}
    for active in screen.active_bindings.values():
        binding = active.binding
        if active.node is app or not active.enabled or not (binding.show or binding.tooltip):
            continue
        display = binding.key_display or app.get_key_display(binding)
        shown = lines.setdefault((binding.action, binding.tooltip or binding.description), [])
        if display not in shown:
            shown.append(display)
    return [(" or ".join(keys), text) for (_, text), keys in lines.items()]
