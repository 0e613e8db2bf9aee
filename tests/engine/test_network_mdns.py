"""mDNS discovery on loopback only: nodes with no bootstrap peer find each other.

In one trio run (NetworkService with ``mdns=True`` and ``mdns_interfaces=["lo"]``) and with
real daemons onboarded with ``-l``. Multicast to 127.0.0.1 works here even when ``lo`` lacks
the MULTICAST flag (zeroconf sets IP_MULTICAST_IF to the interface address and the kernel
loops it back), so nothing touches the machine's interfaces; nothing is sent on other
interfaces either, since zeroconf only opens sockets on the addresses we give it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio
from nacl.signing import SigningKey

from engine.config import NetworkSettings
from engine.identity import Identity
from engine.network import mdns
from engine.network.service import NetworkService
from tests.conftest import TEST_ADDRESS, make_home
from tests.daemons.test_network_daemons import Daemon, wait_for
from tests.engine.test_network_service import Hooks, wait_until


def service(*, local: bool, interfaces: list[str] | None = None) -> NetworkService:
    settings = NetworkSettings(
        listen=["/ip4/127.0.0.1/tcp/0"],
        heartbeat_interval_s=0.5,
        mdns_interfaces=["lo"] if interfaces is None else interfaces,
    )
    return NetworkService(Identity(SigningKey.generate()), settings, "ch-mdns", Hooks(), mdns=local)


def listed(node: NetworkService) -> set[str]:
    return {p.peer_id for p in node.peers() if p.advert is not None}


def test_helpers() -> None:
    assert mdns.interface_ips(["lo"]) == ["127.0.0.1"]
    assert mdns.interface_ips(["127.0.0.1", "no-such-if0"]) == ["127.0.0.1"]
    me = Identity(SigningKey.generate()).peer_id
    other = Identity(SigningKey.generate()).peer_id
    addrs = mdns.advertised_addrs(
        ["/ip4/0.0.0.0/tcp/4001", "/ip4/10.9.9.9/tcp/4002", "/ip6/::1/tcp/4003"],
        ["127.0.0.1"],
        me,
    )
    assert addrs == [f"/ip4/127.0.0.1/tcp/4001/p2p/{me}"]
    text = mdns.txt_record([f"dnsaddr={a}" for a in addrs] + ["junk"])
    assert mdns.txt_strings(text) == [f"dnsaddr={addrs[0]}".encode(), b"junk"]
    assert mdns.peer_from_txt(text, me) is None  # ourselves
    found = mdns.peer_from_txt(text, other)
    assert found is not None and str(found.peer_id) == me
    mixed = mdns.txt_record(
        [f"dnsaddr=/ip4/127.0.0.1/tcp/1/p2p/{me}", f"dnsaddr=/ip4/127.0.0.1/tcp/2/p2p/{other}"]
    )
    assert mdns.peer_from_txt(mixed, "x") is None  # one record, two peers: not trusted


def test_two_services_find_each_other_without_bootstrap() -> None:
    threads_before = threading.active_count()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            a, b = service(local=True), service(local=True)
            hidden = service(local=False)
            for node in (a, b, hidden):
                await nursery.start(node.run)
            await wait_until(
                lambda: b.identity.peer_id in listed(a) and a.identity.peer_id in listed(b),
                timeout=15,
            )
            assert a.local_discovery is not None
            # Listed may come first through the connection b's own mDNS made: a's mDNS hears
            # b's next announcement (waited for, not raced).
            local = a.local_discovery
            await wait_until(lambda: b.identity.peer_id in local.found, timeout=15)
            # Heartbeats flow over the connection mDNS made.
            await wait_until(
                lambda: any(p.heartbeat for p in a.peers() if p.peer_id == b.identity.peer_id)
            )
            await trio.sleep(1.0)
            assert hidden.identity.peer_id not in listed(a) | listed(b)
            assert listed(hidden) == set()

            # Turned off in place: no zeroconf left, the connections stay.
            b.set_mdns(False)
            await wait_until(lambda: b.local_discovery is None)
            assert a.identity.peer_id in listed(b)
            nursery.cancel_scope.cancel()

    trio.run(main)
    # zeroconf's loop threads are joined on the way out; nothing lingers.
    assert threading.active_count() == threads_before


def test_no_interfaces_means_no_mdns() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            a = service(local=True, interfaces=[])
            await nursery.start(a.run)
            await trio.sleep(0.2)
            assert a.local_discovery is None or not a.local_discovery.ips
            nursery.cancel_scope.cancel()

    trio.run(main)


# --- real daemons, onboarded through the CLI -----------------------------------------------


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[[str, int], Daemon]]:
    started: list[Daemon] = []

    def spawn(name: str, seed: int) -> Daemon:
        home = make_home(tmp_path / name, seed=bytes([seed]) * 32)
        env = {
            "NUNET_NETWORK_HEARTBEAT_INTERVAL_S": "1",
            "NUNET_NETWORK_MDNS_INTERFACES": "lo",  # never the machine's real interfaces
        }
        daemon = Daemon(home, env).start()
        started.append(daemon)
        return daemon

    yield spawn
    for daemon in started:
        daemon.stop(kill=True)


def _peers(daemon: Daemon) -> set[str]:
    return {p["peer_id"] for p in daemon.cli("peer", "list")["peers"] if p["resources"]}


def test_daemons_onboarded_with_l_find_each_other(
    daemons: Callable[[str, int], Daemon],
) -> None:
    a, b, quiet = daemons("a", 40), daemons("b", 41), daemons("quiet", 42)
    for daemon, local in ((a, True), (b, True), (quiet, False)):
        flags = ["-l"] if local else []
        daemon.cli("onboard", "-m", "5000", "-c", "4000", "-a", TEST_ADDRESS, *flags)
    a_id, b_id, quiet_id = a.peer_id, b.peer_id, quiet.peer_id
    wait_for(lambda: b_id in _peers(a), "a never listed b through mDNS", timeout=20)
    wait_for(lambda: a_id in _peers(b), "b never listed a through mDNS", timeout=10)
    assert quiet_id not in _peers(a) | _peers(b)
    assert _peers(quiet) == set()
