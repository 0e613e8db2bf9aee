"""A peer asks a real daemon, by DCUtR, to dial a third party (engine/network/dcutr.py).

py-libp2p 0.8.1's dcutr.py dials whatever a CONNECT names, as many addresses as it names,
loopback and LAN included, on any connection: one peer, or a thousand identities, could make
every node it reaches send connections at a victim, or at the node's own LAN. Here, in the
NAT lab: a provider behind the full-cone NAT, reached through the relay by three hostile
identities that each send CONNECT after CONNECT naming a third party on the public segment
(12 of its ports and port 1000), the provider's loopback and its LAN neighbour. Each
identity's CONNECTs past the per-peer bound are refused; the third party sees at most the
per-address bound however many identities ask (each allowed address dialled twice at most:
the opening SYN and the plain dial); the loopback, LAN and low-port listeners see nothing. A
CONNECT over a direct connection (to the relay daemon, which is public) is refused outright.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.network.dcutr import MAX_ADDRS, PEER_BURST, TARGET_BURST
from tests.conftest import TEST_ADDRESS
from tests.daemon_harness import Daemon, spawner, wait_for
from tests.netlab import Host, Lab, NatKind
from tests.network.conftest import nat_lab  # noqa: F401  (the fixture)
from tests.network.probes import next_event, start

RELAY_PORT = 4001
ATTACKER = "tests.adversarial.dcutr_attacker"
IDENTITIES = 3


class Listener:
    """A TCP listener in a lab namespace that counts the connections it accepts."""

    def __init__(self, lab: Lab, host: Host, ip: str, port: int) -> None:
        self.sock = lab.socket(host, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, port))
        self.sock.listen(64)
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.sock], [], [], 0.1)
            if ready:
                with contextlib.suppress(OSError):
                    conn, _ = self.sock.accept()
                    self.accepted += 1
                    conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def lab_daemons(nat_lab: Lab, tmp_path: Path) -> Iterator[Any]:  # noqa: F811
    started: list[Daemon] = []
    yield spawner(tmp_path, started)
    for daemon in started:
        daemon.stop(kill=True)


@pytest.mark.timeout(300)
def test_connect_naming_a_third_party_is_bounded(
    nat_lab: Lab,  # noqa: F811
    lab_daemons: Any,
) -> None:
    lab = nat_lab
    relay = lab_daemons(
        "relay",
        75,
        env={
            "NUNET_NETWORK_LISTEN": f"/ip4/{lab.relay.addr}/tcp/{RELAY_PORT}",
            "NUNET_NETWORK_RELAY_SERVICE": "true",
        },
        netns=lab.relay.ns,
    )
    boot = f"/ip4/{lab.relay.addr}/tcp/{RELAY_PORT}/p2p/{relay.peer_id}"
    home = lab.homes[NatKind.FULL_CONE]
    provider = lab_daemons(
        "provider",
        76,
        bootstrap=boot,
        env={"NUNET_NETWORK_LISTEN": "/ip4/0.0.0.0/tcp/9001"},
        netns=home.hosts[0].ns,
    )
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    circuit = f"{boot}/p2p-circuit/p2p/{provider.peer_id}"
    victim = lab.public[2]
    ports = list(range(5001, 5013))
    third_party = [Listener(lab, victim, victim.addr, port) for port in ports]
    low_port = Listener(lab, victim, victim.addr, 1000)
    loopback = Listener(lab, home.hosts[0], "127.0.0.1", 5001)
    neighbour = Listener(lab, home.hosts[1], home.hosts[1].addr, 5001)
    named = [f"/ip4/{victim.addr}/tcp/{port}" for port in ports]
    named += [f"/ip4/{victim.addr}/tcp/1000", "/ip4/127.0.0.1/tcp/5001"]
    named += [f"/ip4/{home.hosts[1].addr}/tcp/5001"]
    attackers = []
    try:
        # The provider reserves once it advertises; the attacker needs its circuit.
        def reserved() -> bool:
            peers = relay.cli("peer", "list")["peers"]
            return any(circuit in p.get("addrs", []) for p in peers)

        wait_for(reserved, "the provider never advertised its circuit address", 120)
        # Three identities, four CONNECTs each, paced so that each is answered unless a
        # bound says no (one attempt lasts about ROUND_S on the provider).
        attackers += [
            start(lab, lab.public[1], ATTACKER, "relayed", circuit, "4", *named, ATTACK_PACE_S="4")
            for _ in range(IDENTITIES)
        ]
        for attacker in attackers:
            done = next_event(attacker, timeout=120)
            assert done["event"] == "done", done
            # The per-peer bound: PEER_BURST attempts, then one a minute.
            assert done["answers"] == ["connect"] * int(PEER_BURST) + ["refused"], done
        # Over a direct connection (the public relay daemon): refused outright.
        direct = start(lab, lab.public[1], ATTACKER, "direct", boot, "3", *named)
        attackers.append(direct)
        assert next_event(direct, timeout=120)["answers"] == ["refused"] * 3
        # What the provider sent the third party: at most TARGET_BURST of its addresses,
        # each dialled at most twice; nothing to a low port, to loopback or to the LAN.
        total = sum(listener.accepted for listener in third_party)
        assert 1 <= total <= 2 * min(TARGET_BURST, MAX_ADDRS), total
        assert low_port.accepted == loopback.accepted == neighbour.accepted == 0
        # The provider is still up and answering.
        assert provider.cli("peer", "list")["peers"] is not None
    finally:
        for proc in attackers:
            proc.kill()
            proc.wait(timeout=10)
        for listener in [*third_party, low_port, loopback, neighbour]:
            listener.close()
