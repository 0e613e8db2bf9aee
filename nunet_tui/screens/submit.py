"""``s`` (consumer mode): describe a job, see what it costs and who can run it, submit it.

Everything on the right explains itself as you type: the tier's resources (``estimate_resource``,
the one tier table of engine/jobs/tiers.py, shown whole), NuNet's static NTX estimate
(``static_ntx``), and "Who can run it": every known provider with ✓ and its price for this job,
or ✗ and every reason it cannot (``engine.jobs.matching.match``, the engine's own pure
function, on the peers of ``ListPeers``). Each field shows ``validate_spec``'s problems once it
has been touched. Enter on a provider picks it by hand (again: back to the best match).

Submitting sends ``SubmitJob`` from a worker; the job detail opens once a provider accepted.
In the demo the example jobs are one key away (F1, F2, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import msgspec
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import (
    Button,
    Footer,
    Input,
    Label,
    OptionList,
    RadioButton,
    RadioSet,
    Static,
)
from textual.widgets.option_list import Option

from engine.api import JobInfo, ListPeers, Peer, PeerChanged, PeerList, SubmitJob
from engine.errors import EngineError
from engine.jobs.matching import MatchResult, match
from engine.jobs.spec import (
    CPU_ONLY_FRAMEWORKS,
    DEVICES,
    FRAMEWORKS,
    TIERS,
    JobSpec,
    load_job_file,
    validate_spec,
)
from engine.jobs.tiers import estimate_resource, static_ntx
from nunet_tui.format import DASH, TIMES, latency, plural, safe, short_peer_id, thousands
from nunet_tui.messages import EngineUpdate
from nunet_tui.screens.base import CapabilityScreen
from nunet_tui.widgets.node_header import NodeHeader

FRAMEWORK_LABELS = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "scikit-learn": "sklearn"}
TIER_LABELS = {"low": "Low", "moderate": "Moderate", "high": "High"}
# Form field → the spec fields whose problems it shows.
FIELDS: dict[str, tuple[str, ...]] = {
    "script_url": ("script_url", "source", "git.url", "git.entry", "git.ref"),
    "framework": ("framework",),
    "device": ("device", "gpu_vendor"),
    "tier": ("tier",),
    "deps": ("deps",),
    "expected_minutes": ("expected_minutes",),
    "budget_ntx": ("budget_ntx",),
    "peer_id": ("peer_id",),
}
FIELD_OF = {alias: name for name, aliases in FIELDS.items() for alias in aliases}
MAX_PRESETS = 9


@dataclass(frozen=True)
class Preset:
    """One example job (examples/jobs/NAME/job.toml, served by the demo)."""

    name: str
    spec: JobSpec | None
    error: str = ""


def load_presets(examples: Mapping[str, Any] | None) -> list[Preset]:
    """The example jobs of ``Sandbox.describe()``: each job.toml with its relative script URL
    resolved against ``scripts_url + name + "/"``."""
    if not examples:
        return []
    from nunet_tui.cli.demo import EXAMPLES

    base = str(examples.get("scripts_url") or "")
    folder = Path(str(examples.get("examples_dir") or EXAMPLES))
    names = examples.get("examples") or {}
    presets: list[Preset] = []
    for name in sorted(names)[:MAX_PRESETS]:
        try:
            spec = load_job_file(folder / name / "job.toml", base_url=f"{base}{name}/")
        except EngineError as exc:
            presets.append(Preset(name, None, exc.message))
        else:
            presets.append(Preset(name, spec))
    return presets


class SubmitScreen(CapabilityScreen):
    CSS_PATH = "submit.tcss"
    AUTO_FOCUS = "#script_url"
    ALLOW_MODE_SWITCH = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "submit", "Submit", priority=True, tooltip="Submit the job"),
        Binding("escape", "app.pop_screen", "Back", tooltip="Leave the form"),
        *(
            Binding(f"f{n}", f"preset({n - 1})", f"Example {n}", show=False, priority=True)
            for n in range(1, MAX_PRESETS + 1)
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.framework = "pytorch"
        self.device = "cpu"
        self.tier = "low"
        self.extra: dict[str, Any] = {}  # env, outputs, gpu_vendor of a preset
        self.peers: dict[str, Peer] = {}
        self.peer_problem: str | None = None
        self.touched: set[str] = set()
        self.submitted = False
        self.submitting = False
        self.problems: dict[str, list[str]] = {}
        self.general: list[str] = []
        self.result: MatchResult | None = None
        self.presets: list[Preset] = []

    # --- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        self.presets = load_presets(getattr(self.app, "examples", None))
        yield NodeHeader("consumer")
        with VerticalScroll(id="submit-body"), Grid(id="submit-grid"):
            with Vertical(id="job-form", classes="panel") as form:
                form.border_title = "New job"
                if self.presets:
                    with Horizontal(id="presets"):
                        yield Label("Examples", classes="field-label")
                        yield Static(_preset_keys(self.presets), id="preset-keys")
                yield from self._field(
                    "script_url",
                    "Script",
                    Input(placeholder="https://…/train.py", id="script_url", compact=True),
                )
                yield from self._field(
                    "name", "Name", Input(placeholder="optional", id="name", compact=True)
                )
                yield from self._field(
                    "framework",
                    "Framework",
                    RadioSet(
                        *(
                            RadioButton(FRAMEWORK_LABELS[f], f == "pytorch", id=f"fw-{f}")
                            for f in FRAMEWORKS
                        ),
                        id="framework",
                        compact=True,
                    ),
                )
                yield from self._field(
                    "device",
                    "Device",
                    RadioSet(
                        *(RadioButton(d.upper(), d == "cpu", id=f"dev-{d}") for d in DEVICES),
                        id="device",
                        compact=True,
                    ),
                )
                yield from self._field(
                    "tier",
                    "Usage",
                    RadioSet(
                        *(RadioButton(TIER_LABELS[t], t == "low", id=f"tier-{t}") for t in TIERS),
                        id="tier",
                        compact=True,
                    ),
                )
                yield from self._field(
                    "deps",
                    "Deps",
                    Input(placeholder="pip packages, comma-separated", id="deps", compact=True),
                )
                yield from self._field(
                    "expected_minutes",
                    "Expected min",
                    Input("10", type="number", id="expected_minutes", compact=True),
                )
                yield from self._field(
                    "budget_ntx",
                    "Budget NTX",
                    Input(placeholder="no cap", type="number", id="budget_ntx", compact=True),
                )
                yield from self._field(
                    "peer_id",
                    "Peer",
                    Input(
                        placeholder="best match (or Enter on a provider)",
                        id="peer_id",
                        compact=True,
                    ),
                )
                yield Static(id="extra", classes="hint", markup=False)
                yield Static(id="general-problems", classes="problems", markup=False)
                with Horizontal(id="buttons"):
                    yield Button(
                        "Submit to best match", id="submit", variant="primary", compact=True
                    )
            with Vertical(id="side"):
                with Vertical(id="estimate", classes="panel") as panel:
                    panel.border_title = "Estimate"
                    yield Static(id="estimate-text", markup=False)
                    yield Static(id="tier-table", markup=False)
                with Vertical(id="who", classes="panel") as panel:
                    panel.border_title = "Who can run it"
                    yield Static(id="who-note", markup=False)
                    yield OptionList(id="who-list", compact=True)
        yield Footer()

    def _field(self, name: str, label: str, control: Any) -> ComposeResult:
        with Horizontal(classes="field", id=f"{name}-field"):
            yield Label(label, classes="field-label", markup=False)
            with Vertical(classes="field-body"):
                yield control
                yield Static(id=f"{name}-hint", classes="hint", markup=False)
                yield Static(id=f"{name}-problems", classes="problems", markup=False)

    def on_mount(self) -> None:
        super().on_mount()
        for hint in self.query(".hint"):
            hint.display = False
        self.refresh_form()
        self.load_peers()

    # --- peers -----------------------------------------------------------------------------

    def reload(self) -> None:
        self.load_peers()

    @work(exclusive=True, group="refresh")
    async def load_peers(self) -> None:
        try:
            reply: PeerList = await self.nunet.client.call(ListPeers())
        except EngineError as exc:
            self.peer_problem = (
                "This engine runs without the network: no providers to match."
                if exc.code == "no_network"
                else safe(exc.message)
            )
            self.peers = {}
        except OSError as exc:
            self.peer_problem = safe(f"lost the engine: {exc}")
            self.peers = {}
        else:
            self.peer_problem = None
            self.peers = {peer.peer_id: peer for peer in reply.peers}
        self.refresh_form()

    def on_engine_update(self, message: EngineUpdate) -> None:
        event = message.event
        if isinstance(event, PeerChanged):
            if event.peer is None:
                self.peers.pop(event.peer_id, None)
            else:
                self.peers[event.peer_id] = event.peer
            self.refresh_form()

    # --- reading the form ------------------------------------------------------------------

    def _value(self, name: str) -> str:
        return self.query_one(f"#{name}", Input).value.strip()

    def read_spec(self) -> tuple[JobSpec, dict[str, list[str]]]:
        """The spec the form describes, and what could not even be read (not numbers)."""
        local: dict[str, list[str]] = {}
        expected = 10.0
        if text := self._value("expected_minutes"):
            try:
                expected = float(text)
            except ValueError:
                local.setdefault("expected_minutes", []).append("enter a number of minutes")
        else:
            local.setdefault("expected_minutes", []).append("how long do you expect it to run?")
        budget: float | None = None
        if text := self._value("budget_ntx"):
            try:
                budget = float(text)
            except ValueError:
                local.setdefault("budget_ntx", []).append("enter a number of NTX (or nothing)")
        deps = tuple(d.strip() for d in self._value("deps").split(",") if d.strip())
        values: dict[str, Any] = {
            "script_url": self._value("script_url"),
            "name": self._value("name"),
            "framework": self.framework,
            "device": self.device,
            "tier": self.tier,
            "deps": deps,
            "expected_minutes": expected,
            "budget_ntx": budget,
            **self.extra,
        }
        return msgspec.convert(values, JobSpec), local

    # --- showing, as you type --------------------------------------------------------------

    @on(Input.Changed)
    def _input_changed(self, event: Input.Changed) -> None:
        if event.input.id:
            self.touched.add(event.input.id)
        self.refresh_form()

    @on(RadioSet.Changed)
    def _radio_changed(self, event: RadioSet.Changed) -> None:
        name = event.radio_set.id or ""
        value = (event.pressed.id or "").split("-", 1)[-1]
        if name == "framework":
            self.framework = value
        elif name == "device":
            self.device = value
        elif name == "tier":
            self.tier = value
        self.touched.add(name)
        self.refresh_form()

    def refresh_form(self) -> None:
        spec, local = self.read_spec()
        self._gpu_allowed(spec.framework)
        problems: dict[str, list[str]] = {k: list(v) for k, v in local.items()}
        general: list[str] = []
        for problem in validate_spec(spec).problems:
            if problem.field == "budget_ntx" and "budget_ntx" in local:
                continue
            name = FIELD_OF.get(problem.field)
            if name is None:
                general.append(problem.message)
            elif problem.message not in problems.setdefault(name, []):
                problems[name].append(problem.message)
        peer_id = self._value("peer_id")
        if peer_id and self.peers and peer_id not in self.peers:
            problems.setdefault("peer_id", []).append(
                f"{peer_id} is not listed on this channel (p lists the peers)"
            )
        if not spec.script_url:
            problems["script_url"] = ["the script URL is required (http:// or https://)"]
        self.problems, self.general = problems, general
        self._show_problems()
        self._show_estimate(spec)
        self._show_match(spec)
        self._show_extra()
        self.query_one("#submit", Button).label = (
            "Submitting…"
            if self.submitting
            else (f"Submit to {short_peer_id(peer_id)}" if peer_id else "Submit to best match")
        )

    def _gpu_allowed(self, framework: str) -> None:
        gpu = self.query_one("#dev-gpu", RadioButton)
        hint = self.query_one("#device-hint", Static)
        cpu_only = framework in CPU_ONLY_FRAMEWORKS
        gpu.disabled = cpu_only
        hint.display = cpu_only
        if cpu_only:
            hint.update(f"{framework} runs on CPU only: GPU jobs are for pytorch and tensorflow")
            if self.device == "gpu":
                self.device = "cpu"
                self.query_one("#dev-cpu", RadioButton).value = True

    def _show_problems(self) -> None:
        for name in FIELDS:
            widget = self.query_one(f"#{name}-problems", Static)
            messages = self.problems.get(name, [])
            visible = messages if (self.submitted or name in self.touched) else []
            widget.update(_problem_lines(visible))
            widget.set_class(bool(visible), "-shown")
            self.query_one(f"#{name}-field").set_class(bool(visible), "-invalid")
        general = self.query_one("#general-problems", Static)
        general.update(_problem_lines(self.general))
        general.set_class(bool(self.general), "-shown")

    def _show_extra(self) -> None:
        extra = self.query_one("#extra", Static)
        parts: list[str] = []
        if env := self.extra.get("env"):
            parts.append("env " + ", ".join(f"{k}={v}" for k, v in env.items()))
        if (outputs := self.extra.get("outputs")) and tuple(outputs) != ("outputs",):
            parts.append("outputs " + ", ".join(outputs))
        extra.display = bool(parts)
        extra.update(safe(" · ".join(parts) + " (from the example)") if parts else "")

    def _show_estimate(self, spec: JobSpec) -> None:
        res = estimate_resource(spec.tier, spec.device)
        minutes = spec.expected_minutes if spec.expected_minutes > 0 else 0.0
        low, high = static_ntx(spec.tier, spec.device, minutes)
        needs = [
            f"{span(res.min_cores, res.max_cores)} core{'s' if res.max_cores > 1 else ''}",
            f"{span(res.min_cpu_mhz, res.max_cpu_mhz)} MHz",
            f"{span(res.min_ram_mb, res.max_ram_mb)} MB RAM",
        ]
        if spec.device == "gpu":
            needs += [
                f"{span(res.min_vram_mb, res.max_vram_mb)} MB VRAM",
                f"{span(*res.gpu_power_w)} W",
                f"{span(*res.gpu_usage_percent)}% GPU",
            ]
        lines = [
            Content.assemble(
                ("Static estimate  ", "bold"),
                (f"{_num(low)}{DASH}{_num(high)} NTX", "bold $text-accent"),
                f" for {minutes:g} min",
            ),
            Content.assemble(
                (f"{TIER_LABELS[spec.tier]} {spec.device.upper()}: ", "bold"),
                " · ".join(needs),
            ),
        ]
        if spec.budget_ntx is not None and spec.budget_ntx < low:
            below = f"budget {spec.budget_ntx:g} NTX is below it"
            lines.append(Content.styled(below, "$text-error"))
        self.query_one("#estimate-text", Static).update(Content("\n").join(lines))
        self.query_one("#tier-table", Static).update(tier_table(spec.device, spec.tier))

    def _show_match(self, spec: JobSpec) -> None:
        note = self.query_one("#who-note", Static)
        options = self.query_one("#who-list", OptionList)
        panel = self.query_one("#who", Vertical)
        if self.peer_problem is not None or not self.peers:
            note.update(
                self.peer_problem
                or "No providers known yet: they appear as their adverts reach this node."
            )
            note.display = True
            options.display = False
            panel.border_subtitle = ""
            self.result = None
            return
        note.display = False
        options.display = True
        result = match(spec, list(self.peers.values()))
        self.result = result
        chosen = self._value("peer_id")
        highlighted = options.highlighted
        options.clear_options()
        for rank, candidate in enumerate(result.candidates):
            peer = candidate.peer
            options.add_option(
                Option(
                    Content.assemble(
                        ("✓ ", "bold $text-success"),
                        (short_peer_id(peer.peer_id), "bold"),
                        "  ",
                        _offer(peer),
                        f"  {latency(candidate.latency_ms)}  ",
                        (f"{_num(candidate.cost_ntx)} NTX", "bold"),
                        (f" ({candidate.price_ntx_hour:g}/h)", "$text-muted"),
                        ("  ← picked" if peer.peer_id == chosen else "", "bold $text-accent"),
                        ("  best" if rank == 0 and not chosen else "", "$text-success"),
                    ),
                    id=peer.peer_id,
                )
            )
        for peer_id, reasons in result.excluded:
            options.add_option(
                Option(
                    Content.assemble(
                        ("✗ ", "bold $text-error"),
                        (short_peer_id(peer_id), "bold"),
                        "  ",
                        (safe(reasons), "$text-muted"),
                        ("  ← picked" if peer_id == chosen else "", "bold $text-accent"),
                    ),
                    id=peer_id,
                )
            )
        if highlighted is not None and highlighted < options.option_count:
            options.highlighted = highlighted
        panel.border_subtitle = (
            f"{len(result.candidates)} of {plural(len(self.peers), 'provider')} match"
        )

    @on(OptionList.OptionSelected, "#who-list")
    def _pick(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        field = self.query_one("#peer_id", Input)
        peer_id = event.option.id or ""
        field.value = "" if field.value.strip() == peer_id else peer_id

    # --- presets ---------------------------------------------------------------------------

    def action_preset(self, index: int) -> None:
        if index >= len(self.presets) or self.presets[index].spec is None:
            return
        spec = self.presets[index].spec
        assert spec is not None
        self.query_one("#script_url", Input).value = spec.script_url or ""
        self.query_one("#name", Input).value = spec.name
        self.query_one("#deps", Input).value = ", ".join(spec.deps)
        self.query_one("#expected_minutes", Input).value = f"{spec.expected_minutes:g}"
        self.query_one("#budget_ntx", Input).value = (
            "" if spec.budget_ntx is None else f"{spec.budget_ntx:g}"
        )
        self.extra = {
            key: value
            for key, value in (
                ("env", dict(spec.env)),
                ("outputs", tuple(spec.outputs)),
                ("gpu_vendor", spec.gpu_vendor),
            )
            if value
        }
        self.framework, self.device, self.tier = spec.framework, spec.device, spec.tier
        self.query_one(f"#fw-{spec.framework}", RadioButton).value = True
        self.query_one(f"#tier-{spec.tier}", RadioButton).value = True
        if spec.device == "cpu" or spec.framework not in CPU_ONLY_FRAMEWORKS:
            self.query_one(f"#dev-{spec.device}", RadioButton).value = True
        self.touched.update(FIELDS)
        self.refresh_form()
        self.notify(f"Example {self.presets[index].name} loaded", title="Submit")

    @on(Button.Pressed)
    def _button(self, event: Button.Pressed) -> None:
        event.stop()
        button = event.button.id or ""
        if button == "submit":
            self.action_submit()
        elif button.startswith("preset-"):
            self.action_preset(int(button.split("-", 1)[1]))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "preset":
            index = parameters[0] if parameters else 0
            return isinstance(index, int) and index < len(self.presets)
        return True

    # --- submitting ------------------------------------------------------------------------

    @on(Input.Submitted)
    def _enter(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_submit()

    def action_submit(self) -> None:
        self.submitted = True
        self.refresh_form()
        if any(self.problems.values()) or self.general:
            self.notify("Fix the marked fields first", title="Submit", severity="warning")
            return
        if not self.submitting:
            self.submit_job()

    @work(exclusive=True, group="submit")
    async def submit_job(self) -> None:
        spec, _ = self.read_spec()
        peer_id = self._value("peer_id") or None
        self.submitting = True
        self.query_one("#submit", Button).disabled = True
        self.refresh_form()
        try:
            job: JobInfo = await self.nunet.client.call(
                SubmitJob(spec=msgspec.to_builtins(spec), peer_id=peer_id)
            )
        except (EngineError, OSError) as exc:
            message = safe(
                exc.message if isinstance(exc, EngineError) else f"lost the engine: {exc}"
            )
            self.general = [message]
            if isinstance(exc, EngineError):
                for problem in exc.problems:
                    name = FIELD_OF.get(problem.field)
                    if name is not None:
                        self.problems.setdefault(name, []).append(problem.message)
            self._show_problems()
            self.notify(message, title="Submit", severity="error", markup=False, timeout=10)
            return
        finally:
            self.submitting = False
            self.query_one("#submit", Button).disabled = False
            self.query_one("#submit", Button).label = "Submit to best match"
        from nunet_tui.screens.job_detail import JobDetailScreen

        self.notify(
            f"Job {job.job_id} {job.state} by {short_peer_id(job.provider)}",
            title="Submit",
            markup=False,
        )
        # Not from inside this worker: switching removes this screen, which cancels its
        # workers, and the new screen must not be mounted by a task being cancelled.
        self.app.call_later(self.app.switch_screen, JobDetailScreen(job.job_id, job=job))


def tier_table(device: str, selected: str) -> Content:
    """The tier table (engine/jobs/tiers.py), the chosen tier highlighted."""
    gpu = device == "gpu"
    head = f"{'Tier':<9}{'Cores':<6}{'RAM GB':<8}" + (f"{'VRAM GB':<9}" if gpu else "") + "NTX/h"
    rows = [Content.styled(head, "bold $text-muted")]
    for tier in TIERS:
        res = estimate_resource(tier, device)
        low, high = static_ntx(tier, device, 60)
        line = (
            f"{TIER_LABELS[tier]:<9}{span(res.min_cores, res.max_cores):<6}"
            f"{span(res.min_ram_mb / 1024, res.max_ram_mb / 1024):<8}"
            + (f"{span(res.min_vram_mb / 1024, res.max_vram_mb / 1024):<9}" if gpu else "")
            + f"{_num(low)}{DASH}{_num(high)}"
        )
        rows.append(
            Content.styled(("▸ " if tier == selected else "  ") + line, "bold $text-accent")
            if tier == selected
            else Content("  " + line)
        )
    rows[0] = Content.assemble("  ", rows[0])
    return Content("\n").join(rows)


def _preset_keys(presets: Sequence[Preset]) -> Content:
    """``F1 iris · F2 pytorch_checkpoint · …``: the example jobs, one key each."""
    parts = [
        Content.assemble(
            (f"F{index + 1}", "bold $text-accent"),
            " ",
            (preset.name, "" if preset.spec is not None else "strike $text-muted"),
        )
        for index, preset in enumerate(presets)
    ]
    return Content(" · ").join(parts)


def span(low: float, high: float) -> str:
    """``1,024-2,048`` (en dash); one number when both ends are the same."""
    return thousands(low) if low == high else f"{thousands(low)}{DASH}{thousands(high)}"


def _offer(peer: Peer) -> Content:
    res = peer.resources
    if res is None:
        return Content.styled(DASH, "$text-muted")
    parts = [f"{thousands(res.memory_mb)} MB"]
    if res.gpus:
        models: dict[str, int] = {}
        for gpu in res.gpus:
            models[safe(gpu.model)] = models.get(safe(gpu.model), 0) + 1
        parts.append(", ".join(f"{n}{TIMES}{m}" if n > 1 else m for m, n in models.items()))
    return Content.styled(" · ".join(parts), "$text-muted")


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if value < 0.1:
        return f"{value:.3f}"
    if value < 10:
        return f"{value:.2f}"
    return f"{value:,.1f}"


def _problem_lines(messages: Sequence[str]) -> Content:
    return Content("\n").join(
        Content.assemble(("✗ ", "bold"), safe(message)) for message in messages
    )


__all__ = ["Preset", "SubmitScreen", "load_presets", "tier_table"]
