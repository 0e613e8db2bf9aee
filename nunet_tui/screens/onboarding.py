"""Onboard this machine, or change what it offers (resource-config) once it is onboarded.

The form asks the engine (``CheckOnboarding``) after every change and shows each field's
problems right under it, in the same words the CLI prints. A field's problems appear once
you have touched it (or tried to submit), so an empty form does not shout at you.
Enter in a text field or ctrl+s submits; Esc goes back without changing anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Button, Checkbox, Footer, Input, Label, SelectionList, Static

from engine.api import (
    DEFAULT_CHANNEL,
    CheckOnboarding,
    Onboarding,
    OnboardRequest,
    ResourceConfig,
    Validation,
    WalletInfo,
    WalletShow,
)
from engine.domain.machines import CPU_ONLY  # the placeholders suggest values the form accepts
from engine.errors import EngineError
from nunet_tui.format import TIMES, mb, mhz, problem_lines, safe
from nunet_tui.viewmodels.node import NodeView
from nunet_tui.widgets.node_header import NodeHeader

if TYPE_CHECKING:
    from nunet_tui.app import NunetApp

# Form field → the names the engine may use for it in a problem.
FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "memory_mb": ("memory_mb", "memory", "ram"),
    "cpu_mhz": ("cpu_mhz", "cpu"),
    "channel": ("channel",),
    "address": ("address", "wallet"),
    "local_discovery": ("local_discovery",),
    "cardano_node": ("cardano_node",),
    "gpus": ("gpus", "gpu", "vram", "vram_mb"),
}
FIELD_OF = {alias: name for name, aliases in FIELD_ALIASES.items() for alias in aliases}


class OnboardingScreen(Screen[bool]):
    """Dismissed with True once the engine accepted the onboarding (or new resources)."""

    ALLOW_MODE_SWITCH = False
    AUTO_FOCUS = "#memory_mb"
    CSS_PATH = "onboarding.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "ctrl+s",
            "submit",
            "Submit",
            priority=True,
            tooltip="Send the form",
            id="onboarding.submit",
        ),
        Binding("escape", "cancel", "Back", tooltip="Leave without changes", id="onboarding.back"),
    ]

    def __init__(self, node: NodeView) -> None:
        super().__init__()
        self.node = node
        self.current: Onboarding | None = node.onboarding
        self.touched: set[str] = set()
        self.submitted = False
        self.engine_problems: dict[str, list[str]] = {}
        self.general_problems: list[str] = []

    @property
    def nunet(self) -> NunetApp:
        return cast("NunetApp", self.app)

    @property
    def reconfigure(self) -> bool:
        """True when the machine is onboarded: only memory and CPU can change."""
        return self.current is not None

    # --- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        full = self.node.full
        current = self.current
        machine = self.node.info.machine
        yield NodeHeader("provider")
        with VerticalScroll(id="form"):
            yield Static(self._intro(), id="intro")
            yield from self._field(
                "memory_mb",
                "Memory (MB)",
                Input(
                    str(current.memory_mb) if current else "",
                    placeholder=f"{CPU_ONLY.memory_mb} or more",
                    type="integer",
                    id="memory_mb",
                    compact=True,
                ),
                f"this machine has {mb(full.memory_mb)}",
            )
            yield from self._field(
                "cpu_mhz",
                "CPU (MHz)",
                Input(
                    str(current.cpu_mhz) if current else "",
                    placeholder=f"{CPU_ONLY.cpu_mhz} or more",
                    type="integer",
                    id="cpu_mhz",
                    compact=True,
                ),
                f"this machine has {mhz(full.cpu_mhz)} "
                f"({machine.cpu_cores} {TIMES} {mhz(machine.cpu_mhz_per_core)})",
            )
            yield from self._field(
                "channel",
                "Channel (-n)",
                Input(
                    # The node's own channel (the demo's sandbox is not nunet-test): onboarding
                    # with the default must not move the node off the network it is on.
                    current.channel if current else (self.node.info.channel or DEFAULT_CHANNEL),
                    id="channel",
                    compact=True,
                    disabled=self.reconfigure,
                ),
                "test channels take addr_test1… addresses, mainnet addr1…",
            )
            yield from self._field(
                "address",
                "Cardano address (-a)",
                Input(
                    current.address if current else "",
                    placeholder="addr_test1…",
                    id="address",
                    compact=True,
                    disabled=self.reconfigure,
                ),
                "where rewards are paid, in NTX",
            )
            yield from self._field(
                "local_discovery",
                "",
                Checkbox(
                    "Discover peers on the local network (-l)",
                    current.local_discovery if current else False,
                    id="local_discovery",
                    compact=True,
                    disabled=self.reconfigure,
                ),
                "",
            )
            yield from self._field(
                "cardano_node",
                "",
                Checkbox(
                    "Offer to host a Cardano node (-C)",
                    current.cardano_node if current else False,
                    id="cardano_node",
                    compact=True,
                    disabled=self.reconfigure,
                ),
                "needs at least 10,000 MB and 6,000 MHz onboarded",
            )
            if full.gpus:
                offered = set(current.gpus) if current else None
                yield from self._field(
                    "gpus",
                    "GPUs",
                    SelectionList[str](
                        *(
                            (
                                Content(f"{gpu.index} {safe(gpu.name)} · {mb(gpu.vram_mb)} VRAM"),
                                _gpu_key(gpu.uuid, gpu.index),
                                offered is None or _gpu_key(gpu.uuid, gpu.index) in offered,
                            )
                            for gpu in full.gpus
                        ),
                        id="gpus",
                        compact=True,
                        disabled=self.reconfigure,
                    ),
                    "space toggles a GPU",
                )
            yield Static(id="general-problems", classes="problems", markup=False)
            with Horizontal(id="buttons"):
                yield Button(
                    "Change resources" if self.reconfigure else "Onboard",
                    id="submit",
                    variant="primary",
                    compact=True,
                )
                yield Button("Back", id="cancel", compact=True)
        yield Footer()

    def _intro(self) -> Content:
        if self.current is not None:
            return Content.assemble(
                ("Change resources: ", "bold"),
                "offer more or less memory and CPU; the rest stays.",
            )
        return Content.assemble(
            ("Onboard this machine: ", "bold"),
            "offer part of it and earn NTX for the jobs it runs.",
        )

    def _field(self, name: str, label: str, control: Any, hint: str) -> ComposeResult:
        with Horizontal(classes="field", id=f"{name}-field"):
            yield Label(label, classes="field-label", markup=False)
            with Vertical(classes="field-body"):
                yield control
                if hint:
                    yield Static(hint, classes="hint", markup=False)
                yield Static(id=f"{name}-problems", classes="problems", markup=False)

    def on_mount(self) -> None:
        if self.reconfigure:
            self.touched.update(("memory_mb", "cpu_mhz"))
        else:
            self._prefill_address()
        self.validate_form()
        # A daemon that went away and came back: its "not running" problem is stale, check
        # again (it stayed until something was typed).
        self.watch(self.app, "engine_state", self._engine_state_changed, init=False)

    def _engine_state_changed(self, state: str) -> None:
        if state == "ready":
            self.validate_form()

    @work(exclusive=True, group="prefill")
    async def _prefill_address(self) -> None:
        """The node's own wallet is where rewards go unless told otherwise."""
        try:
            wallet: WalletInfo = await self.nunet.client.call(WalletShow())
        except EngineError:
            return  # no wallet yet (or a locked keystore): the user types one
        field = self.query_one("#address", Input)
        if field.value.strip() or "address" in self.touched:
            return
        with self.prevent(Input.Changed):
            field.value = wallet.address
        self.validate_form()

    # --- reading the form ------------------------------------------------------------------

    def _int_field(self, name: str, unit: str, problems: dict[str, list[str]]) -> int | None:
        text = self.query_one(f"#{name}", Input).value.strip()
        if not text:
            return None
        try:
            value = int(text)
        except ValueError:
            problems.setdefault(name, []).append(f"enter a whole number of {unit}")
            return None
        return value

    def _gpus(self) -> tuple[str, ...] | None:
        lists = self.query("#gpus").results(SelectionList)
        selection_list = next(iter(lists), None)
        if selection_list is None:
            return None
        selected = tuple(str(value) for value in selection_list.selected)
        if len(selected) == selection_list.option_count:
            return None  # every GPU, as the CLI's default
        return selected

    def _read(self) -> tuple[dict[str, Any], dict[str, list[str]]]:
        local: dict[str, list[str]] = {}
        values: dict[str, Any] = {
            "memory_mb": self._int_field("memory_mb", "MB", local),
            "cpu_mhz": self._int_field("cpu_mhz", "MHz", local),
            "channel": self.query_one("#channel", Input).value.strip() or DEFAULT_CHANNEL,
            "address": self.query_one("#address", Input).value.strip(),
            "local_discovery": self.query_one("#local_discovery", Checkbox).value,
            "cardano_node": self.query_one("#cardano_node", Checkbox).value,
            "gpus": self._gpus(),
        }
        return values, local

    # --- validating as you type ------------------------------------------------------------

    @on(Input.Changed)
    @on(Checkbox.Changed)
    @on(SelectionList.SelectedChanged)
    def _changed(self, event: Any) -> None:
        control = getattr(event, "input", None) or getattr(event, "control", None)
        if control is not None and control.id:
            self.touched.add(control.id)
        self.validate_form()

    @work(exclusive=True, group="validate")
    async def validate_form(self) -> None:
        values, local = self._read()
        check = CheckOnboarding(
            memory_mb=values["memory_mb"],
            cpu_mhz=values["cpu_mhz"],
            address=values["address"],
            channel=values["channel"],
            cardano_node=values["cardano_node"],
            gpus=values["gpus"],
        )
        try:
            validation: Validation = await self.nunet.client.call(check)
        except EngineError as exc:
            self._set_problems(
                local, [(p.field, p.message) for p in exc.problems] or [("", exc.message)]
            )
            return
        self._set_problems(local, [(p.field, p.message) for p in validation.problems])

    def _set_problems(self, local: dict[str, list[str]], found: list[tuple[str, str]]) -> None:
        by_field: dict[str, list[str]] = {name: list(msgs) for name, msgs in local.items()}
        general: list[str] = []
        for field, message in found:
            name = FIELD_OF.get(field)
            if self.reconfigure and name is not None and name not in ("memory_mb", "cpu_mhz"):
                continue  # channel and address are fixed here: not the user's to fix now
            if name is None:
                general.append(message)
            elif message not in by_field.setdefault(name, []):
                by_field[name].append(message)
        self.engine_problems = by_field
        self.general_problems = general
        self._show_problems()

    def _show_problems(self) -> None:
        for name in FIELD_ALIASES:
            shown = self.query(f"#{name}-problems").results(Static)
            widget = next(iter(shown), None)
            if widget is None:
                continue
            messages = self.engine_problems.get(name, [])
            visible = messages if (self.submitted or name in self.touched) else []
            widget.update(problem_lines(visible))
            widget.set_class(bool(visible), "-shown")
            self.query_one(f"#{name}-field").set_class(bool(visible), "-invalid")
        general = self.query_one("#general-problems", Static)
        general.update(problem_lines(self.general_problems))
        general.set_class(bool(self.general_problems), "-shown")

    # --- submitting ------------------------------------------------------------------------

    @on(Input.Submitted)
    def _enter(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_submit()

    @on(Button.Pressed, "#submit")
    def _submit_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_submit()

    @on(Button.Pressed, "#cancel")
    def _cancel_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_cancel()

    def action_cancel(self) -> None:
        self.dismiss(False)

    def action_submit(self) -> None:
        self.submitted = True
        self.submit_form()

    @work(exclusive=True, group="submit")
    async def submit_form(self) -> None:
        values, local = self._read()
        missing = [
            (name, f"{label} is required")
            for name, label in (("memory_mb", "memory (MB)"), ("cpu_mhz", "CPU (MHz)"))
            if values[name] is None and name not in local
        ]
        if not self.reconfigure and not values["address"]:
            missing.append(("address", "a Cardano address is required"))
        if local or missing:
            for name, message in missing:
                local.setdefault(name, []).append(message)
            self._set_problems(local, [])
            self.notify("Fix the marked fields first", title="Onboarding", severity="warning")
            return
        command: OnboardRequest | ResourceConfig
        if self.reconfigure:
            command = ResourceConfig(memory_mb=values["memory_mb"], cpu_mhz=values["cpu_mhz"])
        else:
            command = OnboardRequest(
                memory_mb=values["memory_mb"],
                cpu_mhz=values["cpu_mhz"],
                address=values["address"],
                channel=values["channel"],
                local_discovery=values["local_discovery"],
                cardano_node=values["cardano_node"],
                gpus=values["gpus"],
            )
        title = "Resources" if self.reconfigure else "Onboarding"
        try:
            onboarding: Onboarding = await self.nunet.client.call(command)
        except EngineError as exc:
            self._set_problems({}, [(p.field, p.message) for p in exc.problems])
            self.notify(safe(exc.message), title=title, severity="error", markup=False)
            return
        verb = "Resources changed" if self.reconfigure else "Onboarded"
        self.notify(
            f"{verb}: {mb(onboarding.memory_mb)} · {mhz(onboarding.cpu_mhz)} "
            f"on {safe(onboarding.channel)}",
            title=title,
            markup=False,
        )
        self.dismiss(True)


def _gpu_key(uuid: str, index: int) -> str:
    return uuid or str(index)
