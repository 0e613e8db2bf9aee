"""One set of admission rules: the consumer's matcher and the provider's admission judge the
same figures the same way, with the same reasons, and price a job with the same formula."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from nacl.signing import SigningKey

from engine import api
from engine.config import JobSettings
from engine.domain import wire
from engine.domain.admission import Needs, judge, price_of, units_for
from engine.domain.matching import match
from engine.domain.peer_info import PeerInfo
from engine.domain.ratelimit import StreamLimiter
from engine.domain.spec import JobSpec
from engine.errors import EngineError
from engine.identity import Identity
from engine.jobs import protocol as p
from engine.jobs.consumer import ConsumerJobs
from engine.jobs.provider import ProviderJobs, QuoteBook
from engine.resources.machine import MachineFacts
from tests.fakes.context import make_context, onboard
from tests.fakes.escrows import FakeEscrows
from tests.fakes.executor import FakeIdleExecutor
from tests.fakes.network import FakeNetwork, FakePeerLink

ALL = ("pytorch", "tensorflow", "scikit-learn")
PRICES = {"low": 1.0, "moderate": 2.5, "high": 6.0}  # as an advert carries them
PRICE_UNITS = {"low": 1_000_000, "moderate": 2_500_000, "high": 6_000_000}


def job(**fields: Any) -> JobSpec:
    values: dict[str, Any] = {"framework": "scikit-learn", "script_url": "https://h/x.py"}
    values.update(fields)
    return JobSpec(**values)


def provider(
    tmp_path: Path, memory_mb: int, cpu_mhz: int, *, payments: bool = False, **kw: Any
) -> ProviderJobs:
    ctx, _ = make_context(tmp_path, payments=payments, **kw)
    onboard(ctx, memory_mb, cpu_mhz)
    escrows = FakeEscrows()
    return ProviderJobs(
        ctx,
        {"process": FakeIdleExecutor()},  # type: ignore[dict-item]
        network=FakeNetwork,
        escrows=(lambda: escrows) if payments else None,
        machine=MachineFacts(ctx),
    )


def as_peer(res: api.PeerResources, peer_id: str = "p1") -> api.Peer:
    return api.Peer(peer_id=peer_id, resources=res)


def test_the_provider_and_the_matcher_give_the_same_verdict_on_the_same_figures(
    tmp_path: Path,
) -> None:
    jobs = provider(tmp_path, memory_mb=4096, cpu_mhz=3000)
    own = jobs.own_resources()  # what it advertises and beats about itself
    for spec in (
        job(),  # fits
        job(tier="moderate"),  # 4096 MB is enough, 3000 MHz too
        job(tier="high"),  # neither
        job(framework="pytorch", device="gpu"),  # no GPU, and process runs no GPU job
        job(budget_ntx=0.5, expected_minutes=60),  # 1 NTX for the hour
    ):
        verdict = jobs._admission(spec)
        matched = match(spec, [as_peer(own)])
        excluded = dict(matched.excluded)
        assert verdict.ok == bool(matched.candidates), spec
        assert excluded.get("p1", "") == verdict.reason, spec
        if verdict.ok:
            assert matched.candidates[0].estimate_units == verdict.estimate_units


def test_a_1000_mhz_provider_is_excluded_for_high_by_both(tmp_path: Path) -> None:
    jobs = provider(tmp_path, memory_mb=16384, cpu_mhz=1000)
    high = job(tier="high")
    reason = "not enough CPU: 1000 MHz, the high tier needs 8000 MHz"
    assert jobs._refusal_reason(high) == reason
    assert dict(match(high, [as_peer(jobs.own_resources())]).excluded) == {"p1": reason}
    quote = jobs._offer(p.Offer(job_id="0123456789ab", spec=high, consumer="c1"), "c1", b"")
    assert quote == p.Refusal(job_id="0123456789ab", reason=reason)
    assert len(jobs._quotes) == 0  # nothing held for a refused offer


def test_an_unpriced_tier_is_refused_and_a_paid_job_is_never_quoted_at_zero(
    tmp_path: Path,
) -> None:
    unpriced = JobSettings(executors=["process"], prices={"low": 1.0})
    jobs = provider(tmp_path / "a", memory_mb=16384, cpu_mhz=5000, payments=True, jobs=unpriced)
    assert jobs._refusal_reason(job(tier="moderate")) == ("offers no price for the moderate tier")
    free = JobSettings(executors=["process"], prices={"low": 0.0})
    paid = provider(tmp_path / "b", memory_mb=16384, cpu_mhz=5000, payments=True, jobs=free)
    assert paid._refusal_reason(job()) == (
        "a paid job is never quoted at 0 NTX: the low tier costs 0 NTX/h here, "
        "0 NTX estimate for 10 min"
    )
    # Without payments a provider may work for free; an unpriced tier is still not offered.
    unpaid = provider(tmp_path / "c", memory_mb=16384, cpu_mhz=5000, jobs=free)
    assert unpaid._refusal_reason(job()) == ""
    assert unpaid._refusal_reason(job(tier="moderate")) == "offers no price for the moderate tier"


def test_one_price_formula() -> None:
    assert units_for(6_000_000, 30) == 3_000_000
    assert units_for(2_500_000, 90) == 3_750_000
    assert price_of(PRICE_UNITS, "High") == 6_000_000
    assert price_of({"low": -1}, "low") is None
    spec = job(tier="moderate", expected_minutes=90)
    res = api.PeerResources(cpu_mhz=8000, memory_mb=16384, price_units=PRICE_UNITS, frameworks=ALL)
    assert judge(Needs.of(spec), res).estimate_units == 3_750_000
    assert match(spec, [as_peer(res)]).best().estimate_units == 3_750_000


def _advert_info(peer_id: str, cpu_mhz: int) -> PeerInfo:
    advert = wire.Advert(
        peer_id=peer_id,
        channel="c",
        cpu_mhz=cpu_mhz,
        ram_mb=16384,
        prices=PRICES,
        executors=("process",),
        frameworks=ALL,
    )
    return PeerInfo(peer_id=peer_id, channel="c", advert=advert)


def test_a_hand_picked_unsuitable_peer_fails_with_the_reasons_before_any_offer(
    tmp_path: Path,
) -> None:
    ctx, _ = make_context(tmp_path)
    picked = Identity(SigningKey(b"\x09" * 32)).peer_id
    link = FakePeerLink(me=ctx.identity.peer_id, listed=[_advert_info(picked, 1000)])
    consumer = ConsumerJobs(ctx, network=lambda: FakeNetwork(link))
    command = api.SubmitJob(spec=job(tier="high"), peer_id=picked)
    with pytest.raises(EngineError) as info:
        trio.run(consumer.submit, command)
    assert info.value.code == "unsuitable"
    assert "not enough CPU: 1000 MHz, the high tier needs 8000 MHz" in info.value.message
    assert picked in info.value.message
    assert link.opened == []  # no stream, so no offer, was ever sent


def test_quotes_are_bounded_per_peer_and_in_all_and_dropped_at_expiry(tmp_path: Path) -> None:
    jobs = provider(tmp_path, memory_mb=16384, cpu_mhz=5000)
    jobs._quotes = QuoteBook(per_peer=2, total=3)
    jobs._offers.burst = jobs._offers.rate = 1000.0  # the rate limit is not the subject here

    def offer(job_id: str, consumer: str) -> p.Quote | p.Refusal:
        message = p.Offer(job_id=job_id, spec=job(), consumer=consumer)
        return jobs._offer(message, consumer, b"offer")

    assert isinstance(offer("000000000001", "c1"), p.Quote)
    assert isinstance(offer("000000000002", "c1"), p.Quote)
    third = offer("000000000003", "c1")
    assert isinstance(third, p.Refusal) and "2 unconfirmed quotes" in third.reason
    assert isinstance(offer("000000000004", "c2"), p.Quote)
    full = offer("000000000005", "c3")
    assert isinstance(full, p.Refusal) and "too many unconfirmed quotes" in full.reason
    held = jobs._quotes.get("000000000001")
    assert held is not None
    assert jobs._quotes.evict_expired(held.quote.expires_at + 1) == 3
    assert len(jobs._quotes) == 0
    assert isinstance(offer("000000000006", "c3"), p.Quote)


def test_offers_are_rate_limited_per_peer(tmp_path: Path) -> None:
    jobs = provider(tmp_path, memory_mb=16384, cpu_mhz=5000)
    answers = [
        jobs._offer(
            p.Offer(job_id=f"{i:012x}", spec=JobSpec(framework="nope"), consumer="c1"), "c1", b""
        )
        for i in range(50)
    ]
    limited = [a for a in answers if isinstance(a, p.Refusal) and "too many offers" in a.reason]
    assert 30 <= len(limited) <= 40  # a burst of 10 and 2 a second, then refused
    other = jobs._offer(
        p.Offer(job_id="f" * 12, spec=JobSpec(framework="nope"), consumer="c2"), "c2", b""
    )
    assert isinstance(other, p.Refusal) and "too many offers" not in other.reason


def test_free_text_on_the_wire_is_bounded() -> None:
    ident = Identity(SigningKey(b"\x05" * 32))
    long_reason = msgspec.msgpack.encode(
        {"t": "refusal", "v": 1, "job_id": "0" * 12, "reason": "x" * 5000}
    )
    with pytest.raises(p.ProtocolError, match="reason"):
        p.decode(wire.seal_payload(ident, "job", long_reason), ident.peer_id)
    named = {"framework": "scikit-learn", "name": "n" * 500}
    offer = msgspec.msgpack.encode(
        {"t": "offer", "v": 1, "job_id": "0" * 12, "spec": named, "consumer": ident.peer_id}
    )
    with pytest.raises(p.ProtocolError, match="job name of 500 characters"):
        p.decode(wire.seal_payload(ident, "job", offer), ident.peer_id)
    assert len(p.refusal("0" * 12, "y" * 5000).reason) == p.MAX_REASON_CHARS


def test_stream_limiter_caps_per_peer_and_in_all() -> None:
    limiter = StreamLimiter(per_peer=2, total=3)
    assert limiter.acquire("a") and limiter.acquire("a")
    assert not limiter.acquire("a")
    assert limiter.acquire("b")
    assert not limiter.acquire("c")  # the total
    limiter.release("a")
    assert limiter.acquire("c")
    assert limiter.held() == 3 and limiter.held("a") == 1 and limiter.refused == 2
