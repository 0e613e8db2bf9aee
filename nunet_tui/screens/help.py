"""``?``: every key that works where you are, and what the command palette offers."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer

from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.node_header import NodeHeader

# The keys that work everywhere: an app binding's id (its key as mapped now is looked up), or
# a key Textual itself binds.
EVERYWHERE: tuple[tuple[str, str], ...] = (
    ("ctrl+p", "command palette: switch mode, onboard, pause, resume, offboard, help, quit"),
    ("app.help", "this help"),
    ("app.mode", "switch between provider and consumer mode"),
    ("app.gpus", "GPUs: live load, memory, temperature, power (provider mode)"),
    ("app.peers", "peers on this channel"),
    ("app.chat", "chat with peers"),
    ("app.network", "network status: the channel's resources and load"),
    ("app.jobs", "jobs: the ones you bought and the ones this machine runs"),
    ("app.submit", "submit an ML job (consumer mode)"),
    ("app.notebooks", "notebooks: JupyterLab on a provider (consumer mode)"),
    ("app.data", "data: files and folders by CID: add, get, pin"),
    ("app.wallet", "wallet: address, NTX and ADA balance, transactions"),
    ("app.rewards", "rewards: claim what paid jobs earned, locks and refunds"),
    ("app.resources", "resources: specs, prices, custom GPUs, pools (provider mode)"),
    ("app.account", "account: recharges, what jobs paid and got back (consumer mode)"),
    ("tab", "next field or button · shift+tab previous"),
    ("esc", "back / close"),
    ("app.quit", "quit (ctrl+q also quits, even inside a text field)"),
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
        # (keys as mapped now, text) -> the binding id of that line: its name in `[keys]`.
        self.key_ids: dict[tuple[str, str], str] = {}
        self.under_keys = _screen_keys(under, self.key_ids)
        self.under_title = _screen_title(under)
        # A key the screen binds itself is said once, in its own words ("esc" was "Back" on
        # the screen's list and "back / close" again under "Keys everywhere").
        taken = {key for keys, _ in self.under_keys for key in keys.split(" or ")}
        self.everywhere_keys = [
            line
            for line in _everywhere(under.app, self.key_ids)
            if not taken.intersection(line[0].split(" or "))
        ]

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with VerticalScroll(id="help"):
            if self.under_keys:
                with Vertical(classes="panel", id="here") as panel:
                    panel.border_title = f"Keys on {self.under_title}"
                    yield KeyTable(self._with_ids(self.under_keys), keys=True)
            with Vertical(classes="panel", id="everywhere") as panel:
                panel.border_title = "Keys everywhere"
                panel.border_subtitle = "dim: the id to remap a key by, in config.toml"
                yield KeyTable(self._with_ids(self.everywhere_keys), keys=True)
        yield Footer()

    def _with_ids(self, lines: list[tuple[str, str]]) -> list[tuple[str, str | Content]]:
        """Each line's text, then its id dimmed: the name to remap it by in `[keys]`."""
        return [
            (keys, Content.assemble(text, "  ", (binding_id, "dim")))
            if (binding_id := self.key_ids.get((keys, text)))
            else (keys, text)
            for keys, text in lines
        ]


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
        "DataScreen": "the data",
        "JobDetailScreen": "the job",
        "SubmitScreen": "the submit form",
        "ResultsScreen": "the job's results",
        "GpuDoctorScreen": "the GPU doctor",
        "MlImagesScreen": "the ML images",
        "WalletScreen": "the wallet",
        "RewardsScreen": "the rewards",
    }
    return titles.get(type(screen).__name__, "this screen")


def _everywhere(app: App[Any], ids: dict[tuple[str, str], str]) -> list[tuple[str, str]]:
    """EVERYWHERE with each app binding's keys as ``[keys]`` maps them now."""
    bindings = {b.id: b for b in app.BINDINGS if isinstance(b, Binding) and b.id}
    remaps: dict[str, str] = getattr(app, "keys", {})
    lines: list[tuple[str, str]] = []
    for name, text in EVERYWHERE:
        binding = bindings.get(name)
        if binding is None:
            lines.append((name, text))
            continue
        keys = remaps.get(name, binding.key)
        shown = [app.get_key_display(binding.with_key(key.strip())) for key in keys.split(",")]
        line = (" or ".join(dict.fromkeys(shown)), text)
        ids[line] = name
        lines.append(line)
    return lines


def _screen_keys(screen: Screen[Any], ids: dict[tuple[str, str], str]) -> list[tuple[str, str]]:
    """The screen's own bindings that are enabled now (not the app-wide ones): those in the
    footer, and those kept out of it (a full footer at 80 columns) that say what they do."""
    app = screen.app
    # One line per action: a binding of several keys ("left,h") is one binding per key here,
    # and each was a line of its own (the same help line twice).
    lines: dict[tuple[str, str], list[str]] = {}
    named: dict[tuple[str, str], str | None] = {}
    for active in screen.active_bindings.values():
        binding = active.binding
        if active.node is app or not active.enabled or not (binding.show or binding.tooltip):
            continue
        display = binding.key_display or app.get_key_display(binding)
        line = (binding.action, binding.tooltip or binding.description)
        named.setdefault(line, binding.id)
        shown = lines.setdefault(line, [])
        if display not in shown:
            shown.append(display)
    found = [(" or ".join(keys), text) for (_, text), keys in lines.items()]
    ids.update(
        (line, binding_id)
        for line, binding_id in zip(found, named.values(), strict=True)
        if binding_id
    )
    return found
