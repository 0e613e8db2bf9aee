"""The Resources screen's forms as data: what each tab edits, how its fields read as a record,
and which problems each field shows as you type. No Textual here.

The rules are the engine's own (engine/domain/specs.py ``check_spec``, ``check_custom``,
``check_pool``, ``check_group``: the same the CLI and the engine command apply), run here on
the last ``Resources`` listing so a field says what is wrong while it is typed; the engine
checks again when the record is saved. Prices are typed in NTX and read exactly
(oracle_client/ntx.py ``parse_ntx``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from engine.api import (
    DEFAULT_POOL,
    Command,
    CustomAdd,
    CustomRemove,
    CustomResource,
    Group,
    GroupAdd,
    GroupRemove,
    Pool,
    PoolAdd,
    PoolRemove,
    Resources,
    ResourceSpec,
    SpecAdd,
    SpecRemove,
)
from oracle_client.ntx import digits, parse_ntx

Kind = Literal["custom", "spec", "pool", "group"]
Record = CustomResource | ResourceSpec | Pool | Group
Problems = dict[str, list[str]]


@dataclass(frozen=True)
class Field:
    key: str  # the record's field (problems are matched on it)
    label: str
    placeholder: str = ""
    hint: str = ""


FIELDS: dict[Kind, tuple[Field, ...]] = {
    "spec": (
        Field("name", "Name", "gpu-large"),
        Field("cpu_cores", "CPU cores", "4"),
        Field("ram_mb", "RAM MB", "8192"),
        Field("disk_mb", "Disk MB", "0"),
        Field("gpus", "GPUs", "0"),
        Field("gpu_resource", "GPU resource", "any onboarded GPU", "a custom resource's name"),
        Field("price_units_hour", "Price NTX/h", "2.4"),
        Field("min_charge_units", "Min charge NTX", "0"),
        Field("pool", "Pool", DEFAULT_POOL),
    ),
    "custom": (
        Field("name", "Name", "RTX 3090"),
        Field("kind", "Kind", "gpu", "gpu or accelerator"),
        Field("count", "Count", "1"),
        Field("from_gpus", "From GPUs", "0,1", "detected GPU indexes; empty: declared"),
        Field("vram_mb", "VRAM MB", "24576"),
        Field("model", "Model", "NVIDIA GeForce RTX 3090"),
    ),
    "pool": (
        Field("name", "Name", "lab"),
        Field("members", "Members", "12D3KooW…, 12D3KooW…", "peer ids, comma separated"),
        Field("groups", "Groups", "students", "group names, comma separated"),
    ),
    "group": (
        Field("name", "Name", "students"),
        Field("members", "Members", "12D3KooW…, 12D3KooW…", "peer ids, comma separated"),
    ),
}
TITLES: dict[Kind, str] = {
    "spec": "spec",
    "custom": "custom resource",
    "pool": "pool",
    "group": "group",
}


def _int(values: Mapping[str, str], key: str, local: Problems, default: int = 0) -> int:
    text = values.get(key, "").strip().replace(",", "")
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        local.setdefault(key, []).append(f"{text[:20]!r} is not a whole number")
        return default


def _ntx(values: Mapping[str, str], key: str, local: Problems) -> int:
    text = values.get(key, "").strip()
    if not text:
        return 0
    try:
        return parse_ntx(text)
    except ValueError as exc:
        local.setdefault(key, []).append(str(exc))
        return 0


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def read(kind: Kind, values: Mapping[str, str]) -> tuple[Record, Problems]:
    """The record the form describes, and what could not even be read (not numbers)."""
    local: Problems = {}
    name = values.get("name", "").strip()
    record: Record
    if kind == "spec":
        record = ResourceSpec(
            name=name,
            cpu_cores=_int(values, "cpu_cores", local),
            ram_mb=_int(values, "ram_mb", local),
            disk_mb=_int(values, "disk_mb", local),
            gpus=_int(values, "gpus", local),
            gpu_resource=values.get("gpu_resource", "").strip() or None,
            price_units_hour=_ntx(values, "price_units_hour", local),
            min_charge_units=_ntx(values, "min_charge_units", local),
            pool=values.get("pool", "").strip() or DEFAULT_POOL,
        )
    elif kind == "custom":
        kind_text = values.get("kind", "").strip() or "gpu"
        if kind_text not in ("gpu", "accelerator"):
            local.setdefault("kind", []).append("gpu or accelerator")
            kind_text = "gpu"
        from_text = values.get("from_gpus", "").strip()
        from_gpus: tuple[int, ...] | None = None
        if from_text:
            try:
                from_gpus = tuple(int(part) for part in _names(from_text))
            except ValueError:
                local.setdefault("from_gpus", []).append("GPU indexes, like 0,1")
        record = CustomResource(
            name=name,
            kind=kind_text,  # type: ignore[arg-type]
            count=_int(values, "count", local, default=1),
            from_gpus=from_gpus,
            vram_mb=_int(values, "vram_mb", local),
            model=values.get("model", "").strip(),
        )
    elif kind == "pool":
        record = Pool(
            name=name,
            members=_names(values.get("members", "")),
            groups=_names(values.get("groups", "")),
        )
    else:
        record = Group(name=name, members=_names(values.get("members", "")))
    return record, local


def check(
    kind: Kind, record: Record, listing: Resources, *, replace: bool
) -> tuple[Problems, list[str]]:
    """Each field's problems by the engine's rules, and those of no field."""
    from engine.domain import specs as rules

    if isinstance(record, ResourceSpec):
        found = rules.check_spec(
            record,
            listing.onboarded,
            listing.customs,
            listing.pools,
            specs=() if listing.defaults else listing.specs,
            replace=replace,
        )
    elif isinstance(record, CustomResource):
        found = rules.check_custom(record, listing.system, listing.customs, replace=replace)
    elif isinstance(record, Pool):
        found = rules.check_pool(record, listing.groups, listing.pools, replace=replace)
    else:
        found = rules.check_group(record, listing.groups, listing.pools, replace=replace)
    keys = {f.key for f in FIELDS[kind]}
    problems: Problems = {}
    general: list[str] = []
    for problem in found:
        if problem.field in keys:
            problems.setdefault(problem.field, []).append(problem.message)
        else:
            general.append(problem.message)
    return problems, general


def validate(
    kind: Kind, values: Mapping[str, str], listing: Resources, *, replace: bool
) -> tuple[Record, Problems, list[str]]:
    """``read`` then ``check``: what the form shows under each field as it is typed."""
    record, local = read(kind, values)
    problems, general = check(kind, record, listing, replace=replace)
    for key, messages in local.items():
        problems[key] = messages  # "not a number" says more than the rule on the default
    return record, problems, general


def values_of(record: Record) -> dict[str, str]:
    """A record as the form's texts (editing it)."""
    if isinstance(record, ResourceSpec):
        return {
            "name": record.name,
            "cpu_cores": str(record.cpu_cores),
            "ram_mb": str(record.ram_mb),
            "disk_mb": str(record.disk_mb),
            "gpus": str(record.gpus),
            "gpu_resource": record.gpu_resource or "",
            "price_units_hour": digits(record.price_units_hour).replace(",", ""),
            "min_charge_units": digits(record.min_charge_units).replace(",", ""),
            "pool": record.pool,
        }
    if isinstance(record, CustomResource):
        return {
            "name": record.name,
            "kind": record.kind,
            "count": str(record.count),
            "from_gpus": ",".join(str(i) for i in record.from_gpus or ()),
            "vram_mb": str(record.vram_mb),
            "model": record.model,
        }
    if isinstance(record, Pool):
        return {
            "name": record.name,
            "members": ", ".join(record.members),
            "groups": ", ".join(record.groups),
        }
    return {"name": record.name, "members": ", ".join(record.members)}


SAVE: dict[Kind, Callable[[Any, bool], Command]] = {
    "spec": lambda r, replace: SpecAdd(spec=r, replace=replace),
    "custom": lambda r, replace: CustomAdd(custom=r, replace=replace),
    "pool": lambda r, replace: PoolAdd(pool=r, replace=replace),
    "group": lambda r, replace: GroupAdd(group=r, replace=replace),
}
REMOVE: dict[Kind, Callable[[str], Command]] = {
    "spec": lambda name: SpecRemove(name=name),
    "custom": lambda name: CustomRemove(name=name),
    "pool": lambda name: PoolRemove(name=name),
    "group": lambda name: GroupRemove(name=name),
}


def records(kind: Kind, listing: Resources) -> tuple[Record, ...]:
    if kind == "spec":
        return listing.specs
    if kind == "custom":
        return listing.customs
    if kind == "pool":
        return listing.pools
    return listing.groups
