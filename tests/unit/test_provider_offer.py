"""One offer view (issue 23 §2): what a provider advertises and beats (network/link.py) and
what its admission judges are one object made in one place (jobs/provider_offer.py), so a
consumer matching on the advert and heartbeat gives the verdict the provider gives."""

from __future__ import annotations

import ast
import logging
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine import api
from engine.config import JobSettings
from engine.domain import specs as rs
from engine.domain import wire
from engine.domain.matching import match
from engine.domain.peer_info import PeerInfo, to_api_peer
from engine.domain.spec import JobSpec
from engine.jobs.provider import ProviderJobs
from engine.network import link as link_module
from engine.network.link import NodeNetwork
from engine.ports import OfferView
from engine.resources.machine import MachineFacts
from engine.resources.spec_file import ResourceFile
from tests.fakes.context import make_context, onboard
from tests.fakes.executor import FakeIdleExecutor
from tests.fakes.network import FakeNetwork

PEER = "p1"


class Facts:
    def mode(self) -> api.Mode | None:
        return "provider"


class Totals:
    def job_totals(self) -> dict[str, Any]:
        return {}

    def ntx_claimed(self) -> int:
        return 1_500_000


class Room:
    """The jobs room as the network sees it (JobsPort): the provider's own offer."""

    def __init__(self, provider: ProviderJobs) -> None:
        self.provider = provider

    def attach(self, link: Any) -> None:
        pass

    def offer(self) -> OfferView:
        return self.provider.offer()


def build(tmp_path: Path) -> tuple[ProviderJobs, NodeNetwork]:
    ctx, _ = make_context(tmp_path, jobs=JobSettings(executors=["process"], slots=3))
    onboard(ctx, memory_mb=16384, cpu_mhz=20000)
    provider = ProviderJobs(
        ctx,
        {"process": FakeIdleExecutor()},  # type: ignore[dict-item]
        network=FakeNetwork,
        machine=MachineFacts(ctx),
    )
    network = NodeNetwork(ctx, facts=Facts(), jobs=lambda: Room(provider), totals=Totals())
    return provider, network


def spec(tier: str) -> JobSpec:
    return JobSpec(framework="scikit-learn", script_url="https://h/x.py", tier=tier)


def as_consumer_sees(network: NodeNetwork) -> api.Peer:
    """The provider as a consumer lists it: from its advert and its heartbeat."""
    advert, beat = network.advert(), network.heartbeat()
    assert advert is not None and beat is not None
    heartbeat = wire.Heartbeat(
        peer_id=PEER, channel="c", seq=1, at=time.time(), **msgspec.structs.asdict(beat)
    )
    advert = msgspec.structs.replace(advert, peer_id=PEER, channel="c")
    return to_api_peer(PeerInfo(peer_id=PEER, channel="c", advert=advert, heartbeat=heartbeat))


def start_job(provider: ProviderJobs, tier: str) -> None:
    provider._save(
        api.JobInfo(
            job_id="0123456789ab",
            role="provider",
            state="running",
            provider=provider.ctx.identity.peer_id,
            consumer="c1",
            spec=spec(tier),
        )
    )


def test_the_advert_and_heartbeat_carry_the_offer_view_admission_judges(tmp_path: Path) -> None:
    provider, network = build(tmp_path)
    seen: list[OfferView] = []
    offer = provider.offer

    def spy() -> OfferView:
        seen.append(offer())
        return seen[-1]

    provider.offer = spy  # type: ignore[method-assign]
    start_job(provider, "high")  # reserves the high tier's maximums: 16000 MHz, 16384 MB
    verdict = provider._admission(spec("low"))
    beat = network.heartbeat()
    assert beat is not None and len(seen) == 2  # admission's view, then the heartbeat's
    judged, beaten = seen
    assert judged == beaten  # one view: nothing of its own on either side
    res = judged.resources
    assert (res.free_cpu_mhz, res.free_memory_mb, res.running_jobs) == (4000, 0, 1)
    assert (beat.free_cpu_mhz, beat.free_ram_mb, beat.running_jobs) == (4000, 0, 1)
    assert verdict.reason == "busy: 0 MB RAM free now, needs 1024 MB"
    advert = network.advert()
    assert advert is not None
    assert (advert.cpu_mhz, advert.ram_mb, advert.slots) == (res.cpu_mhz, res.memory_mb, 3)
    assert (advert.executors, advert.frameworks) == (res.executors, res.frameworks)


def test_a_consumer_matching_on_the_advert_gives_the_providers_verdict(tmp_path: Path) -> None:
    provider, network = build(tmp_path)
    for running in (None, "moderate", "high"):
        if running is not None:
            start_job(provider, running)
        peer = as_consumer_sees(network)
        for tier in ("low", "moderate", "high"):
            verdict = provider._admission(spec(tier))
            excluded = dict(match(spec(tier), [peer]).excluded)
            assert excluded.get(PEER, "") == verdict.reason, (running, tier)
    assert "busy" in provider._admission(spec("low")).reason  # the high job holds the RAM


def test_a_paused_provider_neither_advertises_nor_beats(tmp_path: Path) -> None:
    provider, network = build(tmp_path)
    onboarding = provider.ctx.store.get_onboarding()
    assert onboarding is not None
    provider.ctx.store.save_onboarding(msgspec.structs.replace(onboarding, state="paused"), "pause")
    assert not provider.offer().accepting
    assert network.advert() is None and network.heartbeat() is None


def test_the_network_link_does_not_compute_an_offer_itself() -> None:
    """It imports nothing of the resources room (specs, capacity): the jobs room's offer
    view is all it has."""
    tree = ast.parse(Path(link_module.__file__).read_text())
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not [name for name in imported if name.startswith("engine.resources")]


def test_a_spec_beyond_the_capacity_is_dropped_and_said_once_not_every_beat(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider, network = build(tmp_path)
    huge = api.ResourceSpec(name="huge", cpu_cores=1, ram_mb=1_000_000, price_units_hour=1)
    small = api.ResourceSpec(name="small", cpu_cores=1, ram_mb=1024, price_units_hour=1)
    ResourceFile(provider.ctx.paths.resources_file).save(rs.ResourceBook(specs=(huge, small)))
    logger = logging.getLogger("nunet")
    logger.addHandler(caplog.handler)
    try:
        for _ in range(3):
            assert network.heartbeat() is not None
            advert = network.advert()
            assert advert is not None and [s.name for s in advert.specs] == ["small"]
            assert provider.offer().resources.specs == (small,)
    finally:
        logger.removeHandler(caplog.handler)
    dropped = [r for r in caplog.records if "exceed the onboarded capacity" in r.getMessage()]
    assert len({id(record) for record in dropped}) == 1  # (caplog may hold it twice)
