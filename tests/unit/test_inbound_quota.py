"""Established inbound connections per address and subnet (engine/network/pending_gate.py),
and who passes them: a peer we have a job with (Store.job_peers, engine/network/link.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.network.pending_gate import PendingGate, address_key, subnet_key
from tests.fakes.context import make_context


@dataclass(eq=False)  # hashed by identity, as the muxed connections are
class _Conn:
    peer_id: str
    is_closed: bool = False


def _conn(peer: str) -> _Conn:
    return _Conn(peer)


def test_subnets_are_ipv4_24_and_ipv6_56_and_each_loopback_address_its_own() -> None:
    assert subnet_key("203.0.113.7") == "203.0.113.0/24"
    assert subnet_key("2001:db8:1:2:3::9") == "2001:db8:1::/56"
    assert subnet_key("::ffff:203.0.113.7") == "203.0.113.0/24"
    assert subnet_key("127.0.0.2") == "127.0.0.2" != subnet_key("127.0.0.3")
    assert address_key("2001:db8:1:2:3::9") == "2001:db8:1:2::/64"


def test_quotas_per_address_subnet_and_in_all_and_a_peer_in_good_standing_passes() -> None:
    friends = {"friend"}
    gate = PendingGate(
        established_per_address=2,
        established_per_subnet=3,
        strangers_total=5,
        in_good_standing=lambda peer: peer in friends,
    )
    assert gate.admit(_conn("a1"), "203.0.113.1", "203.0.113.0/24") == ""
    assert gate.admit(_conn("a2"), "203.0.113.1", "203.0.113.0/24") == ""
    assert "203.0.113.1 holds 2" in gate.admit(_conn("a3"), "203.0.113.1", "203.0.113.0/24")
    assert gate.admit(_conn("b1"), "203.0.113.2", "203.0.113.0/24") == ""
    assert "203.0.113.0/24 holds 3" in gate.admit(_conn("b2"), "203.0.113.2", "203.0.113.0/24")
    assert gate.admit(_conn("friend"), "203.0.113.1", "203.0.113.0/24") == ""  # past both
    assert gate.admit(_conn("c1"), "198.51.100.1", "198.51.100.0/24") == ""  # 5 held now
    # Full: a newcomer from a subnet holding less takes the place of the oldest stranger of
    # the subnet holding the most (never a peer in good standing there).
    assert gate.admit(_conn("d1"), "192.0.2.1", "192.0.2.0/24") == ""
    assert [c.peer_id for c in gate.evicted] == ["a1"]
    gate.evicted.clear()
    assert gate.admit(_conn("d2"), "192.0.2.2", "192.0.2.0/24") == ""  # 203.0.113.0/24: 3
    assert [c.peer_id for c in gate.evicted] == ["a2"]
    gate.evicted.clear()
    # Now no subnet holds two more than the newcomer's would: the rest is reserved.
    assert "reserved" in gate.admit(_conn("d3"), "192.0.2.3", "192.0.2.0/24")
    assert "reserved" in gate.admit(_conn("c2"), "198.51.100.2", "198.51.100.0/24")
    assert gate.evicted == []
    # A closed connection frees its place at the next admission.
    closing = next(iter(gate._established))
    closing.is_closed = True
    assert gate.admit(_conn("d3"), "192.0.2.3", "192.0.2.0/24") == ""


def test_many_subnets_at_their_quota_make_room_for_a_newcomer_not_for_themselves() -> None:
    gate = PendingGate(established_per_address=32, established_per_subnet=32, strangers_total=8)
    for i in range(8):  # four attacker subnets, two each: every stranger's place taken
        assert gate.admit(_conn(f"x{i}"), f"10.0.{i % 4}.1", f"10.0.{i % 4}.0/24") == ""
    assert "reserved" in gate.admit(_conn("x8"), "10.0.0.1", "10.0.0.0/24")  # their own
    assert gate.admit(_conn("honest"), "192.0.2.1", "192.0.2.0/24") == ""
    assert len(gate.evicted) == 1 and gate.evicted[0].peer_id == "x0"


def test_a_peer_we_deal_with_is_in_good_standing(tmp_path: Path) -> None:
    from engine import api
    from engine.domain.spec import JobSpec

    ctx, _ = make_context(tmp_path)
    assert "12D3KooWstranger" not in ctx.store.job_peers()
    ctx.store.save_job(
        api.JobInfo(
            job_id="0123456789ab",
            role="consumer",
            state="completed",
            provider="12D3KooWprovider",
            consumer=ctx.identity.peer_id,
            spec=JobSpec(framework="scikit-learn"),
        )
    )
    assert ctx.store.job_peers() == {"12D3KooWprovider", ctx.identity.peer_id}
