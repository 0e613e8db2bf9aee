"""The peer table's bounds (issue 21): per-subnet quota of unverified peers, total cap,
stalest evicted first, protected and verified peers kept; the dial budget per address."""

from __future__ import annotations

import time

from nacl.signing import SigningKey

from engine.domain.wire import Advert
from engine.identity import Identity
from engine.network.dialbudget import DialBudget
from engine.network.peers import PeerTable


def _advert(ip: str, at: float) -> Advert:
    peer_id = Identity(SigningKey.generate()).peer_id
    return Advert(
        peer_id=peer_id,
        channel="c",
        addrs=(f"/ip4/{ip}/tcp/4001/p2p/{peer_id}",),
        seq=1,
        at=at,
        expires_at=at + 3600,
    )


def test_unverified_peers_of_one_subnet_share_a_quota_and_the_stalest_goes() -> None:
    now = [1000.0]
    kept: set[str] = set()
    table = PeerTable("c", 1.0, clock=lambda: now[0], protected=kept.__contains__, subnet_quota=4)
    first = [_advert("10.0.0.9", now[0] - i) for i in range(4)]
    for advert in first:
        assert table.on_advert(advert)
    kept.add(first[3].peer_id)  # the stalest, but in good standing
    table.mark_verified(first[2].peer_id)  # verified: out of the quota
    for i in range(50):
        now[0] += 0.01
        table.on_advert(_advert(f"10.0.0.{i % 250}", now[0]))
    group = [p for p in table.snapshot() if not p.verified]
    assert len(group) <= 4 and table.evicted >= 49
    assert first[3].peer_id in table and first[2].peer_id in table
    # Another subnet is not touched by this one's flood.
    assert table.on_advert(_advert("10.0.1.1", now[0]))


def test_the_total_cap_holds_and_refuses_when_nobody_can_go() -> None:
    table = PeerTable("c", 1.0, protected=lambda peer: True, max_peers=10)
    now = time.time()
    listed = sum(table.on_advert(_advert(f"10.{i}.0.1", now)) for i in range(30))
    assert listed == 10 and len(table) == 10 and table.refused == 20


def test_the_dial_budget_dials_one_address_once_a_minute() -> None:
    now = [0.0]
    budget = DialBudget(clock=lambda: now[0])
    addr = "/ip4/127.0.1.3/tcp/4001"
    assert budget.allow([addr])
    assert not any(budget.allow([addr]) for _ in range(1000))
    now[0] += 61.0
    assert budget.allow([addr])
