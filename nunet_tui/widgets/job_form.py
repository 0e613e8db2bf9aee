"""The submit form's fields: script, name, framework, device, usage, deps, minutes, budget,
peer, each with its hint and its problems underneath.

Attributes down, messages up: the screen hands it the problems to show (``show_check``) and
reads its values (``values``); the form posts ``JobForm.Changed`` when a field changes and
``JobForm.SubmitRequested`` on Enter or the button. It never calls the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Static

from engine.domain.spec import CPU_ONLY_FRAMEWORKS, DEVICES, FRAMEWORKS, TIERS, JobSpec
from nunet_tui.format import problem_lines, safe
from nunet_tui.presets import Preset
from nunet_tui.viewmodels.job_form import (
    FIELDS,
    FRAMEWORK_LABELS,
    TIER_LABELS,
    FormCheck,
    FormValues,
    extra_line,
    form_values_of,
)


class JobForm(Vertical):
    """The "New job" panel (``#job-form``)."""

    class Changed(Message):
        """A field changed: typed, picked, or set by a preset."""

    class SubmitRequested(Message):
        """Enter in a field, or the Submit button."""

    def __init__(self, presets: Sequence[Preset] = (), *, id: str, classes: str = "") -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "New job"
        self.presets = list(presets)
        self.framework = "pytorch"
        self.device = "cpu"
        self.tier = "low"
        self.extra: dict[str, Any] = {}  # env, outputs, gpu_vendor of a preset
        self.touched: set[str] = set()

    # --- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        if self.presets:
            with Horizontal(id="presets"):
                yield Label("Examples", classes="field-label")
                yield Static(preset_keys(self.presets), id="preset-keys")
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
            "subtasks",
            "Steps",
            Input(
                placeholder="one run (or: prep: python3 prep.py; train x 4)",
                id="subtasks",
                compact=True,
            ),
        )
        yield from self._field(
            "expected_minutes",
            "Expected min",
            Input("10", type="number", id="expected_minutes", compact=True),
        )
        yield from self._field(
            "max_minutes",
            "Max min",
            Input(
                placeholder="= expected (the lock covers it)",
                type="number",
                id="max_minutes",
                compact=True,
            ),
        )
        yield from self._field(
            "resource_spec",
            "Spec",
            Input(placeholder="the tier's cheapest spec", id="resource_spec", compact=True),
        )
        yield from self._field(
            "budget_ntx",
            "Budget NTX",
            Input(placeholder="no cap", id="budget_ntx", compact=True),
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
        yield _hidden(Static(id="extra", classes="hint", markup=False))
        yield Static(id="general-problems", classes="problems", markup=False)
        with Horizontal(id="buttons"):
            yield Button("Submit to best match", id="submit", variant="primary", compact=True)
        yield _hidden(Static(id="progress", classes="hint", markup=False))

    def _field(self, name: str, label: str, control: Widget) -> ComposeResult:
        with Horizontal(classes="field", id=f"{name}-field"):
            yield Label(label, classes="field-label", markup=False)
            with Vertical(classes="field-body"):
                yield control
                yield _hidden(Static(id=f"{name}-hint", classes="hint", markup=False))
                yield Static(id=f"{name}-problems", classes="problems", markup=False)

    # --- reading ---------------------------------------------------------------------------

    def value(self, name: str) -> str:
        return self.query_one(f"#{name}", Input).value.strip()

    @property
    def peer_id(self) -> str:
        return self.value("peer_id")

    def values(self) -> FormValues:
        return FormValues(
            script_url=self.value("script_url"),
            name=self.value("name"),
            deps=self.value("deps"),
            expected_minutes=self.value("expected_minutes"),
            max_minutes=self.value("max_minutes"),
            resource_spec=self.value("resource_spec"),
            budget_ntx=self.value("budget_ntx"),
            peer_id=self.peer_id,
            framework=self.framework,
            device=self.device,
            tier=self.tier,
            subtasks=self.value("subtasks"),
            extra=self.extra,
        )

    @on(Input.Changed)
    def _input_changed(self, event: Input.Changed) -> None:
        event.stop()
        if event.input.id:
            self.touched.add(event.input.id)
        self.post_message(self.Changed())

    @on(RadioSet.Changed)
    def _radio_changed(self, event: RadioSet.Changed) -> None:
        event.stop()
        name = event.radio_set.id or ""
        value = (event.pressed.id or "").split("-", 1)[-1]
        if name == "framework":
            self.framework = value
        elif name == "device":
            self.device = value
        elif name == "tier":
            self.tier = value
        self.touched.add(name)
        self.post_message(self.Changed())

    @on(Input.Submitted)
    def _enter(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.SubmitRequested())

    @on(Button.Pressed, "#submit")
    def _button(self, event: Button.Pressed) -> None:
        event.stop()
        self.post_message(self.SubmitRequested())

    # --- showing ---------------------------------------------------------------------------

    def gpu_allowed(self, framework: str) -> None:
        """GPU off for CPU-only frameworks, and the hint says why."""
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

    def show_check(self, check: FormCheck, *, reveal_all: bool) -> None:
        """Each field's problems once it was touched (all of them with ``reveal_all``)."""
        for name in FIELDS:
            widget = self.query_one(f"#{name}-problems", Static)
            messages = check.problems.get(name, [])
            visible = messages if (reveal_all or name in self.touched) else []
            widget.update(problem_lines(visible))
            widget.set_class(bool(visible), "-shown")
            self.query_one(f"#{name}-field").set_class(bool(visible), "-invalid")
        general = self.query_one("#general-problems", Static)
        general.update(problem_lines(check.general))
        general.set_class(bool(check.general), "-shown")

    def show_extra(self) -> None:
        extra = self.query_one("#extra", Static)
        line = extra_line(self.extra)
        extra.display = bool(line)
        extra.update(safe(line + " (from the example)") if line else "")

    def show_progress(self, lines: Sequence[str]) -> None:
        """What the submit under way has done so far, one step a line (none: hidden)."""
        progress = self.query_one("#progress", Static)
        progress.display = bool(lines)
        progress.update("\n".join(lines[-6:]))

    @property
    def submit_button(self) -> Button:
        return self.query_one("#submit", Button)

    # --- changing --------------------------------------------------------------------------

    def toggle_peer(self, peer_id: str) -> None:
        """Pick ``peer_id`` by hand; picking it again goes back to the best match."""
        field = self.query_one("#peer_id", Input)
        field.value = "" if field.value.strip() == peer_id else peer_id

    def load_preset(self, spec: JobSpec) -> None:
        """Every field from an example job, all of them counted as touched."""
        values = form_values_of(spec)
        for name in (
            "script_url",
            "name",
            "deps",
            "expected_minutes",
            "budget_ntx",
            "max_minutes",
            "resource_spec",
            "subtasks",
        ):
            self.query_one(f"#{name}", Input).value = getattr(values, name)
        self.extra = dict(values.extra)
        self.framework, self.device, self.tier = spec.framework, spec.device, spec.tier
        self.query_one(f"#fw-{spec.framework}", RadioButton).value = True
        self.query_one(f"#tier-{spec.tier}", RadioButton).value = True
        if spec.device == "cpu" or spec.framework not in CPU_ONLY_FRAMEWORKS:
            self.query_one(f"#dev-{spec.device}", RadioButton).value = True
        self.touched.update(FIELDS)


def preset_keys(presets: Sequence[Preset]) -> Content:
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


def _hidden(widget: Static) -> Static:
    # Hints show only when there is something to say (the form turns them on).
    widget.display = False
    return widget


__all__ = ["JobForm", "preset_keys"]
