"""The "Estimate" panel of the submit form: with a provider to run it, its spec, price, the
estimate (price x expected time) and what is locked (price x maximum time, the budget cap);
then NuNet's static NTX estimate for the job and the tier table (engine/domain/tiers.py, the
one tier table), the chosen tier highlighted."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from engine.domain.admission import budget_units, max_minutes
from engine.domain.matching import Candidate
from engine.domain.peer_names import TABLE_NAME_WIDTH, peer_label
from engine.domain.spec import TIERS, JobSpec
from engine.domain.tiers import estimate_resource, static_units
from nunet_tui.format import DASH, safe, span
from nunet_tui.viewmodels.job_form import TIER_LABELS
from oracle_client.ntx import digits, format_ntx, format_rate


class JobEstimate(Vertical):
    """``#estimate``: shown again from the spec on every change (``show``)."""

    def __init__(self, *, id: str, classes: str = "") -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Estimate"

    def compose(self) -> ComposeResult:
        yield Static(id="estimate-text", markup=False)
        yield Static(id="tier-table", markup=False)

    def show(self, spec: JobSpec, candidate: Candidate | None = None) -> None:
        res = estimate_resource(spec.tier, spec.device)
        minutes = spec.expected_minutes if spec.expected_minutes > 0 else 0.0
        low, high = static_units(spec.tier, spec.device, minutes)
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
        lines = quote_lines(spec, candidate)
        lines += [
            Content.assemble(
                ("Static estimate  ", "bold"),
                (
                    f"{digits(low)}{DASH}{format_ntx(high)}",
                    "bold $text-accent",
                ),
                f" for {minutes:g} min",
            ),
            Content.assemble(
                (f"{TIER_LABELS[spec.tier]} {spec.device.upper()}: ", "bold"),
                " · ".join(needs),
            ),
        ]
        budget = budget_units(spec)
        if candidate is None and budget is not None and budget < low:
            below = f"budget {format_ntx(budget)} is below it"
            lines.append(Content.styled(below, "$text-error"))
        self.query_one("#estimate-text", Static).update(Content("\n").join(lines))
        self.query_one("#tier-table", Static).update(tier_table(spec.device, spec.tier))


def quote_lines(spec: JobSpec, candidate: Candidate | None) -> list[Content]:
    """``gpu large on 12D3…x9Fq · 2.4 NTX/h`` then ``1.2 NTX estimate (30 min) · 2.4 NTX
    locked (max 60 min)``: what this job costs there, as the provider's quote will say."""
    if candidate is None or candidate.resource is None:
        return []
    resource = candidate.resource
    minimum = (
        f" · min charge {format_ntx(resource.min_charge_units)}"
        if resource.min_charge_units
        else ""
    )
    lines = [
        Content.assemble(
            ("Spec ", "bold"),
            (safe(resource.name), "bold $text-accent"),
            f" on {_provider(candidate)} · {format_rate(resource.price_units_hour)}",
            (minimum, "$text-muted"),
        ),
        Content.assemble(
            (format_ntx(candidate.estimate_units, "estimate"), "bold $text-accent"),
            f" ({spec.expected_minutes:g} min) · ",
            (format_ntx(candidate.lock_units, "locked"), "bold"),
            f" (max {max_minutes(spec):g} min)",
        ),
    ]
    budget = budget_units(spec)
    if budget is not None and budget < candidate.lock_units:
        lines.append(
            Content.styled(f"budget {format_ntx(budget)} is below the lock", "$text-error")
        )
    return lines


def tier_table(device: str, selected: str) -> Content:
    """The tier table (engine/domain/tiers.py), the chosen tier highlighted."""
    gpu = device == "gpu"
    head = f"{'Tier':<9}{'Cores':<6}{'RAM GB':<8}" + (f"{'VRAM GB':<9}" if gpu else "") + "NTX/h"
    rows = [Content.styled(head, "bold $text-muted")]
    for tier in TIERS:
        res = estimate_resource(tier, device)
        low, high = static_units(tier, device, 60)
        line = (
            f"{TIER_LABELS[tier]:<9}{span(res.min_cores, res.max_cores):<6}"
            f"{span(res.min_ram_mb / 1024, res.max_ram_mb / 1024):<8}"
            + (f"{span(res.min_vram_mb / 1024, res.max_vram_mb / 1024):<9}" if gpu else "")
            + f"{digits(low)}{DASH}{digits(high)}"
        )
        rows.append(
            Content.styled(("▸ " if tier == selected else "  ") + line, "bold $text-accent")
            if tier == selected
            else Content("  " + line)
        )
    rows[0] = Content.assemble("  ", rows[0])
    return Content("\n").join(rows)


__all__ = ["JobEstimate", "tier_table"]


def _provider(candidate: Candidate) -> str:
    """The provider's name (cut short) with its short id (engine/domain/peer_names.py)."""
    name = candidate.peer.display_name
    return peer_label(candidate.peer_id, name, name_width=TABLE_NAME_WIDTH)
