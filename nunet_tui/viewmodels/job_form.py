"""The submit form as data: what its fields read as a ``JobSpec`` and which problems each
field shows (``validate_spec``'s, plus what could not even be read). No Textual here: the
form widget (nunet_tui/widgets/job_form.py) shows it, the submit screen decides."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from engine.domain.spec import JobSpec, StepSpec, validate_spec
from engine.domain.step_lines import parse_steps, step_line
from engine.errors import EngineError
from oracle_client.ntx import UNITS_PER_NTX, digits, parse_ntx, units_of

FRAMEWORK_LABELS = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "scikit-learn": "sklearn"}
TIER_LABELS = {"low": "Low", "moderate": "Moderate", "high": "High"}
# Form field → the spec fields whose problems it shows.
FIELDS: dict[str, tuple[str, ...]] = {
    "script_url": ("script_url", "source", "git.url", "git.entry", "git.ref"),
    "framework": ("framework",),
    "device": ("device", "gpu_vendor"),
    "tier": ("tier",),
    "deps": ("deps",),
    "resource_spec": ("resource_spec",),
    "expected_minutes": ("expected_minutes",),
    "max_minutes": ("max_minutes",),
    "budget_ntx": ("budget_ntx",),
    "peer_id": ("peer_id",),
    "subtasks": ("subtasks",),  # and each step's own fields (subtasks[2].replicas): below
}
FIELD_OF = {alias: name for name, aliases in FIELDS.items() for alias in aliases}
# The steps box holds every step: "; " between them (one line, as every field of the form).
STEP_SEPARATOR = "; "


def field_of(problem_field: str) -> str | None:
    """The form field that shows a spec field's problems (None: under no field)."""
    if problem_field.startswith("subtasks["):
        return "subtasks"
    return FIELD_OF.get(problem_field)


@dataclass(frozen=True)
class FormValues:
    """The form's fields as typed (texts stripped) and chosen."""

    script_url: str = ""
    name: str = ""
    deps: str = ""
    expected_minutes: str = "10"
    max_minutes: str = ""  # empty: the expected time
    resource_spec: str = ""  # empty: the tier's cheapest matching spec
    budget_ntx: str = ""
    peer_id: str = ""
    framework: str = "pytorch"
    device: str = "cpu"
    tier: str = "low"
    # The job's steps, "name x N: command" each, separated by ";" (empty: one run).
    subtasks: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)  # env, outputs, gpu_vendor of a preset


@dataclass
class FormCheck:
    """Each field's problems, and those of no field (``general``)."""

    problems: dict[str, list[str]]
    general: list[str]

    @property
    def ok(self) -> bool:
        return not any(self.problems.values()) and not self.general


def read_spec(values: FormValues) -> tuple[JobSpec, dict[str, list[str]]]:
    """The spec the form describes, and what could not even be read (not numbers)."""
    local: dict[str, list[str]] = {}
    expected = 10.0
    if text := values.expected_minutes:
        try:
            expected = float(text)
        except ValueError:
            local.setdefault("expected_minutes", []).append("enter a number of minutes")
    else:
        local.setdefault("expected_minutes", []).append("how long do you expect it to run?")
    longest: float | None = None
    if text := values.max_minutes:
        try:
            longest = float(text)
        except ValueError:
            local.setdefault("max_minutes", []).append("enter a number of minutes (or nothing)")
    budget: float | None = None
    if text := values.budget_ntx:
        try:
            # Read exactly (a 7th decimal is refused), then the spec's float of NTX.
            budget = parse_ntx(text) / UNITS_PER_NTX
        except ValueError as exc:
            local.setdefault("budget_ntx", []).append(f"{exc} (or nothing: no cap)")
    deps = tuple(d.strip() for d in values.deps.split(",") if d.strip())
    steps: tuple[StepSpec, ...] = ()
    try:
        steps = parse_steps(values.subtasks.replace(";", "\n"))
    except EngineError as exc:
        local.setdefault("subtasks", []).append(exc.message)
    fields: dict[str, Any] = {
        "script_url": values.script_url,
        "name": values.name,
        "framework": values.framework,
        "device": values.device,
        "tier": values.tier,
        "deps": deps,
        "expected_minutes": expected,
        "max_minutes": longest,
        "resource_spec": values.resource_spec or None,
        "budget_ntx": budget,
        "subtasks": steps,
        **values.extra,
    }
    return msgspec.convert(fields, JobSpec), local


def check_form(
    spec: JobSpec, local: Mapping[str, list[str]], peer_id: str, known_peers: Collection[str]
) -> FormCheck:
    """What each field shows under it, from the spec and the peers this node knows."""
    problems: dict[str, list[str]] = {k: list(v) for k, v in local.items()}
    general: list[str] = []
    for problem in validate_spec(spec).problems:
        if problem.field in local or field_of(problem.field) in local:
            continue
        name = field_of(problem.field)
        if name is None:
            general.append(problem.message)
        elif problem.message not in problems.setdefault(name, []):
            problems[name].append(problem.message)
    if peer_id and known_peers and peer_id not in known_peers:
        problems.setdefault("peer_id", []).append(
            f"{peer_id} is not listed on this channel (p lists the peers)"
        )
    if not spec.script_url:
        problems["script_url"] = ["the script URL is required (http:// or https://)"]
    return FormCheck(problems, general)


def form_values_of(spec: JobSpec) -> FormValues:
    """The form's fields filled from a spec (a preset): reading them back gives the spec."""
    return FormValues(
        script_url=spec.script_url or "",
        name=spec.name,
        deps=", ".join(spec.deps),
        expected_minutes=f"{spec.expected_minutes:g}",
        max_minutes="" if spec.max_minutes is None else f"{spec.max_minutes:g}",
        resource_spec=spec.resource_spec or "",
        budget_ntx=(
            "" if spec.budget_ntx is None else digits(units_of(spec.budget_ntx)).replace(",", "")
        ),
        framework=spec.framework,
        device=spec.device,
        tier=spec.tier,
        subtasks=STEP_SEPARATOR.join(step_line(step) for step in spec.subtasks),
        extra=preset_extra(spec),
    )


# The spec's fields that the form has no widget for: a preset's values for them travel in
# ``FormValues.extra``. Every field of JobSpec is a form field or listed here (a test checks
# it), so a new spec field cannot be dropped by the form unnoticed, as kind and ports were.
EXTRA_FIELDS = (
    "env",
    "outputs",
    "gpu_vendor",
    "kind",
    "ports",
    "shell",
    "git",
    "inputs",
    "publish_results",
    "gang",  # set by the consumer for each rank of a distributed step, never by hand
)


def preset_extra(spec: JobSpec) -> dict[str, Any]:
    """What a preset sets that the form has no field for (shown under the form): each such
    field whose value is not the spec's default."""
    default = JobSpec(framework=spec.framework)
    return {
        name: getattr(spec, name)
        for name in EXTRA_FIELDS
        if getattr(spec, name) != getattr(default, name)
    }


def extra_line(extra: Mapping[str, Any]) -> str:
    """``service on port 7860 · env EPOCHS=8 · outputs model.pt`` (empty when the preset set
    nothing extra)."""
    parts: list[str] = []
    if extra.get("kind") == "service":
        ports = tuple(extra.get("ports", ()))
        parts.append(
            "service"
            + (f" on port{'s' if len(ports) > 1 else ''} " if ports else "")
            + ", ".join(str(p) for p in ports)
        )
    elif ports := tuple(extra.get("ports", ())):
        parts.append("ports " + ", ".join(str(p) for p in ports))
    if env := extra.get("env"):
        parts.append("env " + ", ".join(f"{k}={v}" for k, v in env.items()))
    if (outputs := extra.get("outputs")) and tuple(outputs) != ("outputs",):
        parts.append("outputs " + ", ".join(outputs))
    if vendor := extra.get("gpu_vendor"):
        parts.append(f"{vendor} GPU")
    if extra.get("shell"):
        parts.append("shell")
    return " · ".join(parts)
