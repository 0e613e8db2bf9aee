"""py-libp2p 0.8.1's circuit relay v2, as shipped: two plain hosts behind two different NATs
reach each other through a relay host on the public segment (docs/network-nat.md)."""

from __future__ import annotations

import pytest

from tests.netlab import Lab, NatKind
from tests.network.probes import next_event, start

PROBE = "tests.network.relay_probe"

# The pairs a direct connection could never serve: the listener's router lets nothing in.
PAIRS = [
    (NatKind.PORT_RESTRICTED, NatKind.SYMMETRIC),
    (NatKind.SYMMETRIC, NatKind.SYMMETRIC),
    (NatKind.SYMMETRIC, NatKind.FULL_CONE),
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("listener_kind", "dialer_kind"), PAIRS, ids=lambda k: str(k))
def test_a_stream_through_the_relay(
    nat_lab: Lab, listener_kind: NatKind, dialer_kind: NatKind
) -> None:
    relay = start(nat_lab, nat_lab.relay, PROBE, "relay", nat_lab.relay.addr)
    ready = next_event(relay)
    assert ready["event"] == "ready"
    listener_host = nat_lab.homes[listener_kind].hosts[0]
    dialer_host = nat_lab.homes[dialer_kind].hosts[1]
    listener = start(nat_lab, listener_host, PROBE, "listener", ready["addr"])
    reserved = next_event(listener)
    assert reserved["event"] == "reserved", reserved
    dialer = start(nat_lab, dialer_host, PROBE, "dialer", reserved["circuit"])
    assert next_event(dialer) == {"event": "dialled", "remote": reserved["peer_id"]}
    assert next_event(dialer) == {"event": "echo", "ok": True, "bytes": 1152}
    assert dialer.wait(timeout=30) == 0
    for proc in (listener, relay):
        proc.kill()
        proc.wait(timeout=10)
