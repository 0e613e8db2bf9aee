"""Hole punching between real daemons in the NAT lab (engine/network/dcutr.py): a consumer
that reached a provider through the relay gets a direct connection where the two NATs allow
it (full cone ↔ port-restricted cone), and stays relayed, still working, where they do not
(symmetric ↔ symmetric)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_ADDRESS
from tests.daemon_harness import Daemon, wait_for
from tests.netlab import Lab, NatKind

RELAY_PORT = 4001
# Not the default listen address (test_relay_daemons.py says why).
ANYWHERE = {"NUNET_NETWORK_LISTEN": "/ip4/0.0.0.0/tcp/9001"}


def listed(consumer: Daemon, peer_id: str) -> dict[str, Any] | None:
    for peer in consumer.cli("peer", "list")["peers"]:
        if peer["peer_id"] == peer_id:
            return dict(peer)
    return None


def logged(daemon: Daemon, text: str) -> bool:
    log = Path(daemon.home.log_file)
    return log.exists() and text in log.read_text(errors="replace")


def relayed_pair(
    lab: Lab, spawn: Any, provider_kind: NatKind, consumer_kind: NatKind, seed: int
) -> tuple[Daemon, Daemon]:
    """A relay, a provider behind one NAT and a consumer behind another that lists the
    provider's circuit address and has chatted with it (the first contact: through the
    relay, the only way in)."""
    relay = spawn(
        "relay",
        seed,
        env={
            "NUNET_NETWORK_LISTEN": f"/ip4/{lab.relay.addr}/tcp/{RELAY_PORT}",
            "NUNET_NETWORK_RELAY_SERVICE": "true",
        },
        netns=lab.relay.ns,
    )
    boot = f"/ip4/{lab.relay.addr}/tcp/{RELAY_PORT}/p2p/{relay.peer_id}"
    provider = spawn(
        "provider",
        seed + 1,
        bootstrap=boot,
        env=ANYWHERE,
        netns=lab.homes[provider_kind].hosts[0].ns,
    )
    consumer = spawn(
        "consumer",
        seed + 2,
        bootstrap=boot,
        env=ANYWHERE,
        netns=lab.homes[consumer_kind].hosts[1].ns,
    )
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    circuit = f"{boot}/p2p-circuit/p2p/{provider.peer_id}"
    wait_for(
        lambda: circuit in (listed(consumer, provider.peer_id) or {}).get("addrs", []),
        "the consumer never listed the provider's relay address",
        120,
    )
    sent = consumer.cli("chat", "send", provider.peer_id, "first contact")
    assert sent["status"] == "delivered", sent
    return provider, consumer


@pytest.mark.timeout(300)
def test_a_cone_pair_upgrades_to_a_direct_connection(nat_lab: Lab, lab_daemons: Any) -> None:
    provider, consumer = relayed_pair(
        nat_lab, lab_daemons, NatKind.FULL_CONE, NatKind.PORT_RESTRICTED, 70
    )
    wait_for(
        lambda: logged(consumer, f"direct connection to {provider.peer_id} "),
        "the consumer never got a direct connection to the provider",
        60,
    )
    wait_for(
        lambda: (listed(consumer, provider.peer_id) or {}).get("relayed") is False,
        "the peer list still says relayed",
        30,
    )
    # New streams take the direct connection; the provider's answer comes back on it.
    sent = consumer.cli("chat", "send", provider.peer_id, "over the direct connection")
    assert sent["status"] == "delivered", sent
    back = provider.cli("chat", "send", consumer.peer_id, "and back")
    assert back["status"] == "delivered", back
    assert (listed(consumer, provider.peer_id) or {}).get("relayed") is False


@pytest.mark.timeout(300)
def test_symmetric_to_symmetric_stays_relayed_and_works(nat_lab: Lab, lab_daemons: Any) -> None:
    provider, consumer = relayed_pair(
        nat_lab, lab_daemons, NatKind.SYMMETRIC, NatKind.SYMMETRIC, 73
    )
    wait_for(
        lambda: logged(consumer, f"no direct connection to {provider.peer_id}: staying relayed"),
        "the consumer's hole punch never finished",
        60,
    )
    wait_for(
        lambda: (listed(consumer, provider.peer_id) or {}).get("relayed") is True,
        "the peer list does not say relayed",
        30,
    )
    sent = consumer.cli("chat", "send", provider.peer_id, "still through the relay")
    assert sent["status"] == "delivered", sent
    history = provider.cli("chat", "history", consumer.peer_id)["messages"]
    assert [m["text"] for m in history] == ["first contact", "still through the relay"]
