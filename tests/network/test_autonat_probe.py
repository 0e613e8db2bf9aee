"""py-libp2p 0.8.1's AutoNAT, as shipped, between two plain hosts in the NAT lab: a client
behind the port-restricted router (nothing gets in) is told it was dialled back, because the
server's "dial" reuses the connection the request came on (docs/network-nat.md, "AutoNAT").
This test records the defect; engine/network/autonat.py is our protocol instead."""

from __future__ import annotations

import pytest

from tests.netlab import Lab, NatKind
from tests.network.probes import next_event, start

PROBE = "tests.network.autonat_probe"


@pytest.mark.timeout(180)
def test_the_librarys_autonat_says_ok_to_a_node_nobody_can_dial(nat_lab: Lab) -> None:
    server = start(nat_lab, nat_lab.relay, PROBE, "server", nat_lab.relay.addr)
    ready = next_event(server)
    assert ready["event"] == "ready"
    home = nat_lab.homes[NatKind.PORT_RESTRICTED]
    third = nat_lab.public[2].addr
    client = start(nat_lab, home.hosts[0], PROBE, "client", ready["addr"], home.router.addr, third)
    answers = {}
    for _ in range(3):
        event = next_event(client)
        answers[event["ask"]] = event
    # Its own client sends the listen address (0.0.0.0): never the observed IP, always refused.
    assert answers["own listen addrs"]["status"] == "E_DIAL_REFUSED"
    # The router's address, port 4002: nothing forwards it, yet the answer is OK.
    assert answers["router address"]["status"] == "OK", answers
    # A third party's address is refused (the observed-IP rule holds).
    assert answers["third party"]["status"] == "E_DIAL_REFUSED"
    # The verdict keeps one answer per server, the last: the refusal (which proves nothing)
    # overwrote the OK and counts as a failed dial, so the status is PRIVATE (2) here for
    # the wrong reason, and PUBLIC had the third ask not been made.
    assert next_event(client) == {"event": "status", "status": 2}
    assert client.wait(timeout=30) == 0
    server.kill()
    server.wait(timeout=10)
