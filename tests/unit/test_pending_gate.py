"""pending_gate.address_key: what counts as one remote party."""

from __future__ import annotations

import pytest

from engine.network.pending_gate import address_key


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("::ffff:203.0.113.7", "203.0.113.7"),  # an IPv4 peer on a dual-stack socket
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),  # one host can use its whole /64
        ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
        ("not an address", "not an address"),
    ],
)
def test_one_party_is_an_ipv4_address_or_an_ipv6_64(host: str, key: str) -> None:
    assert address_key(host) == key
