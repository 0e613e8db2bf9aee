"""Who may run a job, and what it costs: one set of rules for the consumer and the provider.

The consumer's matcher judges a provider by what its advert and heartbeats say; the provider
judges an offer by the same figures about itself (what it advertises and beats). Both call
``judge`` with a ``PeerResources``, so a provider the matcher keeps is one that quotes, and one
it excludes refuses with the same reasons. ``billing.metered`` is the one price product:
``units_for`` gives the quote's estimate and lock from it and the receipt's charge is it. Every
figure here is an integer of NTX base units.

What is sold is a provider's resource specs (issue 12, engine/domain/specs.py): a job
names one, or its tier maps to the cheapest spec that fits it and that the consumer may use
(a spec in a pool is for the pool's members). A provider that defines none sells NuNet's
tiers at its ``[jobs] prices``. The quote is the spec's price: ``quote_units`` gives the
estimate (expected time) and the lock (maximum time), in base units, floored.

A tier the provider has not priced is not offered (never quoted at 0 NTX). A provider that
takes payments never quotes a job at 0 NTX either: the escrow would be skipped and the job run
unpaid, so that is a refusal with its reason.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from engine.domain.offers import PeerResources, ResourceSpec
from engine.domain.spec import JobSpec
from engine.domain.specs import may_use
from engine.domain.tiers import estimate_resource
from oracle_client import billing
from oracle_client.ntx import ESTIMATE, LOCKED, format_ntx, format_rate, units_of

# A GPU job never runs in the process executor: it has no GPU isolation or passthrough.
_CPU_ONLY_EXECUTORS = frozenset({"process"})


def price_of(price_units: Mapping[str, int], tier: str) -> int | None:
    """A provider's price per machine-hour for ``tier``, base units (None: not offered)."""
    price = price_units.get(tier.lower())
    if price is None or isinstance(price, bool) or not isinstance(price, int):
        return None
    return price if price >= 0 else None


def usable_executors(device: str, offered: Collection[str]) -> list[str]:
    """The offered executors that can run a ``device`` job, in the provider's order."""
    if device == "gpu":
        return [name for name in offered if name not in _CPU_ONLY_EXECUTORS]
    return list(offered)


def busy_reason(res: PeerResources) -> str | None:
    """Busy by its own count: no free slot (one job at a time unless it says more)."""
    if res.running_jobs is None:
        return None
    slots = max(res.slots, 1)
    if res.running_jobs >= slots:
        return f"busy: {res.running_jobs} job(s) running, {slots} slot(s)"
    return None


@dataclass(frozen=True)
class Needs:
    """What a job needs, worked out once per spec (the matcher judges thousands of peers)."""

    spec: JobSpec
    min_ram_mb: int
    min_cpu_mhz: int
    min_vram_mb: int
    accepted: frozenset[str] | None  # the executors the consumer accepts (None: any)

    @classmethod
    def of(cls, spec: JobSpec, accepted: Collection[str] | None = None) -> Needs:
        need = estimate_resource(spec.tier, spec.device)
        # A step's replicas run at once on the one provider, each with the tier's needs.
        replicas = spec.most_replicas()
        return cls(
            spec,
            need.min_ram_mb * replicas,
            need.min_cpu_mhz * replicas,
            need.min_vram_mb,
            frozenset(accepted) if accepted is not None else None,
        )


@dataclass(frozen=True)
class SpecOffer:
    """One of a provider's specs as this job sees it: ``note`` says why it cannot be used
    ("" when it can): "reserved for group X", or too small for the job's tier."""

    spec: ResourceSpec
    note: str = ""


@dataclass(frozen=True)
class Verdict:
    reasons: tuple[str, ...]
    # Issue 12: the spec the job runs under (None: none it may use), its estimate (the price
    # for the expected time) and lock (base units), and every spec of the provider with why it
    # is not usable (matching shows them).
    resource: ResourceSpec | None = None
    estimate_units: int = 0
    lock_units: int = 0
    offers: tuple[SpecOffer, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.reasons

    @property
    def price_units_hour(self) -> int | None:
        """The price per machine-hour the job would pay (None: no spec it may use)."""
        return self.resource.price_units_hour if self.resource is not None else None

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


def max_minutes(spec: JobSpec) -> float:
    """The time the lock covers: the job's maximum, at least its expected time."""
    if spec.max_minutes is None:
        return spec.expected_minutes
    return max(spec.max_minutes, spec.expected_minutes)


def units_for(price_units_hour: int, minutes: float) -> int:
    """Base units for ``minutes`` of machine time: integer math, floored (billing's rule)."""
    return billing.metered(price_units_hour, round(max(0.0, minutes) * 60_000))


def quote_units(resource: ResourceSpec, spec: JobSpec, replicas: int = 1) -> tuple[int, int]:
    """(estimate, lock): price x expected time x replicas, and price x maximum time x replicas,
    never less than the estimate; the spec's minimum charge is the least either can be."""
    floor = resource.min_charge_units
    estimate = max(floor, units_for(resource.price_units_hour, spec.expected_minutes)) * replicas
    lock = max(floor, units_for(resource.price_units_hour, max_minutes(spec))) * replicas
    return estimate, max(lock, estimate)


def budget_units(spec: JobSpec) -> int | None:
    # The spec's budget is the figure its person typed (``budget_ntx``), read once here.
    return units_of(spec.budget_ntx) if spec.budget_ntx is not None else None


def _tier_spec(res: PeerResources, tier: str) -> ResourceSpec | None:
    """A provider without specs sells its tiers (NuNet's defaults): the tier's own price."""
    price = price_of(res.price_units, tier)
    if price is None:
        return None
    need = estimate_resource(tier, "cpu")
    return ResourceSpec(
        name=tier.lower(),
        cpu_cores=need.max_cores,
        ram_mb=need.max_ram_mb,
        gpus=1 if res.gpus else 0,
        price_units_hour=price,
    )


def fits_tier(resource: ResourceSpec, needs: Needs) -> str:
    """Why ``resource`` is too small for the job's tier ("" when it fits)."""
    tier = estimate_resource(needs.spec.tier, needs.spec.device)
    if resource.cpu_cores < tier.min_cores or resource.ram_mb < needs.min_ram_mb:
        return (
            f"too small for the {needs.spec.tier} tier (needs {tier.min_cores} cores, "
            f"{needs.min_ram_mb} MB)"
        )
    if needs.spec.device == "gpu" and resource.gpus < 1:
        return "has no GPU"
    return ""


def choose_spec(
    needs: Needs, res: PeerResources, consumer: str | None
) -> tuple[ResourceSpec | None, str, tuple[SpecOffer, ...]]:
    """The spec ``consumer`` gets for this job, or why none, and every spec with its note.

    Named (``resource_spec``): that one, if the consumer may use it. Else the job's tier maps
    to the cheapest spec that fits it and that the consumer may use; a spec reserved for a
    pool the consumer is not in is listed as "reserved for group X" and never picked. A
    provider without specs sells its tiers at their own prices (the tier's spec, or none)."""
    spec = needs.spec
    if not res.specs:
        tier = _tier_spec(res, spec.tier)
        offers: tuple[SpecOffer, ...] = (SpecOffer(tier),) if tier is not None else ()
        if spec.resource_spec is not None and spec.resource_spec != spec.tier.lower():
            return (
                None,
                f"has no resource spec named {spec.resource_spec!r}: it sells NuNet's tiers, "
                f"and a {spec.tier} job runs under the {spec.tier} one",
                offers,
            )
        if tier is None:
            return None, f"offers no price for the {spec.tier} tier", offers
        return tier, "", offers
    notes: list[SpecOffer] = []
    for resource in res.specs:
        note = may_use(resource.pool, res.pools, consumer) or ""
        if not note and spec.resource_spec is None:
            note = fits_tier(resource, needs)
        notes.append(SpecOffer(resource, note))
    offers = tuple(notes)
    if spec.resource_spec is not None:
        named = next((o for o in offers if o.spec.name == spec.resource_spec), None)
        if named is None:
            sold = ", ".join(o.spec.name for o in offers)
            return None, f"has no resource spec named {spec.resource_spec!r} (sells {sold})", offers
        if named.note:
            return None, f"spec {named.spec.name}: {named.note}", offers
        return named.spec, "", offers
    usable = [o.spec for o in offers if not o.note]
    if usable:
        best = min(usable, key=lambda r: (r.price_units_hour, r.min_charge_units, r.name))
        return best, "", offers
    reserved = [o for o in offers if o.note.startswith("reserved")]
    fitting = [o for o in reserved if not fits_tier(o.spec, needs)]
    if fitting:
        shown = ", ".join(f"{o.spec.name} {o.note}" for o in fitting[:4])
        return None, f"every spec that fits the {spec.tier} tier is reserved: {shown}", offers
    return None, f"no resource spec fits the {spec.tier} {spec.device} tier", offers


def judge(
    needs: Needs,
    res: PeerResources,
    *,
    takes_payments: bool = False,
    check_busy: bool = True,
    consumer: str | None = None,
) -> Verdict:
    """Every reason ``res`` cannot run the job (empty: it can), and its price for it.

    ``takes_payments``: the provider is paid through escrow (the provider knows; a consumer
    judging an advert does not, and its figures say False). ``check_busy``: add the slot check
    when nothing else is wrong (the matcher may use its own busy hook instead). ``consumer``:
    whose job it is (a pool's specs are for its members only); the provider passes the peer
    that signed the offer, never what the offer claims."""
    spec = needs.spec
    tier = spec.tier
    resource, unusable, offers = choose_spec(needs, res, consumer)
    estimate = lock = 0
    if resource is not None:
        estimate, lock = quote_units(resource, spec, spec.most_replicas())
    budget = budget_units(spec)
    free_ram = res.free_memory_mb
    gpu = spec.device == "gpu"
    # The common case first, without building any text: 10,000 adverts in a few ms.
    fits = (
        spec.framework in res.frameworks
        and (needs.accepted is None or not needs.accepted.isdisjoint(res.executors))
        and (not gpu or bool(usable_executors("gpu", res.executors)))
        and res.memory_mb >= needs.min_ram_mb
        and (free_ram is None or free_ram >= needs.min_ram_mb)
        and res.cpu_mhz >= needs.min_cpu_mhz
        and resource is not None
        and (budget is None or lock <= budget)
        and not (takes_payments and lock <= 0)
        and (res.shell or not spec.shell)
    )
    reasons: list[str] = []
    if not fits:
        reasons = _resource_reasons(needs, res)
        if resource is None:
            reasons.append(unusable)
        elif budget is not None and lock > budget:
            named = f"spec {resource.name}: " if res.specs else ""
            reasons.append(
                f"price above budget: {named}{format_rate(resource.price_units_hour)} x "
                f"{max_minutes(spec):g} min = {format_ntx(lock, LOCKED)} > "
                f"{format_ntx(budget)} budget"
            )
        elif takes_payments and lock <= 0:
            reasons.append(
                f"a paid job is never quoted at 0 NTX: the {tier} tier costs "
                f"{format_rate(resource.price_units_hour)} here, "
                f"{format_ntx(estimate, ESTIMATE)} for {spec.expected_minutes:g} min"
            )
        if spec.shell and not res.shell:
            reasons.append("shells are turned off there (the job asks for shell = true)")
    if gpu:
        _gpu_reasons(res, spec.gpu_vendor, needs.min_vram_mb, reasons)
    if check_busy and not reasons and (why := busy_reason(res)):
        reasons.append(why)
    return Verdict(tuple(reasons), resource, estimate, lock, offers)


def _resource_reasons(needs: Needs, res: PeerResources) -> list[str]:
    spec, accepted = needs.spec, needs.accepted
    tier, min_ram, min_mhz = spec.tier, needs.min_ram_mb, needs.min_cpu_mhz
    reasons: list[str] = []
    if spec.framework not in res.frameworks:
        reasons.append(f"framework {spec.framework} not offered")
    offered = ", ".join(res.executors) or "none"
    if accepted is not None and accepted.isdisjoint(res.executors):
        reasons.append(
            f"executor missing: offers {offered}, accepted {', '.join(sorted(accepted))}"
        )
    elif spec.device == "gpu" and not usable_executors("gpu", res.executors):
        reasons.append(f"no executor there can run a gpu job (offers {offered})")
    if res.memory_mb < min_ram:
        reasons.append(
            f"not enough RAM: {res.memory_mb} MB, the {tier} tier needs {min_ram} MB"
            + _times_replicas(spec)
        )
    elif res.free_memory_mb is not None and res.free_memory_mb < min_ram:
        reasons.append(f"busy: {res.free_memory_mb} MB RAM free now, needs {min_ram} MB")
    if res.cpu_mhz < min_mhz:
        reasons.append(
            f"not enough CPU: {res.cpu_mhz} MHz, the {tier} tier needs {min_mhz} MHz"
            + _times_replicas(spec)
        )
    return reasons


def _times_replicas(spec: JobSpec) -> str:
    replicas = spec.most_replicas()
    return f" ({replicas} replicas at once)" if replicas > 1 else ""


def _gpu_reasons(res: PeerResources, vendor: str | None, min_vram: int, out: list[str]) -> None:
    if not res.gpus:
        out.append("no GPU")
        return
    gpus = [g for g in res.gpus if vendor is None or g.vendor == vendor]
    if not gpus:
        have = ", ".join(sorted({g.vendor for g in res.gpus}))
        out.append(f"no {vendor} GPU (has {have})")
        return
    best = max(g.vram_mb for g in gpus)
    if best < min_vram:
        out.append(f"VRAM too small: {best} MB, needs {min_vram} MB")
    elif res.free_gpus == 0:
        out.append("busy: no free GPU")
    elif res.free_vram_mb is not None and res.free_vram_mb < min_vram:
        out.append(f"busy: {res.free_vram_mb} MB VRAM free now, needs {min_vram} MB")
