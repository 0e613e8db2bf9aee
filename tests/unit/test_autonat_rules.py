"""The pure rules of AutoNAT and the doctor: what a server may dial back, what a round of
answers means, what an asker asks for, and the one fix (engine/network/autonat.py,
engine/network/doctor.py, nunet_tui/cli/doctor_output.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing
from libp2p.peer.id import ID

from engine import api
from engine.config import NetworkSettings
from engine.network.autonat import (
    MAX_ADDRS,
    RETRY_S,
    Evidence,
    Reachability,
    dial_target,
    dialback_addrs,
    verdict_of,
)
from engine.network.doctor import RELAY_FIX, fix_for, transport_of
from nunet_tui.cli.doctor_output import doctor_lines

SEEN = "198.18.0.102"
SERVER = ID(b"a dial-back server")


@pytest.mark.parametrize(
    ("addr", "target"),
    [
        ("/ip4/0.0.0.0/tcp/9001", "/ip4/198.18.0.102/tcp/9001"),  # where you see me
        ("/ip4/198.18.0.102/tcp/9001", "/ip4/198.18.0.102/tcp/9001"),
        (
            "/ip4/198.18.0.102/tcp/9001/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW",
            "/ip4/198.18.0.102/tcp/9001",
        ),
        ("/ip4/198.18.0.4/tcp/9001", None),  # a third party
        ("/ip4/10.77.2.10/tcp/9001", None),  # its LAN address: not where it came from
        ("/dns4/example.com/tcp/9001", None),  # a name: whose address?
        ("/ip4/198.18.0.102/udp/9001/quic-v1", None),  # TCP only
        ("/ip4/198.18.0.102/tcp/0", None),
        ("/ip4/198.18.0.102/tcp/9001/ws", None),
        ("not a multiaddr", None),
    ],
)
def test_only_the_askers_own_ip_is_dialled_back(addr: str, target: str | None) -> None:
    got, why = dial_target(addr, SEEN)
    assert got == target
    assert bool(why) == (target is None)


def test_ipv4_mapped_and_ipv6() -> None:
    assert dial_target("/ip4/0.0.0.0/tcp/1", "::ffff:198.18.0.102")[0] == (
        "/ip4/198.18.0.102/tcp/1"
    )
    assert dial_target("/ip6/::/tcp/1", "2001:db8::1")[0] == "/ip6/2001:db8::1/tcp/1"
    assert dial_target("/ip6/2001:db8::2/tcp/1", "2001:db8::1")[0] is None


def _e(peer: str, outcome: str) -> Evidence:
    return Evidence(peer, "/ip4/1.2.3.4/tcp/1", outcome, "", 0.0)  # type: ignore[arg-type]


def test_verdicts() -> None:
    assert verdict_of([]) == "unknown"
    assert verdict_of([_e("a", "refused"), _e("b", "no answer")]) == "unknown"
    assert verdict_of([_e("a", "failed")]) == "private"
    assert verdict_of([_e("a", "reached")]) == "public"
    assert verdict_of([_e("a", "reached"), _e("b", "failed")]) == "public"
    assert verdict_of([_e("a", "reached"), _e("b", "failed"), _e("c", "failed")]) == "unknown"
    # One peer that reached one address and failed another reached us.
    assert verdict_of([_e("a", "failed"), _e("a", "reached")]) == "public"


def test_the_asker_asks_for_its_ports_where_it_is_seen() -> None:
    listen = [
        "/ip4/0.0.0.0/tcp/9001",
        "/ip4/10.77.2.10/tcp/9001",
        "/ip6/::1/tcp/9002",
        "/ip4/127.0.0.1/udp/9003/quic-v1",
        *[f"/ip4/0.0.0.0/tcp/{p}" for p in range(10_000, 10_010)],
    ]
    wanted = dialback_addrs(listen)
    assert wanted[:2] == ["/ip4/0.0.0.0/tcp/9001", "/ip6/::/tcp/9002"]
    assert len(wanted) == MAX_ADDRS


def test_the_one_fix() -> None:
    settings = NetworkSettings(
        bootstrap=[
            "/ip4/198.18.0.2/tcp/4001/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW"
        ]
    )
    assert fix_for("public", ["/ip4/0.0.0.0/tcp/9001"], False, settings) is None
    assert fix_for("private", ["/ip4/0.0.0.0/tcp/9001"], True, settings) == (
        "forward (or open) TCP port 9001 on your router to this host"
    )
    assert fix_for("private", ["/ip4/10.0.0.5/tcp/9001"], False, settings) == (
        "forward (or open) TCP port 9001 on your router to this host (10.0.0.5)"
    )
    assert fix_for("private", ["/ip4/0.0.0.0/tcp/9001"], True, settings, lan_ip="10.0.0.7") == (
        "forward (or open) TCP port 9001 on your router to this host (10.0.0.7)"
    )
    assert fix_for("private", ["/ip4/10.0.0.5/tcp/9001"], False, settings, upnp_failed=True) == (
        "forward (or open) TCP port 9001 on your router to this host (10.0.0.5), "
        "or turn on UPnP or NAT-PMP in the router"
    )
    assert fix_for("private", ["/ip4/127.0.0.1/tcp/9001"], False, settings) == RELAY_FIX
    assert fix_for("unknown", ["/ip4/0.0.0.0/tcp/9001"], False, settings) is None
    alone = NetworkSettings()
    assert fix_for("unknown", ["/ip4/0.0.0.0/tcp/9001"], False, alone) == RELAY_FIX


def test_transports() -> None:
    assert transport_of("/ip4/1.2.3.4/tcp/1") == "tcp"
    assert transport_of("/ip4/1.2.3.4/udp/1/quic-v1") == "quic"
    assert transport_of("/ip4/1.2.3.4/tcp/1/ws") == "ws"
    assert transport_of("garbage") == "?"


def test_the_cli_text() -> None:
    report = api.NetworkDoctorReport(
        online=True,
        reachability="private",
        checked_at=100.0,
        evidence=(
            api.ReachabilityEvidence(
                peer_id="R", addr="/ip4/1.2.3.4/tcp/9001", outcome="failed", detail="refused"
            ),
        ),
        listen_addrs=("/ip4/0.0.0.0/tcp/9001",),
        reservations=(
            api.RelayReservation(
                relay_peer_id="R", circuit_addr="/p2p/R/p2p-circuit", expires_at=700
            ),
        ),
        connections=(
            api.PeerConnection(peer_id="R", path="direct", transport="tcp", remote_addr="/ip4/x"),
        ),
        consumers_reach="relayed",
        fix="forward (or open) TCP port 9001 on your router to this host",
    )
    lines = doctor_lines(report, 130.0)
    assert lines[0] == (
        "reachability  private: not reachable from the internet (behind NAT or a firewall)"
        " (checked 30s ago)"
    )
    assert "consumers     consumers reach this node through 1 relay only" in lines
    assert "fix           forward (or open) TCP port 9001 on your router to this host" in lines
    assert "  R could not reach /ip4/1.2.3.4/tcp/9001: refused" in lines
    assert "  R /p2p/R/p2p-circuit (expires in 10m)" in lines
    assert "port forward  not tried" in lines
    assert "  R direct over tcp /ip4/x" in lines
    assert doctor_lines(api.NetworkDoctorReport(online=False, fix="start it"), 0) == [
        "network offline",
        "fix: start it",
    ]


class _Rounds(Reachability):
    """The asker's schedule with its rounds recorded instead of asked: each round
    "finds" what ``outcome`` says."""

    def __init__(self, outcome: str) -> None:
        super().__init__(host=None, interval_s=600.0)
        self.outcome = outcome
        self.asked: list[tuple[list[str], float]] = []

    async def check(self, servers: Sequence[Any], addrs: list[str]) -> Any:
        self.asked.append((addrs, trio.current_time()))
        self.evidence = [Evidence("S", addrs[0], self.outcome, "", 0.0)]  # type: ignore[arg-type]
        self.verdict = verdict_of(self.evidence)
        return self.verdict


def test_rounds_at_start_on_address_change_and_every_interval() -> None:
    listen = ["/ip4/0.0.0.0/tcp/9001"]
    changes: list[str] = []
    rounds = _Rounds("failed")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                rounds.run, lambda: [SERVER], lambda: listen, lambda: changes.append("c")
            )
            await trio.sleep(100)
            assert len(rounds.asked) == 1  # at start, then not before the interval
            listen[:] = ["/ip4/0.0.0.0/tcp/9100"]  # the node listens elsewhere now
            await trio.sleep(5)
            assert [a for a, _ in rounds.asked] == [
                ["/ip4/0.0.0.0/tcp/9001"],
                ["/ip4/0.0.0.0/tcp/9100"],
            ]
            await trio.sleep(600)
            assert len(rounds.asked) == 3  # the interval passed
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert changes == ["c"]  # unknown -> private once; the same verdict again says nothing


def test_no_round_without_a_peer_to_ask_and_retries_while_nothing_is_known() -> None:
    servers: list[ID] = []
    rounds = _Rounds("refused")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                rounds.run, lambda: servers, lambda: ["/ip4/0.0.0.0/tcp/9001"], lambda: None
            )
            await trio.sleep(50)
            assert rounds.asked == []
            servers.append(SERVER)
            await trio.sleep(3)
            assert len(rounds.asked) == 1
            await trio.sleep(RETRY_S + 3)  # a refusal proves nothing: asked again soon
            assert len(rounds.asked) == 2
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert rounds.verdict == "unknown"
