"""Who may run a job, and what it costs: one set of rules for the consumer and the provider.

The consumer's matcher judges a provider by what its advert and heartbeats say; the provider
judges an offer by the same figures about itself (what it advertises and beats). Both call
``judge`` with a ``PeerResources``, so a provider the matcher keeps is one that quotes, and one
it excludes refuses with the same reasons. ``job_cost`` is the one price formula: the matcher's
ranking, the provider's quote, the submit form's "who can run it" and the metered cost all use it.

A tier the provider has not priced is not offered (never quoted at 0 NTX). A provider that
takes payments never quotes a job at 0 NTX either: the escrow would be skipped and the job run
unpaid, so that is a refusal with its reason.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from engine.api import PeerResources
from engine.jobs.spec import JobSpec
from engine.jobs.tiers import estimate_resource

# A GPU job never runs in the process executor: it has no GPU isolation or passthrough.
_CPU_ONLY_EXECUTORS = frozenset({"process"})


def price_of(prices: Mapping[str, float], tier: str) -> float | None:
    """A provider's NTX per hour for ``tier`` (None: it does not offer the tier)."""
    price = prices.get(tier.lower())
    if price is None or isinstance(price, bool) or not isinstance(price, int | float):
        return None
    return float(price) if price >= 0 else None


def job_cost(price_ntx_hour: float, minutes: float) -> float:
    """NTX for ``minutes`` at ``price_ntx_hour``, rounded to the 6 decimals escrows carry."""
    return round(price_ntx_hour * max(0.0, minutes) / 60, 6)


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
        return cls(
            spec,
            need.min_ram_mb,
            need.min_cpu_mhz,
            need.min_vram_mb,
            frozenset(accepted) if accepted is not None else None,
        )


@dataclass(frozen=True)
class Verdict:
    reasons: tuple[str, ...]
    price_ntx_hour: float | None  # None: the tier is not offered
    cost_ntx: float  # the price for the expected time (0.0 when not offered)

    @property
    def ok(self) -> bool:
        return not self.reasons

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


def judge(
    needs: Needs,
    res: PeerResources,
    *,
    takes_payments: bool = False,
    check_busy: bool = True,
) -> Verdict:
    """Every reason ``res`` cannot run the job (empty: it can), and its price for it.

    ``takes_payments``: the provider is paid through escrow (the provider knows; a consumer
    judging an advert does not, and its figures say False). ``check_busy``: add the slot check
    when nothing else is wrong (the matcher may use its own busy hook instead)."""
    spec = needs.spec
    tier = spec.tier
    price = price_of(res.prices, tier)
    cost = job_cost(price, spec.expected_minutes) if price is not None else 0.0
    budget = spec.budget_ntx
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
        and price is not None
        and (budget is None or cost <= budget)
        and not (takes_payments and cost <= 0)
        and (res.shell or not spec.shell)
    )
    reasons: list[str] = []
    if not fits:
        reasons = _resource_reasons(needs, res)
        if price is None:
            reasons.append(f"offers no price for the {tier} tier")
        elif budget is not None and cost > budget:
            reasons.append(
                f"price above budget: {price:g} NTX/h x {spec.expected_minutes:g} min = "
                f"{cost:.3f} NTX > {budget:g} NTX"
            )
        elif takes_payments and cost <= 0:
            reasons.append(
                f"a paid job is never quoted at 0 NTX: the {tier} tier costs {price:g} NTX/h "
                f"here, {cost:g} NTX for {spec.expected_minutes:g} min"
            )
        if spec.shell and not res.shell:
            reasons.append("shells are turned off there (the job asks for shell = true)")
    if gpu:
        _gpu_reasons(res, spec.gpu_vendor, needs.min_vram_mb, reasons)
    if check_busy and not reasons and (why := busy_reason(res)):
        reasons.append(why)
    return Verdict(tuple(reasons), price, cost)


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
        reasons.append(f"not enough RAM: {res.memory_mb} MB, the {tier} tier needs {min_ram} MB")
    elif res.free_memory_mb is not None and res.free_memory_mb < min_ram:
        reasons.append(f"busy: {res.free_memory_mb} MB RAM free now, needs {min_ram} MB")
    if res.cpu_mhz < min_mhz:
        reasons.append(f"not enough CPU: {res.cpu_mhz} MHz, the {tier} tier needs {min_mhz} MHz")
    return reasons


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
