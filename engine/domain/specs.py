"""What a provider sells (issue 12): the rules for custom resources, resource specs, pools and
groups, what the file they are kept in may hold, and NuNet's tiers as the default specs.

One validator for every door: the CLI (``resource spec add``), the engine command
(engine/resources/commands.py) and the TUI's form as you type all call ``check_spec`` and its
siblings, which return every problem, one clear line per field (``FieldProblem``). The
onboarded capacity bounds every spec. Amounts are ``int`` NTX base units.

The definitions live in ``<config dir>/resources.json`` (``Paths.resources_file``;
engine/resources/spec_file.py ``ResourceFile``), written atomically (a temporary file,
fsync, rename). A file that does not read is an error that names it, and nothing is ever
written over it: a hand edit gone wrong is fixed, never lost.

Peers are hostile: a pool's members go into the signed advert, so the counts are bounded here
to what an advert can carry (wire.py bounds them again on the way in).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import msgspec

from engine.domain.offers import DEFAULT_POOL, CustomResource, Group, Pool, ResourceSpec
from engine.domain.spec import TIERS
from engine.domain.tiers import estimate_resource
from engine.errors import FieldProblem
from oracle_client.ntx import UNITS_PER_NTX

log = logging.getLogger("nunet.resources.specs")


class Gpu(Protocol):
    @property
    def index(self) -> int: ...


class Machine(Protocol):
    """What the rules read of a capacity (``api.Capacity`` has all of it: the domain does not
    import the API)."""

    @property
    def cpu_cores(self) -> int: ...
    @property
    def memory_mb(self) -> int: ...
    @property
    def disk_mb(self) -> int: ...
    @property
    def gpus(self) -> Sequence[Gpu]: ...


FieldError = FieldProblem  # one field, one line: the TUI shows it under that field

MAX_NAME_CHARS = 40
MAX_MODEL_CHARS = 64
MAX_SPECS = 16
MAX_CUSTOMS = 16
MAX_POOLS = 8
MAX_GROUPS = 16
MAX_GROUP_MEMBERS = 128
# Every pool's members (its own and its groups', each peer id counted once per pool) travel in
# the advert, whose payload is at most 16 KiB: 128 ids of ~52 characters leave room for the rest.
MAX_ADVERTISED_MEMBERS = 128
MAX_PRICE_UNITS_HOUR = 1_000_000 * UNITS_PER_NTX  # [jobs] prices' bound, 1,000,000 NTX/h
MAX_VRAM_MB = 1 << 22  # 4 TiB: no card is larger
MAX_CUSTOM_COUNT = 64
MAX_FILE_BYTES = 1 << 20
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+- ")


# --- names, ids, amounts ------------------------------------------------------------------


def name_problem(name: str, what: str) -> str | None:
    """Why ``name`` cannot name a ``what`` (None: it can)."""
    if not name:
        return f"give the {what} a name"
    if len(name) > MAX_NAME_CHARS:
        return f"the {what} name is {len(name)} characters long: at most {MAX_NAME_CHARS}"
    if name != name.strip() or "  " in name:
        return f"the {what} name {name!r} has spaces at an end or two in a row"
    if not set(name) <= _NAME_CHARS or not name[0].isalnum():
        return (
            f"the {what} name {name!r} may hold letters, digits, spaces and . _ + - "
            "and starts with a letter or digit"
        )
    return None


def peer_id_problem(peer_id: str) -> str | None:
    """Why ``peer_id`` is not a peer id we can check a signature against (None: it is)."""
    from engine.domain.wire import WireError, public_key_of

    if len(peer_id) > 128:
        return f"{peer_id[:20]!r}... is not a peer id (too long)"
    try:
        public_key_of(peer_id)
    except WireError:
        return f"{peer_id!r} is not a peer id (an Ed25519 peer id, as `nunet-tui info` shows)"
    return None


# --- the validators ------------------------------------------------------------------------


def _existing(
    name: str, names: Iterable[str], what: str, replace: bool, command: str
) -> str | None:
    taken = name in set(names)
    if taken and not replace:
        return f"a {what} named {name!r} exists: edit it ({command} --replace) or pick another name"
    if replace and not taken:
        return f"no {what} named {name!r} to edit"
    return None


def check_spec(
    spec: ResourceSpec,
    capacity: Machine,
    customs: Sequence[CustomResource],
    pools: Sequence[Pool],
    *,
    specs: Sequence[ResourceSpec] = (),
    replace: bool = False,
) -> list[FieldError]:
    """Every reason ``spec`` cannot be sold here, bounded by the onboarded ``capacity``
    (``specs``: those defined already; ``replace``: ``spec`` edits the one of its name)."""
    out: list[FieldError] = []

    def bad(field: str, message: str) -> None:
        out.append(FieldError(field, message))

    if (why := name_problem(spec.name, "spec")) or (
        why := _existing(spec.name, (s.name for s in specs), "spec", replace, "spec add")
    ):
        bad("name", why)
    elif not replace and len(specs) >= MAX_SPECS:
        bad("name", f"{len(specs)} specs defined already: at most {MAX_SPECS}")
    if capacity.cpu_cores <= 0:
        bad(
            "capacity",
            "this machine is not onboarded: the onboarded capacity bounds every spec "
            "(`nunet-tui onboard` first)",
        )
        return out
    if not 1 <= spec.cpu_cores <= capacity.cpu_cores:
        bad(
            "cpu_cores",
            f"{spec.cpu_cores} CPU cores: give 1 to {capacity.cpu_cores} (the onboarded capacity)",
        )
    if not 1 <= spec.ram_mb <= capacity.memory_mb:
        bad("ram_mb", f"{spec.ram_mb} MB RAM: give 1 to {capacity.memory_mb} MB (onboarded)")
    if not 0 <= spec.disk_mb <= capacity.disk_mb:
        bad("disk_mb", f"{spec.disk_mb} MB disk: give 0 to {capacity.disk_mb} MB (free disk)")
    _check_spec_gpus(spec, capacity, customs, bad)
    if not 0 <= spec.price_units_hour <= MAX_PRICE_UNITS_HOUR:
        bad(
            "price_units_hour",
            f"price of {spec.price_units_hour} base units/h: give 0 to "
            f"{MAX_PRICE_UNITS_HOUR} (1,000,000 NTX/h)",
        )
    if not 0 <= spec.min_charge_units <= MAX_PRICE_UNITS_HOUR:
        bad(
            "min_charge_units",
            f"minimum charge of {spec.min_charge_units} base units: give 0 to "
            f"{MAX_PRICE_UNITS_HOUR}",
        )
    if spec.pool != DEFAULT_POOL and spec.pool not in {p.name for p in pools}:
        known = ", ".join([DEFAULT_POOL, *(p.name for p in pools)])
        bad("pool", f"no pool named {spec.pool!r}: one of {known} (`resource pool add` first)")
    return out


def _check_spec_gpus(
    spec: ResourceSpec,
    capacity: Machine,
    customs: Sequence[CustomResource],
    report: Callable[[str, str], None],
) -> None:
    if spec.gpu_resource is None:
        have = len(capacity.gpus)
        if not 0 <= spec.gpus <= have:
            report("gpus", f"{spec.gpus} GPUs: give 0 to {have} (onboarded GPUs)")
        return
    custom = next((c for c in customs if c.name == spec.gpu_resource), None)
    if custom is None:
        known = ", ".join(c.name for c in customs) or "none defined"
        report("gpu_resource", f"no custom resource named {spec.gpu_resource!r} ({known})")
        return
    if not 1 <= spec.gpus <= custom.count:
        report("gpus", f"{spec.gpus} x {custom.name}: give 1 to {custom.count}")
    if custom.from_gpus is not None:
        onboarded = {gpu.index for gpu in capacity.gpus}
        missing = sorted(set(custom.from_gpus) - onboarded)
        if missing:
            report(
                "gpu_resource",
                f"{custom.name} regroups GPU {', '.join(map(str, missing))}, "
                "which the onboarding does not offer",
            )


def check_custom(
    custom: CustomResource,
    system: Machine,
    customs: Sequence[CustomResource] = (),
    *,
    replace: bool = False,
) -> list[FieldError]:
    """Every reason ``custom`` cannot be declared (``system``: what detection found)."""
    out: list[FieldError] = []
    if (why := name_problem(custom.name, "custom resource")) or (
        why := _existing(
            custom.name, (c.name for c in customs), "custom resource", replace, "custom add"
        )
    ):
        out.append(FieldError("name", why))
    elif not replace and len(customs) >= MAX_CUSTOMS:
        out.append(FieldError("name", f"{len(customs)} custom resources: at most {MAX_CUSTOMS}"))
    if custom.kind not in ("gpu", "accelerator"):
        out.append(FieldError("kind", f"unknown kind {custom.kind!r}: gpu or accelerator"))
    if custom.from_gpus is not None:
        detected = {gpu.index for gpu in system.gpus}
        unknown = sorted(set(custom.from_gpus) - detected)
        if not custom.from_gpus:
            out.append(FieldError("from_gpus", "name at least one detected GPU to regroup"))
        elif unknown:
            shown = ", ".join(map(str, sorted(detected))) or "none"
            out.append(
                FieldError(
                    "from_gpus",
                    f"no detected GPU {', '.join(map(str, unknown))} (detected: {shown})",
                )
            )
        elif len(set(custom.from_gpus)) != len(custom.from_gpus):
            out.append(FieldError("from_gpus", "a GPU is named twice"))
        elif custom.count != len(custom.from_gpus):
            out.append(
                FieldError(
                    "count",
                    f"count {custom.count} but {len(custom.from_gpus)} GPUs regrouped: "
                    "they must agree",
                )
            )
    elif not 1 <= custom.count <= MAX_CUSTOM_COUNT:
        out.append(FieldError("count", f"count {custom.count}: give 1 to {MAX_CUSTOM_COUNT}"))
    if not 0 <= custom.vram_mb <= MAX_VRAM_MB:
        out.append(FieldError("vram_mb", f"{custom.vram_mb} MB VRAM: give 0 to {MAX_VRAM_MB}"))
    if len(custom.model) > MAX_MODEL_CHARS or not custom.model.isprintable():
        out.append(FieldError("model", f"the model is printable text of at most {MAX_MODEL_CHARS}"))
    return out


def check_group(
    group: Group,
    groups: Sequence[Group] = (),
    pools: Sequence[Pool] = (),
    *,
    replace: bool = False,
) -> list[FieldError]:
    out: list[FieldError] = []
    if (why := name_problem(group.name, "group")) or (
        why := _existing(group.name, (g.name for g in groups), "group", replace, "group add")
    ):
        out.append(FieldError("name", why))
    elif not replace and len(groups) >= MAX_GROUPS:
        out.append(FieldError("name", f"{len(groups)} groups: at most {MAX_GROUPS}"))
    out += _member_problems(group.members, MAX_GROUP_MEMBERS)
    if not out:
        after = [g for g in groups if g.name != group.name] + [group]
        out += _advert_room(pools, after)
    return out


def check_pool(
    pool: Pool,
    groups: Sequence[Group] = (),
    pools: Sequence[Pool] = (),
    *,
    replace: bool = False,
) -> list[FieldError]:
    out: list[FieldError] = []
    if pool.name == DEFAULT_POOL:
        out.append(FieldError("name", f"the {DEFAULT_POOL} pool is open to everyone: pick a name"))
    elif (why := name_problem(pool.name, "pool")) or (
        why := _existing(pool.name, (p.name for p in pools), "pool", replace, "pool add")
    ):
        out.append(FieldError("name", why))
    elif not replace and len(pools) >= MAX_POOLS:
        out.append(FieldError("name", f"{len(pools)} pools: at most {MAX_POOLS}"))
    out += _member_problems(pool.members, MAX_ADVERTISED_MEMBERS)
    known = {g.name for g in groups}
    unknown = [name for name in pool.groups if name not in known]
    if unknown:
        out.append(
            FieldError("groups", f"no group named {', '.join(map(repr, unknown))} (group add)")
        )
    elif len(set(pool.groups)) != len(pool.groups):
        out.append(FieldError("groups", "a group is named twice"))
    if not pool.members and not pool.groups:
        out.append(FieldError("members", "a pool lists at least one member or group"))
    if not out:
        after = [p for p in pools if p.name != pool.name] + [pool]
        out += _advert_room(after, groups)
    return out


def _member_problems(members: Sequence[str], limit: int) -> list[FieldError]:
    if len(members) > limit:
        return [FieldError("members", f"{len(members)} members: at most {limit}")]
    out = [FieldError("members", why) for m in members if (why := peer_id_problem(m))]
    if not out and len(set(members)) != len(members):
        out.append(FieldError("members", "a member is listed twice"))
    return out


def _advert_room(pools: Sequence[Pool], groups: Sequence[Group]) -> list[FieldError]:
    total = sum(len(members_of(pool, groups)) for pool in pools)
    if total > MAX_ADVERTISED_MEMBERS:
        return [
            FieldError(
                "members",
                f"the pools would list {total} members in the advert: at most "
                f"{MAX_ADVERTISED_MEMBERS} in all",
            )
        ]
    return []


def members_of(pool: Pool, groups: Sequence[Group]) -> tuple[str, ...]:
    """A pool's members with its groups' filled in, each once, in order."""
    by_name = {g.name: g for g in groups}
    seen: dict[str, None] = dict.fromkeys(pool.members)
    for name in pool.groups:
        group = by_name.get(name)
        if group is not None:
            seen.update(dict.fromkeys(group.members))
    return tuple(seen)


def expanded_pools(pools: Sequence[Pool], groups: Sequence[Group]) -> tuple[Pool, ...]:
    """The pools as the advert carries them: members filled in from the groups (whose names
    stay, so a consumer outside reads "reserved for group X")."""
    return tuple(Pool(name=p.name, members=members_of(p, groups), groups=p.groups) for p in pools)


def reserved_for(pool: Pool) -> str:
    """How a spec in ``pool`` reads to a consumer outside it."""
    return f"reserved for group {', '.join(pool.groups) or pool.name}"


def may_use(pool_name: str, pools: Sequence[Pool], consumer: str | None) -> str | None:
    """Why ``consumer`` may not use a spec of ``pool_name`` (None: it may). ``pools`` have
    their members filled in; a pool not listed admits nobody."""
    if pool_name == DEFAULT_POOL:
        return None
    pool = next((p for p in pools if p.name == pool_name), None)
    if pool is None:
        return f"reserved for pool {pool_name}"
    if consumer is not None and consumer in pool.members:
        return None
    return reserved_for(pool)


# --- the defaults ---------------------------------------------------------------------------


def default_specs(price_units: Mapping[str, int], gpus: int = 0) -> tuple[ResourceSpec, ...]:
    """NuNet's Low/Moderate/High tiers as specs, for a provider that defines none: each tier's
    maximums (what the executor enforces) at its ``[jobs] prices`` price, in base units; a
    tier without a price is not sold. ``gpus``: a machine that onboarded GPUs sells one with
    each (today's tiers priced GPU jobs the same)."""
    out = []
    for tier in TIERS:
        price = price_units.get(tier)
        if price is None or isinstance(price, bool) or not isinstance(price, int):
            continue
        if not 0 <= price <= MAX_PRICE_UNITS_HOUR:
            continue
        need = estimate_resource(tier, "cpu")
        out.append(
            ResourceSpec(
                name=tier,
                cpu_cores=need.max_cores,
                ram_mb=need.max_ram_mb,
                gpus=1 if gpus > 0 else 0,
                price_units_hour=price,
            )
        )
    return tuple(out)


# --- the file -------------------------------------------------------------------------------


class ResourceBook(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ``resources.json`` holds."""

    v: int = 1
    customs: tuple[CustomResource, ...] = ()
    specs: tuple[ResourceSpec, ...] = ()
    pools: tuple[Pool, ...] = ()
    groups: tuple[Group, ...] = ()


def book_problems(book: ResourceBook) -> list[str]:
    """What is wrong with a book read from disk, before capacity (a hand edit's mistakes)."""
    out: list[str] = []
    if book.v != 1:
        out.append(f"version {book.v}: this version reads 1")
    for what, items, limit in (
        ("specs", book.specs, MAX_SPECS),
        ("custom resources", book.customs, MAX_CUSTOMS),
        ("pools", book.pools, MAX_POOLS),
        ("groups", book.groups, MAX_GROUPS),
    ):
        if len(items) > limit:
            out.append(f"{len(items)} {what}: at most {limit}")
        names = [item.name for item in items]
        if len(set(names)) != len(names):
            out.append(f"two {what} share a name")
        out += [why for name in names if (why := name_problem(name, what.rstrip("s")))]
    for pool in book.pools:
        out += [f"pool {pool.name}: {p.message}" for p in check_pool(pool, book.groups)]
    for group in book.groups:
        out += [f"group {group.name}: {p.message}" for p in _member_problems(group.members, 128)]
    out += [p.message for p in _advert_room(book.pools, book.groups)]
    pools = {p.name for p in book.pools} | {DEFAULT_POOL}
    customs = {c.name for c in book.customs}
    for spec in book.specs:
        if spec.pool not in pools:
            out.append(f"spec {spec.name}: no pool named {spec.pool!r}")
        if spec.gpu_resource is not None and spec.gpu_resource not in customs:
            out.append(f"spec {spec.name}: no custom resource named {spec.gpu_resource!r}")
        if not 0 <= spec.price_units_hour <= MAX_PRICE_UNITS_HOUR:
            out.append(f"spec {spec.name}: price out of range")
        if not 0 <= spec.min_charge_units <= MAX_PRICE_UNITS_HOUR:
            out.append(f"spec {spec.name}: minimum charge out of range")
    return out


def in_force(
    book: ResourceBook, price_units: Mapping[str, int], gpus: int
) -> tuple[tuple[ResourceSpec, ...], bool]:
    """The specs sold now and whether they are the defaults (the provider defined none)."""
    if book.specs:
        return book.specs, False
    return default_specs(price_units, gpus), True


def within(spec: ResourceSpec, capacity: Machine) -> bool:
    """Whether a defined spec still fits the onboarded capacity (it may have shrunk since)."""
    return (
        spec.cpu_cores <= capacity.cpu_cores
        and spec.ram_mb <= capacity.memory_mb
        and (spec.gpu_resource is not None or spec.gpus <= len(capacity.gpus))
    )


def sold(
    book: ResourceBook, onboarded: Machine
) -> tuple[tuple[ResourceSpec, ...], tuple[Pool, ...]]:
    """What the advert carries and the provider's admission judges by: the defined specs
    that still fit the onboarded capacity (it may have shrunk since), and the pools they use
    with their groups' members filled in. Empty: none defined (the tiers' prices stand)."""
    specs = tuple(s for s in book.specs if within(s, onboarded))
    dropped = [s.name for s in book.specs if s not in specs]
    if dropped:
        log.warning("specs %s exceed the onboarded capacity: not sold", ", ".join(dropped))
    used = {s.pool for s in specs}
    pools = expanded_pools([p for p in book.pools if p.name in used], book.groups)
    return specs, pools
