"""The resources screen's rows (nunet_tui/screens/resources.py): each record's cells, its sort
values, and the note under a table.
"""

from __future__ import annotations

from typing import Any

from textual.content import Content

from engine.api import Resources, ResourceSpec
from nunet_tui.format import DASH, mb, plural, safe, short_peer_id
from nunet_tui.viewmodels import resources as vm
from nunet_tui.widgets.sortable_table import AUTO
from oracle_client.ntx import format_ntx, format_rate


def sort_value(record: vm.Record, key: str) -> Any:
    """A spec's price (cheapest first: ``o`` shows the largest value first) and minimum
    charge (ascending) by their base units."""
    if isinstance(record, ResourceSpec) and key == "price":
        return -record.price_units_hour
    if isinstance(record, ResourceSpec) and key == "min":
        return record.min_charge_units or None
    return AUTO


def row_cells(record: vm.Record) -> tuple[Content, ...]:
    """Every column's cell (COLUMNS' order) for ``record``."""
    if isinstance(record, ResourceSpec):
        gpus = (
            f"{record.gpus} x {safe(record.gpu_resource)}"
            if record.gpus and record.gpu_resource
            else str(record.gpus)
        )
        return (
            Content.styled(safe(record.name), "bold"),
            Content(plural(record.cpu_cores, "core")),
            Content(mb(record.ram_mb)),
            Content(mb(record.disk_mb) if record.disk_mb else DASH),
            Content(gpus),
            Content.styled(format_rate(record.price_units_hour), "bold"),
            Content(format_ntx(record.min_charge_units) if record.min_charge_units else DASH),
            Content(safe(record.pool)),
        )
    if isinstance(record, vm.CustomResource):
        source = (
            ",".join(str(i) for i in record.from_gpus)
            if record.from_gpus is not None
            else "declared"
        )
        return (
            Content.styled(safe(record.name), "bold"),
            Content(record.kind),
            Content(str(record.count)),
            Content(source),
            Content(mb(record.vram_mb) if record.vram_mb else DASH),
            Content(safe(record.model) or DASH),
        )
    if isinstance(record, vm.Pool):
        return (
            Content.styled(safe(record.name), "bold"),
            Content(_peers(record.members)),
            Content(", ".join(safe(g) for g in record.groups) or DASH),
        )
    return (Content.styled(safe(record.name), "bold"), Content(_peers(record.members)))


def gpu_name(vendor: str, name: str) -> str:
    """``NVIDIA GeForce RTX 3090``: the vendor only when the name does not say it."""
    shown = safe(name)
    return shown if shown.lower().startswith(vendor.lower()) else f"{safe(vendor)} {shown}"


def _peers(members: tuple[str, ...]) -> str:
    if not members:
        return DASH
    shown = ", ".join(short_peer_id(m) for m in members[:3])
    return shown + (f" +{len(members) - 3}" if len(members) > 3 else "")


def table_note(
    kind: vm.Kind, listing: Resources | None, problem: str | None, loaded: bool
) -> Content:
    if problem is not None:
        return Content.styled(problem, "$text-error")
    if listing is None:
        return Content.styled("Reading…" if not loaded else "", "$text-muted")
    accent = "bold $text-accent"
    if kind == "spec":
        if listing.defaults:
            return Content.assemble(
                ("NuNet's Low/Moderate/High tiers", "bold"),
                " are sold while no spec is defined. ",
                ("n", accent),
                " defines one: resources and a price per machine-hour.",
            )
        return Content("")
    if kind == "custom":
        return Content.assemble(
            ("No custom resources. ", "bold"),
            "Name detected GPUs as one resource (",
            ("n", accent),
            ", From GPUs 0,1) or declare an accelerator detection does not know.",
        )
    if kind == "pool":
        return Content.assemble(
            ("Every spec is in the default pool", "bold"),
            ", open to everyone. A pool (",
            ("n", accent),
            ") reserves specs for the peers and groups it lists.",
        )
    return Content.styled("No groups: a group names a set of peer ids for pools.", "$text-muted")
