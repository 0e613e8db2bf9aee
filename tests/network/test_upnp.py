"""Port mapping against a real miniupnpd (issue 24 §1): a provider behind a home router that
offers UPnP, or only NAT-PMP, asks it to forward its listen port, advertises the router's
address for it, and a consumer behind a symmetric NAT, with no relay anywhere, reaches it
directly. When the provider withdraws its offer, the mapping goes."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import netlab
from tests.conftest import TEST_ADDRESS
from tests.daemon_harness import Daemon, spawner, wait_for
from tests.netlab import Lab, NatKind

BOOT_PORT = 4001
LISTEN = {"NUNET_NETWORK_LISTEN": "/ip4/0.0.0.0/tcp/9001"}


@pytest.fixture(scope="module", params=["UPnP", "NAT-PMP"])
def upnp_lab(request: pytest.FixtureRequest) -> Iterator[tuple[Lab, str]]:
    """The home router speaks both (the provider uses UPnP, asked first), or NAT-PMP only."""
    reason = netlab.upnp_unavailable_reason()
    if reason:
        pytest.skip(reason)
    with netlab.lab(public_hosts=1) as built:
        netlab.add_upnp_home(built, upnp=request.param == "UPnP")
        yield built, request.param


def _forwarded(lab: Lab) -> str:
    """The UPnP router's port forwards, as miniupnpd wrote them into nftables."""
    router = lab.homes[NatKind.UPNP].router
    done = subprocess.run(
        ["ip", "netns", "exec", router.ns, "nft", "list", "chain", "inet", "filter",
         "prerouting_miniupnpd"],
        capture_output=True, text=True, check=False, timeout=10,
    )  # fmt: skip
    return done.stdout


@pytest.mark.timeout(240)
def test_a_provider_behind_a_mapping_router_is_reached_directly_without_a_relay(
    upnp_lab: tuple[Lab, str], tmp_path: Path
) -> None:
    lab, method = upnp_lab
    started: list[Daemon] = []
    spawn = spawner(tmp_path, started)
    try:
        boot = spawn(
            "boot",
            90,
            env={"NUNET_NETWORK_LISTEN": f"/ip4/{lab.relay.addr}/tcp/{BOOT_PORT}"},
            netns=lab.relay.ns,
        )
        boot_addr = f"/ip4/{lab.relay.addr}/tcp/{BOOT_PORT}/p2p/{boot.peer_id}"
        # No relay anywhere: the boot node does not relay, and nobody asks it to.
        direct_only = {**LISTEN, "NUNET_NETWORK_RELAY_VIA_BOOTSTRAP": "false"}
        provider = spawn(
            "provider",
            91,
            bootstrap=boot_addr,
            env=direct_only,
            netns=lab.homes[NatKind.UPNP].hosts[0].ns,
        )
        consumer = spawn(
            "consumer",
            92,
            bootstrap=boot_addr,
            env=direct_only,
            netns=lab.homes[NatKind.SYMMETRIC].hosts[0].ns,
        )
        provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
        mapped = f"/ip4/{netlab.UPNP_WAN}/tcp/9001/p2p/{provider.peer_id}"

        def advertised() -> bool:
            peer = consumer.listed(provider.peer_id)
            return peer is not None and mapped in peer.get("addrs", [])

        wait_for(advertised, "the consumer never saw the provider's mapped address", 90)
        assert "dnat" in _forwarded(lab) and "10.77.4.10" in _forwarded(lab)
        # Behind a symmetric NAT, with no relay: the router's forward is the only way in.
        sent = consumer.cli("chat", "send", provider.peer_id, "hello through your router")
        assert sent["status"] == "delivered", sent
        history = provider.cli("chat", "history", consumer.peer_id)["messages"]
        assert [m["text"] for m in history] == ["hello through your router"]
        peer = consumer.listed(provider.peer_id)
        assert peer is not None and peer["relayed"] is False
        # The doctor says so (issue 24 §3): the forward, and AutoNAT asked again once it
        # was made, a dial-back through it reaching us.
        doctor = provider.cli("network", "doctor")
        assert doctor["upnp_addr"] == mapped, doctor
        assert doctor["upnp"] == (
            f"the router forwards {netlab.UPNP_WAN}:9001 to port 9001 on 10.77.4.10 ({method})"
        )
        reach = wait_for(
            lambda: (d := provider.cli("network", "doctor"))["reachability"] == "public" and d,
            f"AutoNAT never found the forwarded port reachable: {doctor}",
            40,
        )
        assert reach["consumers_reach"] == "direct" and reach["fix"] is None
        # Public through the forward, it keeps the forward: past the mapper's next look (5 s)
        # the rule is still there (a node that dropped it once public turned private again).
        time.sleep(6)
        assert "10.77.4.10" in _forwarded(lab)
        assert provider.cli("network", "doctor")["upnp_addr"] == mapped
        # The offer withdrawn (paused): the router forwards nothing to it any more.
        provider.cli("pause")
        wait_for(
            lambda: "10.77.4.10" not in _forwarded(lab),
            "the mapping outlived the offer",
            30,
        )
        assert provider.cli("network", "doctor")["upnp_addr"] is None
    finally:
        for daemon in started:
            daemon.stop(kill=True)
