"""AutoNAT and the connectivity doctor between real daemons in the NAT lab: a node on the
public segment learns it is publicly reachable, a provider behind the port-restricted NAT
that it is not; its doctor lists its relay reservation and names the port to forward."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import TEST_ADDRESS, run_cli
from tests.daemon_harness import Daemon, wait_for
from tests.netlab import Lab, NatKind

RELAY_PORT = 4001
# A fixed port on every address: what the dial-backs try, and what the doctor's fix names.
ANYWHERE = {"NUNET_NETWORK_LISTEN": "/ip4/0.0.0.0/tcp/9001"}


def _doctor(daemon: Daemon) -> dict[str, Any]:
    return dict(daemon.cli("network", "doctor"))


def _verdict(daemon: Daemon, verdict: str) -> Any:
    def check() -> dict[str, Any] | None:
        report = _doctor(daemon)
        return report if report["reachability"] == verdict else None

    return check


@pytest.mark.timeout(300)
def test_public_node_is_public_and_natted_provider_is_private_with_the_fix(
    nat_lab: Lab, lab_daemons: Any
) -> None:
    relay = lab_daemons(
        "relay",
        71,
        env={
            "NUNET_NETWORK_LISTEN": f"/ip4/{nat_lab.relay.addr}/tcp/{RELAY_PORT}",
            "NUNET_NETWORK_RELAY_SERVICE": "true",
        },
        netns=nat_lab.relay.ns,
    )
    boot = f"/ip4/{nat_lab.relay.addr}/tcp/{RELAY_PORT}/p2p/{relay.peer_id}"
    public = lab_daemons("public", 72, bootstrap=boot, env=ANYWHERE, netns=nat_lab.public[1].ns)
    home = nat_lab.homes[NatKind.PORT_RESTRICTED]
    provider = lab_daemons("provider", 73, bootstrap=boot, env=ANYWHERE, netns=home.hosts[0].ns)
    public.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)

    report = wait_for(_verdict(public, "public"), "the public node never found itself public", 120)
    reached = [e for e in report["evidence"] if e["outcome"] == "reached"]
    assert {e["peer_id"] for e in reached} >= {relay.peer_id}, report
    assert f"/ip4/{nat_lab.public[1].addr}/tcp/9001" in {e["addr"] for e in reached}, report
    assert report["consumers_reach"] == "direct"
    assert report["fix"] is None
    assert report["upnp_addr"] is None  # no UPnP router on the public segment
    assert f"/ip4/{nat_lab.public[1].addr}/tcp" in " ".join(report["observed_addrs"])

    report = wait_for(_verdict(provider, "private"), "the provider never found itself private", 120)
    failed = [e for e in report["evidence"] if e["outcome"] == "failed"]
    router = f"/ip4/{home.router.addr}/tcp/9001"
    assert (relay.peer_id, router) in {(e["peer_id"], e["addr"]) for e in failed}, report
    assert not [e for e in report["evidence"] if e["outcome"] == "reached"], report
    # The port, and the home address a forward must point at (read from the socket); once
    # its router did not answer UPnP, turning that on is said too.
    assert report["fix"].startswith(
        f"forward (or open) TCP port 9001 on your router to this host ({home.hosts[0].addr})"
    ), report
    # The observed address is the router's, never the home address.
    assert all(a.startswith(f"/ip4/{home.router.addr}/") for a in report["observed_addrs"])

    def reserved() -> dict[str, Any] | None:
        got = _doctor(provider)
        return got if got["reservations"] else None

    report = wait_for(reserved, "the private provider never reserved on the relay", 120)
    (reservation,) = report["reservations"]
    assert reservation["relay_peer_id"] == relay.peer_id
    assert reservation["circuit_addr"] == f"{boot}/p2p-circuit/p2p/{provider.peer_id}"
    assert report["consumers_reach"] == "relayed"
    to_relay = [c for c in report["connections"] if c["peer_id"] == relay.peer_id]
    assert to_relay and to_relay[0]["path"] == "direct" and to_relay[0]["transport"] == "tcp"

    # The public node holds no reservation: it needs none.
    assert _doctor(public)["reservations"] == []

    # A consumer behind the symmetric NAT reaches the provider through the relay: both
    # doctors list that connection as relayed, carried by the relay.
    consumer = lab_daemons(
        "consumer",
        74,
        bootstrap=boot,
        env=ANYWHERE,
        netns=nat_lab.homes[NatKind.SYMMETRIC].hosts[1].ns,
    )
    circuit = f"{boot}/p2p-circuit/p2p/{provider.peer_id}"

    def listed() -> bool:
        peers = consumer.cli("peer", "list")["peers"]
        return any(p["peer_id"] == provider.peer_id and circuit in p["addrs"] for p in peers)

    wait_for(listed, "the consumer never listed the provider's relay address", 120)
    assert consumer.cli("chat", "send", provider.peer_id, "hi")["status"] == "delivered"
    for side, other in ((consumer, provider), (provider, consumer)):
        conns = {c["peer_id"]: c for c in _doctor(side)["connections"]}
        assert conns[other.peer_id]["path"] == "relayed", conns
        assert conns[other.peer_id]["via_relay"] == relay.peer_id, conns
        assert conns[relay.peer_id]["path"] == "direct", conns
    # The text form says the same in a few lines, with the fix.
    text = run_cli("network", "doctor", home=provider.home)
    assert text.returncode == 0, text.stderr
    assert "reachability  private" in text.stdout
    assert "fix           forward (or open) TCP port 9001" in text.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", [NatKind.FULL_CONE, NatKind.SYMMETRIC], ids=str)
def test_a_node_behind_the_other_nats_is_private(
    nat_lab: Lab, lab_daemons: Any, kind: NatKind
) -> None:
    """No router kind maps the listen port without a forward: a node's outbound flows leave
    from other ports (the full cone admits anyone only to a port already used outbound)."""
    relay = lab_daemons(
        "relay",
        75,
        env={"NUNET_NETWORK_LISTEN": f"/ip4/{nat_lab.relay.addr}/tcp/{RELAY_PORT}"},
        netns=nat_lab.relay.ns,
    )
    boot = f"/ip4/{nat_lab.relay.addr}/tcp/{RELAY_PORT}/p2p/{relay.peer_id}"
    home = nat_lab.homes[kind]
    node = lab_daemons("node", 76, bootstrap=boot, env=ANYWHERE, netns=home.hosts[1].ns)
    report = wait_for(_verdict(node, "private"), f"never private behind the {kind} NAT", 120)
    assert report["consumers_reach"] == "no"  # no relay: nothing to reserve on
    assert report["fix"].startswith(
        f"forward (or open) TCP port 9001 on your router to this host ({home.hosts[1].addr})"
    )
