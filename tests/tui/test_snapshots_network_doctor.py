"""SVG snapshots of the network screen (``n``) with its Reachability panel (the connectivity
doctor) at 80x24 and 160x48, and the provider dashboard's reach line.

The real engine runs without the network; its network status and doctor report are
scripted (FakeEngineClient) with fixed peers, addresses and times, and the app's clock is
pinned, so the pictures are the same on every machine. Update with ``pytest
--snapshot-update`` and look at the pictures before committing them.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from engine.api import (
    ChannelTotals,
    GetNetworkStatus,
    NetworkDoctor,
    NetworkDoctorReport,
    NetworkStatus,
    PeerConnection,
    ReachabilityEvidence,
    RelayReservation,
)
from engine.facade import Engine
from nunet_tui.app import NunetApp
from tests.pilot import FakeEngineClient, anyio_backend, until
from tests.tui.test_snapshots import _onboard, _until, engine_client, host_engine, settled

__all__ = ["anyio_backend", "engine_client", "host_engine"]

NOW = 1_800_000_000.0
RELAY = "12D3KooWRe1ayRe1ayRe1ayRe1ayRe1ayRe1ayRe1ayRe1ayRe1a"
PUBLIC = "12D3KooWPub1icPub1icPub1icPub1icPub1icPub1icPub1icPu"
CONSUMER = "12D3KooWC0nsumerC0nsumerC0nsumerC0nsumerC0nsumerC0ns"
ME = "12D3KooWMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMe"
BOOT = f"/ip4/198.18.0.2/tcp/4001/p2p/{RELAY}"

STATUS = NetworkStatus(
    channel="nunet-test",
    online=True,
    listen_addrs=(f"/ip4/10.77.2.10/tcp/9001/p2p/{ME}",),
    connected_peers=3,
    totals=ChannelTotals(providers=2, cpu_mhz=8000, free_cpu_mhz=6000, memory_mb=16000),
)

PRIVATE = NetworkDoctorReport(
    online=True,
    reachability="private",
    reachability_since=NOW - 300,
    checked_at=NOW - 42,
    evidence=(
        ReachabilityEvidence(
            peer_id=PUBLIC,
            addr="/ip4/198.18.0.102/tcp/9001",
            outcome="failed",
            detail="no answer within 3 s",
            at=NOW - 42,
        ),
        ReachabilityEvidence(
            peer_id=RELAY,
            addr="/ip4/198.18.0.102/tcp/9001",
            outcome="failed",
            detail="Connection refused",
            at=NOW - 42,
        ),
    ),
    listen_addrs=(f"/ip4/10.77.2.10/tcp/9001/p2p/{ME}",),
    observed_addrs=("/ip4/198.18.0.102/tcp/40312",),
    reservations=(
        RelayReservation(
            relay_peer_id=RELAY,
            circuit_addr=f"{BOOT}/p2p-circuit/p2p/{ME}",
            expires_at=NOW + 3300,
        ),
    ),
    connections=(
        PeerConnection(
            peer_id=RELAY, path="direct", transport="tcp", remote_addr="/ip4/198.18.0.2/tcp/4001"
        ),
        PeerConnection(
            peer_id=PUBLIC, path="direct", transport="tcp", remote_addr="/ip4/198.18.0.3/tcp/9001"
        ),
        PeerConnection(
            peer_id=CONSUMER,
            path="relayed",
            transport="tcp",
            remote_addr=f"{BOOT}/p2p-circuit/p2p/{CONSUMER}",
            via_relay=RELAY,
        ),
    ),
    consumers_reach="relayed",
    fix="forward (or open) TCP port 9001 on your router to this host (10.77.2.10)",
)


def _client(engine: Engine, report: NetworkDoctorReport = PRIVATE) -> FakeEngineClient:
    return FakeEngineClient({GetNetworkStatus: STATUS, NetworkDoctor: report}, delegate=engine)


async def _doctor_shown(pilot: Pilot[Any]) -> None:
    screen = pilot.app.screen
    await _until(pilot, lambda: getattr(screen, "doctor", None) is not None)
    await pilot.pause(0.1)
    screen.query_one("#reachability").scroll_visible(animate=False)
    await pilot.pause(0.1)


@pytest.mark.parametrize(
    "size", [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]
)
def test_network_screen_with_the_doctor(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    _onboard(engine_client)
    app = NunetApp(client=_client(engine_client), clock=lambda: NOW)
    run_before = settled("NetworkScreen", keys=["n"], then=_doctor_shown)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("report", "said"),
    [
        (PRIVATE, "Reach: Consumers reach this node through 1 relay only · fix: forward"),
        (
            NetworkDoctorReport(online=True, reachability="public", consumers_reach="direct"),
            "Reach: Consumers reach this node directly (publicly reachable)",
        ),
        (
            NetworkDoctorReport(
                online=True, reachability="private", consumers_reach="no", fix="add a relay"
            ),
            "Reach: Consumers cannot reach this node · fix: add a relay",
        ),
    ],
    ids=["relayed", "public", "unreachable"],
)
async def test_the_provider_dashboard_says_whether_consumers_reach_it(
    engine_client: Engine, report: NetworkDoctorReport, said: str
) -> None:
    _onboard(engine_client)
    app = NunetApp(client=_client(engine_client, report), clock=lambda: NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")
        line = app.screen.query_one("#reach-line", Static)
        await until(pilot, lambda: line.display and str(line.render()).startswith("Reach"))
        assert str(line.render()).startswith(said), str(line.render())


@pytest.mark.anyio
async def test_no_reach_line_and_no_panel_while_the_network_is_off(engine_client: Engine) -> None:
    _onboard(engine_client)  # the real engine: no network, its doctor says offline
    app = NunetApp(client=engine_client, clock=lambda: NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")
        dashboard = app.screen
        await pilot.pause(0.3)
        assert not dashboard.query_one("#reach-line", Static).display
        await pilot.press("n")
        await until(pilot, lambda: type(app.screen).__name__ == "NetworkScreen")
        await until(pilot, lambda: getattr(app.screen, "doctor", None) is not None)
        assert not app.screen.query_one("#reachability").display
