"""Which providers can run a job, and why the others cannot.

``match`` checks every known peer against the job's needs with the admission rules the
provider applies to itself (engine/domain/admission.py: the tier's minimum resources, the GPU
and vendor, the framework, the executors, the price against the budget, whether the peer is
busy, the resource spec: named, or the cheapest that fits the tier among those the consumer
may use) and keeps every reason a peer fails, not only the first: a consumer looking at "no
matching peer" should learn what to change. The rest are ranked by the cost for the expected
time, then by free capacity, then by latency; ``standing`` comes before all of these (issue 21:
providers that completed jobs with us, then those we talked to, then those only heard of
through relayed adverts, which a thousand fake identities can fill with cheaper offers).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from engine.domain.admission import Needs, SpecOffer, busy_reason, judge
from engine.domain.offers import Peer, ResourceSpec
from engine.domain.spec import JobSpec
from engine.errors import EngineError

NO_ADVERT = "no advert yet (resources unknown)"
BusyCheck = Callable[[Peer], str | None]  # a reason when the peer cannot take a job now
LatencyOf = Callable[[Peer], float | None]
StandingOf = Callable[[Peer], int]  # lower ranks first


def verified_first(peer: Peer) -> int:
    return 0 if peer.verified else 1


@dataclass(frozen=True)
class Candidate:
    peer: Peer
    free_memory_mb: int
    latency_ms: float | None
    # Issue 12: the spec the job would run under there, its estimate (the provider's price
    # for the expected time) and lock (base units), and each of the provider's specs with why
    # this job cannot use it ("reserved for group X").
    resource: ResourceSpec | None = None
    estimate_units: int = 0
    lock_units: int = 0
    offers: tuple[SpecOffer, ...] = ()

    @property
    def peer_id(self) -> str:
        return self.peer.peer_id

    @property
    def price_units_hour(self) -> int:
        """The spec's price per machine-hour, base units."""
        return self.resource.price_units_hour if self.resource is not None else 0


class NoMatch(EngineError):
    def __init__(self, excluded: Sequence[tuple[str, str]]) -> None:
        if not excluded:
            message = "no matching peer: no provider is known on this channel yet"
        else:
            shown = [f"{peer_id[-12:]}: {reason}" for peer_id, reason in excluded[:10]]
            more = f"; and {len(excluded) - 10} more" if len(excluded) > 10 else ""
            message = "no matching peer: " + "; ".join(shown) + more
        super().__init__("no_match", message)
        self.excluded = list(excluded)


@dataclass
class MatchResult:
    candidates: list[Candidate] = field(default_factory=list)
    excluded: list[tuple[str, str]] = field(default_factory=list)  # (peer_id, reasons)

    def best(self) -> Candidate:
        """The top candidate, or NoMatch listing why each peer was excluded."""
        if not self.candidates:
            raise NoMatch(self.excluded)
        return self.candidates[0]


def default_busy(peer: Peer) -> str | None:
    """Busy by its heartbeat: no free slot (the rule the provider applies to itself)."""
    return busy_reason(peer.resources) if peer.resources is not None else None


def _peer_latency(peer: Peer) -> float | None:
    return peer.latency_ms


def match(
    spec: JobSpec,
    peers: Sequence[Peer],
    *,
    busy: BusyCheck | None = default_busy,
    latency: LatencyOf | None = None,
    executors: Collection[str] | None = None,
    consumer: str | None = None,
    standing: StandingOf | None = verified_first,
) -> MatchResult:
    """Filter and rank ``peers`` for ``spec`` by the admission rules (engine/domain/admission.py).
    ``executors``: the ones the consumer accepts (None: any); ``busy`` and ``latency`` default
    to what heartbeats and pings reported; ``consumer``: who asks (this node's peer id: the
    specs a pool reserves for others are shown as such and never picked)."""
    needs = Needs.of(spec, executors)
    latency_of = latency or _peer_latency
    result = MatchResult()
    ranked: list[tuple[tuple[int, int, float, float, str], Candidate]] = []
    for peer in peers:
        res = peer.resources
        if res is None:
            result.excluded.append((peer.peer_id, NO_ADVERT))
            continue
        verdict = judge(needs, res, check_busy=False, consumer=consumer)
        reasons = list(verdict.reasons)
        if busy is not None and not reasons and (why := busy(peer)):
            reasons.append(why)
        if reasons:
            result.excluded.append((peer.peer_id, "; ".join(reasons)))
            continue
        free = res.free_memory_mb if res.free_memory_mb is not None else res.memory_mb
        lat = latency_of(peer)
        ranked.append(
            (
                (
                    standing(peer) if standing is not None else 0,
                    verdict.estimate_units,
                    -free / needs.min_ram_mb,
                    lat if lat is not None else 1e12,
                    peer.peer_id,
                ),
                Candidate(
                    peer,
                    free,
                    lat,
                    verdict.resource,
                    verdict.estimate_units,
                    verdict.lock_units,
                    verdict.offers,
                ),
            )
        )
    ranked.sort(key=lambda item: item[0])
    result.candidates = [candidate for _, candidate in ranked]
    return result
