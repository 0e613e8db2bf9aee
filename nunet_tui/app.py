"""The full-screen app: one Textual ``App`` with a mode per side of the market.

``NunetApp`` holds an ``EngineClient`` (an embedded engine or a daemon's socket; it never
knows which) and keeps one picture of the node, ``node`` (info + capacity views), that the
screens watch. Engine events arrive from the engine's thread through ``post_message`` and
are handled here, on the UI loop. Every engine call is awaited in a worker, so nothing the
engine does can freeze a key press.

Modes: ``provider`` (offer this machine) and ``consumer`` (buy compute), each with its own
screen stack. The first run asks which one; ``m`` and the command palette switch later.

Why one file of some 700 lines: the app is where the modes, the node's picture, the engine's
events and the node-wide actions (onboard, pause, resume, offboard) meet; everything a
screen shows lives in screens/ and widgets/, and the help, palette and key map in their own
modules.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.reactive import reactive
from textual.screen import Screen

from engine.api import (
    ChatMessageEvent,
    ChatRequestEvent,
    Command,
    DaemonConnection,
    EngineStopping,
    Event,
    GetCapacity,
    GetInfo,
    GetNetworkStatus,
    ListPeers,
    Mode,
    ModeChanged,
    NetworkChanged,
    Offboard,
    Onboarding,
    OnboardingChanged,
    Pause,
    PeerChanged,
    Resume,
    SetMode,
    StartNetwork,
)
from engine.client import EngineClient
from engine.deferred import DeferredClient
from engine.errors import EngineError
from nunet_tui.events import EventHandlers, handles
from nunet_tui.format import mb, mhz, named_peer, safe
from nunet_tui.messages import EngineEvent, EngineUpdate, OpenJob
from nunet_tui.screens.base import CapabilityScreen, NodeScreen
from nunet_tui.screens.start import StartScreen
from nunet_tui.viewmodels.node import NetworkState, NetworkView, NodeView

if TYPE_CHECKING:
    from textual.command import Provider

    from engine.notices import Notice, NoticeFilter
    from nunet_tui.presets import Preset

log = logging.getLogger("nunet.tui")

MODES_IN_ORDER: tuple[Mode, ...] = ("provider", "consumer")
# The screens a dashboard opens by key (module, class); GPUs only in provider mode. Each
# module is imported on first use: the first frame needs only the start screen.
CAPABILITY_SCREENS: dict[str, tuple[str, str]] = {
    "peers": ("nunet_tui.screens.peers", "PeersScreen"),
    "chat": ("nunet_tui.screens.chat", "ChatScreen"),
    "network": ("nunet_tui.screens.network", "NetworkScreen"),
    "gpus": ("nunet_tui.screens.gpus", "GpuScreen"),
    "jobs": ("nunet_tui.screens.jobs", "JobsScreen"),
    "notebooks": ("nunet_tui.screens.notebooks", "NotebooksScreen"),
    "data": ("nunet_tui.screens.data", "DataScreen"),
    "submit": ("nunet_tui.screens.submit", "SubmitScreen"),
    "wallet": ("nunet_tui.screens.wallet", "WalletScreen"),
    "rewards": ("nunet_tui.screens.rewards", "RewardsScreen"),
    "resources": ("nunet_tui.screens.resources", "ResourcesScreen"),
    "account": ("nunet_tui.screens.account", "AccountScreen"),
}


def capability_screen(name: str) -> type[CapabilityScreen] | None:
    """The screen class a dashboard key opens (its module imported now), or None."""
    where = CAPABILITY_SCREENS.get(name)
    if where is None:
        return None
    kind: type[CapabilityScreen] = getattr(importlib.import_module(where[0]), where[1])
    return kind


def _provider_dashboard() -> Screen[Any]:
    from nunet_tui.screens.provider_dashboard import ProviderDashboard

    return ProviderDashboard()


def _consumer_dashboard() -> Screen[Any]:
    from nunet_tui.screens.consumer_dashboard import ConsumerDashboard

    return ConsumerDashboard()


def _node_commands() -> type[Provider]:
    from nunet_tui.commands import NodeCommands

    return NodeCommands


class NunetApp(EventHandlers, App[None]):
    """nunet-tui: onboard this machine and earn NTX, or buy compute for ML jobs."""

    TITLE = "nunet-tui"
    # Absolute: Textual resolves a relative path against the file of the (sub)class using it.
    CSS_PATH = Path(__file__).parent / "app.tcss"
    MODES: ClassVar[dict[str, Any]] = {
        "provider": _provider_dashboard,
        "consumer": _consumer_dashboard,
    }
    COMMANDS = App.COMMANDS | {_node_commands}
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    BINDINGS: ClassVar[list[BindingType]] = [
        # The footer shows them in this order after the screen's own: what each mode does
        # most first (submit a job, see the jobs), the places next, ? and the rest last.
        Binding(
            "s",
            "open('submit')",
            "Submit",
            tooltip="Submit an ML job (consumer mode)",
            id="app.submit",
        ),
        Binding(
            "j", "open('jobs')", "Jobs", tooltip="Jobs you bought and jobs you run", id="app.jobs"
        ),
        Binding(
            "g",
            "open('gpus')",
            "GPUs",
            tooltip="Live GPU status: load, memory, heat, power",
            id="app.gpus",
        ),
        Binding(
            "p",
            "open('peers')",
            "Peers",
            tooltip="Peers on this channel and their offers",
            id="app.peers",
        ),
        Binding("c", "open('chat')", "Chat", tooltip="Chat with peers", id="app.chat"),
        Binding(
            "n",
            "open('network')",
            "Network",
            tooltip="The channel's resources and load",
            id="app.network",
        ),
        # Last of the footer's keys: at 80 columns the footer cuts the ones at its end, and
        # every screen's own keys and the places to go matter more there (? lists them all).
        Binding("question_mark", "help", "Help", key_display="?", id="app.help"),
        Binding("m", "toggle_mode", "Mode", id="app.mode"),
        Binding("q", "quit", "Quit", id="app.quit"),
        # Not in the footer (it is full at 80 columns); the help, the palette and the screens'
        # own footers name them.
        Binding(
            "w",
            "open('wallet')",
            "Wallet",
            show=False,
            tooltip="Address, NTX, transactions",
            id="app.wallet",
        ),
        Binding(
            "dollar_sign,R",
            "open('rewards')",
            "Rewards",
            show=False,
            key_display="$",
            id="app.rewards",
        ),
        Binding(
            "b",
            "open('notebooks')",
            "Notebooks",
            show=False,
            tooltip="JupyterLab notebooks",
            id="app.notebooks",
        ),
        Binding(
            "d",
            "open('data')",
            "Data",
            show=False,
            tooltip="Files and folders by content id (CID)",
            id="app.data",
        ),
        Binding(
            "e",
            "open('resources')",
            "Resources",
            show=False,
            tooltip="Specs, pools, prices",
            id="app.resources",
        ),
        Binding(
            "a",
            "open('account')",
            "Account",
            show=False,
            tooltip="Recharges, jobs paid",
            id="app.account",
        ),
    ]

    node: reactive[NodeView | None] = reactive(None, init=False)
    """What the app last read from the engine; screens watch it."""
    engine_state: reactive[str] = reactive("starting", init=False)
    """``starting``, ``ready``, ``error`` or ``stopped``: shown in every screen's header."""
    network: reactive[NetworkView] = reactive(NetworkView, init=False)
    """On the network or not, the channel and how many peers: the header shows it."""

    def __init__(
        self,
        client: EngineClient,
        *,
        ansi_color: bool = False,
        clock: Callable[[], float] = time.time,
        examples: dict[str, Any] | None = None,
        keys: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(ansi_color=ansi_color)
        self.keys: dict[str, str] = dict(keys or {})
        """config.toml's ``[keys]`` (binding id -> key), the good entries once mounted."""
        self.client = client
        self.clock = clock
        """What "now" is for "3 s ago" (tests may pin it)."""
        self.examples = examples
        """The demo sandbox (``Sandbox.describe()``), or None outside the demo."""
        self.presets: list[Preset] = []
        """Its example jobs, which the submit form offers one key away (F1, F2, ...)."""
        if examples:  # the demo's (importlib.resources, zipfile: not before the first frame)
            from nunet_tui.presets import load_presets

            self.presets = load_presets(examples)
        self._peer_ids: set[str] = set()
        # Peer id -> the display name of its signed advert (only peers with one), for the
        # screens that have a peer id alone (a job's provider, chat): ``format.named_peer``.
        # Kept when a peer goes away, so its past jobs still show its name.
        self.peer_names: dict[str, str] = {}
        self._unsubscribe: Any = None
        self.startup_error: str | None = None
        # A job ended, a reward paid (from now on): bell + toast. The filter is made on the
        # first event: engine.notify brings trio, which the first frame must not wait for.
        self._notices: NoticeFilter | None = None
        self._notices_since = time.time()

    # --- life cycle ----------------------------------------------------------------------

    def get_default_screen(self) -> Screen[Any]:
        return StartScreen()

    def on_mount(self) -> None:
        if self.keys:
            self._apply_keys()
        self._unsubscribe = self.client.subscribe(self._deliver_event)
        self.start_up()

    def _apply_keys(self) -> None:
        """``[keys]``: each good remap applies; a bad one is one line and its default key
        (only with entries: checking them imports every screen)."""
        from nunet_tui.keymap import check_remaps

        self.keys, problems = check_remaps(self.keys)
        self.set_keymap(self.keys)
        for problem in problems:
            log.warning("config: %s", problem)
            self.notify(problem, title="Config", severity="error", markup=False, timeout=30)

    def on_ready(self) -> None:
        # First frame is up: now open the engine (a DeferredClient: trio, the node, the
        # control client load only now) and bring the node online. Loading py-libp2p takes
        # about a second of CPU, which would otherwise hold back the first paint.
        if isinstance(self.client, DeferredClient):
            self.client.start()
        self._start_network()

    @work(group="network-start")
    async def _start_network(self) -> None:
        with contextlib.suppress(EngineError):
            await self.client.call(StartNetwork())

    def on_unmount(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _deliver_event(self, event: Event) -> None:
        """Called on the engine's thread: hand the event to the UI loop, nothing more."""
        self.post_message(EngineEvent(event))

    @work(exclusive=True, group="startup")
    async def start_up(self) -> None:
        try:
            node = await self.reload_node()
        except EngineError as exc:
            self.startup_error = safe(exc.message)
            self.engine_state = "error"
            self.notify(self.startup_error, title="Engine", severity="error", markup=False)
            return
        self.engine_state = "ready"
        mode: Mode | None = node.info.mode
        if mode is None:
            from nunet_tui.screens.mode_chooser import ModeChooserScreen

            chosen: Mode = await self.push_screen_wait(ModeChooserScreen())
            if not await self._store_mode(chosen):
                return
            mode = chosen
        self.switch_mode(mode)
        await self._read_network()
        # What is alive now lives as long as the app: keep it out of the collector's full
        # passes, so a job printing thousands of lines a second never stalls the UI on one.
        gc.freeze()

    @handles(DaemonConnection)
    def _daemon_connection(self, event: DaemonConnection) -> None:
        """The attached daemon went away (say so at once) or is back (read it afresh)."""
        if not event.online:
            told = self.engine_state == "stopped"  # its EngineStopping was shown already
            self.engine_state = "offline"
            self._peer_ids.clear()
            self.network = NetworkView(state="offline", channel=self.network.channel, peers=0)
            if not told:
                self.notify(
                    f"The daemon went away ({safe(event.detail)}); reconnecting",
                    title="Engine",
                    severity="warning",
                    markup=False,
                )
            return
        self.engine_state = "ready"
        self.notify("Reconnected to the daemon", title="Engine", markup=False)
        self._reload_after_reconnect()

    @work(exclusive=True, group="reconnect")
    async def _reload_after_reconnect(self) -> None:
        try:
            await self.reload_node()
        except EngineError:
            return  # gone again: the next DaemonConnection says so
        await self._read_network()

    async def _read_network(self) -> None:
        """The network's state now; later changes arrive as NetworkChanged and PeerChanged."""
        try:
            status = await self.client.call(GetNetworkStatus())
        except EngineError:
            return
        state: NetworkState = "online" if status.online else "offline"
        if not status.online:
            try:
                await self.client.call(ListPeers())
            except EngineError as exc:
                if exc.code == "no_network":
                    state = "off"
        self._peer_ids = {peer.peer_id for peer in status.peers}
        self.peer_names.update({p.peer_id: p.display_name for p in status.peers if p.display_name})
        self.network = NetworkView(state=state, channel=status.channel, peers=len(self._peer_ids))

    async def reload_node(self) -> NodeView:
        """Read info and the capacity views; sets ``node`` (which the screens watch)."""
        info = await self.client.call(GetInfo())
        full = await self.client.call(GetCapacity(view="full"))
        onboarded = None
        if info.onboarded is not None:
            onboarded = await self.client.call(GetCapacity(view="onboarded"))
        node = NodeView(info=info, full=full, onboarded=onboarded)
        self.node = node
        return node

    @work(exclusive=True, group="refresh")
    async def refresh_node(self) -> None:
        try:
            await self.reload_node()
        except EngineError as exc:
            self.notify(safe(exc.message), title="Engine", severity="error", markup=False)

    def watch_node(self) -> None:
        self.refresh_bindings()

    async def on_engine_event(self, message: EngineEvent) -> None:
        event = message.event
        if (notice := self._notice(event)) is not None:
            self.bell()
            self.notify(
                notice.text,
                title=notice.title,
                severity="warning" if notice.bad else "information",
                markup=False,
                timeout=10,
            )
        self.dispatch_event(event)
        if self.screen_stack and isinstance(self.screen, NodeScreen):  # dashboards: job panels
            self.screen.post_message(EngineUpdate(event))

    # --- engine events, by type (nunet_tui/events.py) --------------------------------------

    @handles(OnboardingChanged)
    def _onboarding_changed(self, event: OnboardingChanged) -> None:
        self.refresh_node()

    @handles(ModeChanged)
    def _mode_changed(self, event: ModeChanged) -> None:
        if self.current_mode in MODES_IN_ORDER and self.current_mode != event.mode:
            self.switch_mode(event.mode)
        self.refresh_node()

    @handles(EngineStopping)
    def _engine_stopping(self, event: EngineStopping) -> None:
        self.engine_state = "stopped"
        self.notify(
            f"The engine is stopping: {safe(event.reason)}",
            title="Engine",
            severity="warning",
            markup=False,
        )

    @handles(NetworkChanged)
    def _network_changed(self, event: NetworkChanged) -> None:
        if not event.online:
            self._peer_ids.clear()
        self.network = NetworkView(
            state="online" if event.online else "offline",
            channel=event.channel,
            peers=len(self._peer_ids),
            error=event.error,
        )

    @handles(PeerChanged)
    def _peer_changed(self, event: PeerChanged) -> None:
        if event.peer is None:
            self._peer_ids.discard(event.peer_id)
        else:
            self._peer_ids.add(event.peer_id)
            if event.peer.display_name:
                self.peer_names[event.peer_id] = event.peer.display_name
            else:
                self.peer_names.pop(event.peer_id, None)
        if self.network.peers != len(self._peer_ids):
            self.network = NetworkView(
                state=self.network.state,
                channel=self.network.channel,
                peers=len(self._peer_ids),
                error=self.network.error,
            )

    @handles(ChatRequestEvent)
    def _chat_request(self, event: ChatRequestEvent) -> None:
        self.notify(
            f"{named_peer(self.peer_names, event.request.peer_id)} wants to chat. "
            f"Press c, then j to join (request {event.request.id}).",
            title="Chat request",
            markup=False,
            timeout=10,
        )

    @handles(ChatMessageEvent)
    def _chat_message(self, event: ChatMessageEvent) -> None:
        from nunet_tui.screens.chat import ChatScreen

        chat = self.screen
        showing = isinstance(chat, ChatScreen) and chat.peer_id == event.message.peer_id
        if not showing:
            text = safe(event.message.text)
            self.notify(
                text if len(text) <= 120 else text[:119] + "…",
                title=f"Message from {named_peer(self.peer_names, event.message.peer_id)}",
                markup=False,
            )

    def _notice(self, event: Event) -> Notice | None:
        if self._notices is None:
            from engine.notices import NoticeFilter

            self._notices = NoticeFilter(since=self._notices_since)
        return self._notices.observe(event)

    # --- calling the engine ----------------------------------------------------------------

    async def call(self, command: Command, *, title: str = "") -> Any | None:
        """Run one engine command; on failure show its message and return None."""
        try:
            return await self.client.call(command)
        except EngineError as exc:
            self.notify(safe(exc.message), title=title, severity="error", markup=False)
            return None

    # --- modes -----------------------------------------------------------------------------

    @property
    def mode(self) -> Mode | None:
        return self.current_mode if self.current_mode in MODES_IN_ORDER else None

    async def _store_mode(self, mode: Mode) -> bool:
        return await self.call(SetMode(mode=mode), title="Mode") is not None

    @work(exclusive=True, group="mode")
    async def use_mode(self, mode: Mode) -> None:
        """Store ``mode`` in the engine and show its screens."""
        if self.mode == mode:
            return
        if not await self._store_mode(mode):
            return
        await self.switch_mode(mode)
        self.notify(f"Switched to {mode} mode", title="Mode")

    def action_toggle_mode(self) -> None:
        other: Mode = "consumer" if self.mode == "provider" else "provider"
        self.use_mode(other)

    def action_use_mode(self, mode: str) -> None:
        if mode in MODES_IN_ORDER:
            self.use_mode(mode)

    # --- screens ---------------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's own palette commands (theme, keys, screenshot), minus a second Quit."""
        for command in super().get_system_commands(screen):
            if command.title != "Quit":
                yield command

    def action_open(self, name: str) -> None:
        """Open peers, chat, network or GPUs; from one of them, replace it (Esc: dashboard)."""
        self.open_screen(name)

    def open_screen(self, name: str, *, peer_id: str | None = None) -> None:
        kind = capability_screen(name)
        if kind is None or self.mode is None:
            return
        if isinstance(self.screen, kind) and peer_id is None:
            return
        screen: Screen[Any]
        if name == "chat":
            from nunet_tui.screens.chat import ChatScreen

            screen = ChatScreen(peer_id=peer_id)
        else:
            screen = kind()
        if isinstance(self.screen, CapabilityScreen):
            self.switch_screen(screen)
        else:
            self.push_screen(screen)

    def on_open_job(self, message: OpenJob) -> None:
        """The one place a job's view is made: every screen and widget posts ``OpenJob``."""
        from nunet_tui.screens.job_detail import JobDetailScreen

        message.stop()
        screen = JobDetailScreen(message.job_id, job=message.job)
        if message.replace:
            self.switch_screen(screen)
        else:
            self.push_screen(screen)

    async def action_quit(self) -> None:
        """With jobs still running, ask first (in the demo, quitting stops the providers)."""
        from nunet_tui import app_guards

        if isinstance(self.screen, app_guards.QuitConfirm):
            self.exit()  # q on the question itself: yes
            return
        jobs = await app_guards.live_jobs(self.client)
        if not jobs:
            self.exit()
            return
        question = app_guards.quit_question(jobs, self.client.embedded, self.examples)
        self.push_screen(question, lambda yes: self.exit() if yes else None)

    def deliver_screenshot(
        self, filename: str | None = None, path: str | None = None, time_format: str | None = None
    ) -> str | None:
        from nunet_tui import app_guards

        folder = app_guards.deliver_screenshot(self, path)
        if folder is None:
            return None
        return super().deliver_screenshot(filename, str(folder), time_format)

    def action_help(self) -> None:
        from nunet_tui.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(self.screen))

    @property
    def onboarding(self) -> Onboarding | None:
        return self.node.info.onboarded if self.node is not None else None

    @work(exclusive=True, group="node-op")
    async def action_onboard(self) -> None:
        """Open the onboarding form (prefilled as resource-config once onboarded)."""
        from nunet_tui.screens.onboarding import OnboardingScreen

        if self.node is None:
            return
        if self.mode != "provider":
            if not await self._store_mode("provider"):
                return
            await self.switch_mode("provider")
        if isinstance(self.screen, OnboardingScreen):
            return
        done = await self.push_screen_wait(OnboardingScreen(self.node))
        if done:
            await self._reload_quietly()

    action_resources = action_onboard

    @work(exclusive=True, group="node-op")
    async def action_pause(self) -> None:
        from nunet_tui.screens.confirm import ConfirmScreen

        onboarding = self.onboarding
        if onboarding is None or onboarding.state != "active":
            return
        confirmed = await self.push_screen_wait(
            ConfirmScreen(
                "Pause offering this machine?",
                Content.assemble(
                    "No new jobs will start here and peers will not be offered this machine. "
                    "The onboarding (",
                    _amounts(onboarding),
                    ") is kept: resume whenever you like.",
                ),
                confirm_label="Pause",
            )
        )
        if confirmed and await self.call(Pause(), title="Pause") is not None:
            self.notify("Paused: this machine is not accepting jobs", title="Pause")
            await self._reload_quietly()

    @work(exclusive=True, group="node-op")
    async def action_resume(self) -> None:
        from nunet_tui.screens.confirm import ConfirmScreen

        onboarding = self.onboarding
        if onboarding is None or onboarding.state != "paused":
            return
        confirmed = await self.push_screen_wait(
            ConfirmScreen(
                "Resume offering this machine?",
                Content.assemble(
                    "This machine will accept jobs again with the same onboarding (",
                    _amounts(onboarding),
                    ").",
                ),
                confirm_label="Resume",
            )
        )
        if confirmed and await self.call(Resume(), title="Resume") is not None:
            self.notify("Resumed: this machine is accepting jobs", title="Resume")
            await self._reload_quietly()

    @work(exclusive=True, group="node-op")
    async def action_offboard(self) -> None:
        from nunet_tui.screens.confirm import ConfirmScreen

        onboarding = self.onboarding
        if onboarding is None:
            return
        confirmed = await self.push_screen_wait(
            ConfirmScreen(
                "Offboard this machine?",
                Content.assemble(
                    "The onboarding (",
                    _amounts(onboarding),
                    ") is removed and this machine stops offering resources. "
                    "You can onboard again at any time.",
                ),
                confirm_label="Offboard",
                danger=True,
            )
        )
        if confirmed and await self.call(Offboard(), title="Offboard") is not None:
            self.notify("Offboarded: this machine no longer offers resources", title="Offboard")
            await self._reload_quietly()

    async def _reload_quietly(self) -> None:
        try:
            await self.reload_node()
        except EngineError as exc:
            self.notify(safe(exc.message), title="Engine", severity="error", markup=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        onboarding = self.onboarding
        if action == "toggle_mode":
            return self.mode is not None and getattr(self.screen, "ALLOW_MODE_SWITCH", True)
        if action == "open":
            name = parameters[0] if parameters else None
            if self.mode is None or self.node is None:
                return False
            if not getattr(self.screen, "ALLOW_MODE_SWITCH", True):
                return False
            if name in ("gpus", "resources"):
                return self.mode == "provider"
            if name in ("submit", "notebooks", "account"):
                return self.mode == "consumer"
            return True
        if action == "onboard":
            return self.node is not None and onboarding is None
        if action == "resources":
            return onboarding is not None
        if action == "pause":
            return onboarding is not None and onboarding.state == "active"
        if action == "resume":
            return onboarding is not None and onboarding.state == "paused"
        if action == "offboard":
            return onboarding is not None
        return True


def _amounts(onboarding: Onboarding) -> str:
    return f"{mb(onboarding.memory_mb)} · {mhz(onboarding.cpu_mhz)} on {safe(onboarding.channel)}"
