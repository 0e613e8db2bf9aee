"""Specs in the market (issue 12): the signed advert carries them, bounded (peers are hostile);
matching lists each provider's specs, shows one reserved for a pool as "reserved for group X"
and never picks it; a tier maps to the cheapest spec that fits; the quote is the chosen
spec's price (estimate for the expected time, lock for the maximum), checked by the
consumer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from nacl.signing import SigningKey

from engine import api
from engine.config import MachineSettings
from engine.domain import specs as rs
from engine.domain import wire
from engine.domain.admission import Needs, judge, quote_units
from engine.domain.matching import match
from engine.domain.peer_info import PeerInfo, to_api_peer
from engine.domain.spec import JobSpec, offer_spec, validate_spec
from engine.identity import Identity
from engine.jobs import protocol as p
from engine.jobs.consumer_base import quoted_units
from engine.jobs.provider import ProviderJobs
from engine.resources.machine import MachineFacts
from engine.resources.spec_file import ResourceFile
from tests.fakes.context import identity, make_context, onboard
from tests.fakes.executor import FakeIdleExecutor
from tests.fakes.network import FakeNetwork

ALL = ("pytorch", "tensorflow", "scikit-learn")
PROVIDER = Identity(SigningKey(b"\x01" * 32))
MEMBER = Identity(SigningKey(b"\x02" * 32)).peer_id
OUTSIDER = Identity(SigningKey(b"\x03" * 32)).peer_id

SMALL = api.ResourceSpec(name="small", cpu_cores=1, ram_mb=1024, price_units_hour=3_000_000)
BIG = api.ResourceSpec(name="big", cpu_cores=4, ram_mb=8192, price_units_hour=2_000_000)
LAB = api.ResourceSpec(
    name="lab-cheap", cpu_cores=4, ram_mb=8192, price_units_hour=500_000, pool="research"
)
POOL = api.Pool(name="research", members=(MEMBER,), groups=("lab",))


def job(**fields: Any) -> JobSpec:
    values: dict[str, Any] = {"framework": "pytorch", "script_url": "https://h/x.py"}
    values.update(fields)
    return JobSpec(**values)


def resources(**fields: Any) -> api.PeerResources:
    values: dict[str, Any] = {
        "cpu_mhz": 8000,
        "memory_mb": 16384,
        "price_units": {"low": 1_000_000},
        "executors": ("docker",),
        "frameworks": ALL,
        "specs": (SMALL, BIG, LAB),
        "pools": (POOL,),
    }
    values.update(fields)
    return api.PeerResources(**values)


def advert(**fields: Any) -> wire.Advert:
    values: dict[str, Any] = {
        "peer_id": PROVIDER.peer_id,
        "channel": "c",
        "cpu_mhz": 8000,
        "ram_mb": 16384,
        "frameworks": ALL,
        "executors": ("docker",),
        "specs": tuple(
            msgspec.convert(s, wire.AdvertSpec, from_attributes=True) for s in (SMALL, LAB)
        ),
        "pools": (wire.AdvertPool(name="research", members=(MEMBER,), groups=("lab",)),),
    }
    values.update(fields)
    return wire.Advert(**values)


def test_the_signed_advert_carries_the_specs_and_pools() -> None:
    sealed = wire.seal(PROVIDER, "advert", advert())
    opened = wire.open_envelope(sealed, "advert", wire.Advert)
    peer = to_api_peer(PeerInfo(peer_id=PROVIDER.peer_id, channel="c", advert=opened))
    assert peer.resources is not None
    assert peer.resources.specs == (SMALL, LAB)
    assert peer.resources.pools == (POOL,)


def test_an_advert_without_specs_is_the_bytes_it_was() -> None:
    plain = advert(specs=(), pools=())
    assert b"specs" not in msgspec.msgpack.encode(plain)
    assert b"pools" not in msgspec.msgpack.encode(plain)


def _hostile(**fields: Any) -> bytes:
    """An advert signed by its provider but built by hand, past our own constructors."""
    good = msgspec.to_builtins(advert())
    good.update(fields)
    payload = msgspec.msgpack.encode(good)
    envelope = wire.Envelope(
        kind="advert",
        signer=PROVIDER.peer_id,
        payload=payload,
        sig=PROVIDER.sign(wire._signing_bytes("advert", payload)),
    )
    return msgspec.msgpack.encode(envelope)


def _spec(**fields: Any) -> dict[str, Any]:
    return {"name": "x", "cpu_cores": 1, "ram_mb": 1, "price_units_hour": 1, **fields}


@pytest.mark.parametrize(
    "fields",
    [
        {"specs": [_spec(name="\x1b[2Jevil")]},
        {"specs": [_spec(name="a" * 41)]},
        {"specs": [_spec(price_units_hour=-1)]},
        {"specs": [_spec(price_units_hour=10**16)]},
        {"specs": [_spec(cpu_cores=0)]},
        {"specs": [_spec(name=f"s{i}") for i in range(17)]},
        {"specs": [_spec(), _spec()]},
        {"specs": [_spec(extra=1)]},
        {"pools": [{"name": "p", "members": ["not base58 0OIl"]}]},
        {"pools": [{"name": f"p{i}", "members": [MEMBER] * 20} for i in range(7)]},
        {"pools": [{"name": f"p{i}"} for i in range(9)]},
    ],
)
def test_a_hostile_advert_is_refused_whole(fields: dict[str, Any]) -> None:
    with pytest.raises(wire.Malformed):
        wire.open_envelope(_hostile(**fields), "advert", wire.Advert)


def test_matching_shows_a_reserved_spec_and_never_picks_it() -> None:
    peer = api.Peer(peer_id="p1", resources=resources())
    outsider = match(job(tier="low"), [peer], consumer=OUTSIDER).best()
    assert outsider.resource == BIG  # the cheapest the outsider may use (2 NTX/h < 3)
    notes = {o.spec.name: o.note for o in outsider.offers}
    assert notes == {"small": "", "big": "", "lab-cheap": "reserved for group lab"}
    member = match(job(tier="low"), [peer], consumer=MEMBER).best()
    assert member.resource == LAB and member.price_units_hour == 500_000
    # Named by the outsider: refused with the same reason the provider gives.
    named = match(job(resource_spec="lab-cheap"), [peer], consumer=OUTSIDER)
    assert dict(named.excluded) == {"p1": "spec lab-cheap: reserved for group lab"}
    only_reserved = api.Peer(peer_id="p2", resources=resources(specs=(LAB,)))
    (excluded,) = match(job(tier="low"), [only_reserved], consumer=OUTSIDER).excluded
    assert excluded[1] == (
        "every spec that fits the low tier is reserved: lab-cheap reserved for group lab"
    )


def test_a_tier_maps_to_the_cheapest_spec_that_fits_it() -> None:
    res = resources(specs=(SMALL, BIG), pools=())
    assert judge(Needs.of(job(tier="low")), res).resource == BIG
    assert judge(Needs.of(job(tier="moderate")), res).resource == BIG
    too_small = judge(Needs.of(job(tier="moderate")), resources(specs=(SMALL,), pools=()))
    assert too_small.reason == "no resource spec fits the moderate cpu tier"
    assert judge(Needs.of(job(resource_spec="small")), res).resource == SMALL
    missing = judge(Needs.of(job(resource_spec="nope")), res)
    assert missing.reason == "has no resource spec named 'nope' (sells small, big)"
    tiers = resources(specs=(), pools=(), price_units={"low": 1_000_000, "moderate": 2_500_000})
    assert judge(Needs.of(job(resource_spec="low")), tiers).resource is not None
    assert judge(Needs.of(job(resource_spec="moderate")), tiers).reason == (
        "has no resource spec named 'moderate': it sells NuNet's tiers, "
        "and a low job runs under the low one"
    )


def test_estimate_and_lock_are_the_price_for_the_expected_and_the_maximum_time() -> None:
    spec = job(expected_minutes=30, max_minutes=90)
    assert quote_units(BIG, spec) == (1_000_000, 3_000_000)  # 2 NTX/h: 30 min, 90 min
    assert quote_units(BIG, job(expected_minutes=30)) == (1_000_000, 1_000_000)
    floor = msgspec.structs.replace(BIG, min_charge_units=1_500_000)
    assert quote_units(floor, spec) == (1_500_000, 3_000_000)
    verdict = judge(Needs.of(job(expected_minutes=30, max_minutes=90, budget_ntx=2.9)), resources())
    assert verdict.reason == (
        "price above budget: spec big: 2 NTX/h x 90 min = 3 NTX locked > 2.9 NTX budget"
    )
    assert validate_spec(job(expected_minutes=30, max_minutes=20)).for_field("max_minutes")
    assert offer_spec(job()) == offer_spec(job(max_minutes=None, resource_spec=None))
    assert "max_minutes" not in offer_spec(job())


def test_the_consumer_checks_the_quote_against_its_price_and_budget() -> None:
    spec = job(expected_minutes=30, max_minutes=90, budget_ntx=5.0)

    def quote(**fields: Any) -> p.Quote:
        values: dict[str, Any] = {
            "job_id": "0123456789ab",
            "provider": PROVIDER.peer_id,
            "price_ntx_hour": 2.0,
            "total_ntx": 3.0,
            "expires_at": 0.0,
            "executor": "docker",
            "spec_name": "big",
            "price_units_hour": 2_000_000,
            "estimate_units": 1_000_000,
            "lock_units": 3_000_000,
        }
        values.update(fields)
        return p.Quote(**values)

    assert quoted_units(quote(), spec) == (1_000_000, 3_000_000, "")
    inflated = quoted_units(quote(lock_units=4_000_000, total_ntx=4.0), spec)
    assert inflated[2].startswith("quoted 4000000 base units locked")
    dear = quoted_units(quote(price_units_hour=4_000_000, estimate_units=2_000_000,
                              lock_units=6_000_000, total_ntx=6.0), spec)  # fmt: skip
    assert dear == (0, 0, "quote 6 NTX locked is above the budget of 5 NTX")
    legacy = quote(price_units_hour=0, estimate_units=0, lock_units=0, spec_name="")
    assert quoted_units(legacy, spec) == (3_000_000, 3_000_000, "")


def _provider(tmp_path: Path, book: rs.ResourceBook) -> ProviderJobs:
    ctx, _ = make_context(tmp_path)
    # A machine of its own (not this one's): 8 cores of 2,500 MHz, 20,000 MHz onboarded.
    machine = MachineSettings(cpu_cores=8, cpu_mhz_per_core=2500)
    ctx.settings = msgspec.structs.replace(ctx.settings, machine=machine)
    onboard(ctx, memory_mb=16384, cpu_mhz=20000)
    ResourceFile(ctx.paths.resources_file).save(book)
    return ProviderJobs(
        ctx,
        {"process": FakeIdleExecutor()},  # type: ignore[dict-item]
        network=FakeNetwork,
        machine=MachineFacts(ctx),
    )


def test_the_provider_quotes_the_spec_for_the_signer_from_its_own_pools(tmp_path: Path) -> None:
    member = identity(9).peer_id
    outsider = identity(10).peer_id
    book = rs.ResourceBook(
        specs=(SMALL, LAB),
        pools=(api.Pool(name="research", groups=("lab",)),),
        groups=(api.Group(name="lab", members=(member,)),),
    )
    jobs = _provider(tmp_path, book)
    named = job(resource_spec="lab-cheap", expected_minutes=30, max_minutes=60)
    for who, answer in ((outsider, "spec lab-cheap: reserved for group lab"), (member, "")):
        offered = p.Offer(job_id="0123456789ab", spec=named, consumer=who)
        reply = jobs._offer(offered, who, b"raw")
        if answer:
            assert reply == p.Refusal(job_id=offered.job_id, reason=answer)
            continue
        assert isinstance(reply, p.Quote)
        assert (reply.spec_name, reply.price_units_hour) == ("lab-cheap", 500_000)
        assert (reply.estimate_units, reply.lock_units, reply.total_ntx) == (250_000, 500_000, 0.5)
    # The advert the provider would send says the same (the pool's members filled in).
    res = jobs.own_resources()
    assert res.specs == (SMALL, LAB)
    assert res.pools == (api.Pool(name="research", members=(member,), groups=("lab",)),)


def test_a_job_runs_within_its_spec_for_at_most_its_maximum_time(tmp_path: Path) -> None:
    jobs = _provider(tmp_path, rs.ResourceBook(specs=(BIG,)))
    record = api.JobInfo(
        job_id="0123456789ab",
        role="provider",
        state="accepted",
        provider="me",
        consumer="you",
        spec=job(expected_minutes=10, max_minutes=25),
        resource_spec="big",
    )
    limits = jobs._limits(record)
    assert (limits.memory_mb, limits.cpu_cores, limits.timeout_s) == (8192, 4.0, 1500.0)
    assert limits.disk_mb is None  # BIG sells no particular disk
    legacy = msgspec.structs.replace(record, spec=job(expected_minutes=10), resource_spec="low")
    tier = jobs._limits(legacy)  # a default tier spec: the tier's maximums, twice the time
    assert (tier.memory_mb, tier.timeout_s, tier.disk_mb) == (2048, 1200.0, None)
    disk = msgspec.structs.replace(BIG, name="big-disk", disk_mb=2048)
    disk_jobs = _provider(tmp_path / "disk", rs.ResourceBook(specs=(disk,)))
    sized = disk_jobs._limits(msgspec.structs.replace(record, resource_spec="big-disk"))
    assert sized.disk_mb == 2048  # the workspace's bound (executors/disk_quota.py)
    jobs.ctx.store.save_job(record)
    assert jobs.committed().memory_mb == 8192


def test_a_bad_resources_file_refuses_every_offer_and_sells_nothing(tmp_path: Path) -> None:
    jobs = _provider(tmp_path, rs.ResourceBook(specs=(BIG,)))
    jobs.ctx.paths.resources_file.write_text("{not json", "utf-8")
    assert jobs._refusal_reason(job()) == (
        "this provider's resource specs do not read (its operator fixes them)"
    )
    assert jobs.own_resources().specs == ()
