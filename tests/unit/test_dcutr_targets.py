"""Which addresses of a peer's DCUtR CONNECT we may dial (engine/network/dcutr.py)."""

from __future__ import annotations

import ipaddress

import multiaddr
import pytest

from engine.network.dcutr import MAX_ADDRS, decode_addrs, dial_target

LAN = [ipaddress.ip_network("10.77.1.0/24"), ipaddress.ip_network("fd00:1::/64")]


@pytest.mark.parametrize(
    ("addr", "expected"),
    [
        ("/ip4/198.18.0.101/tcp/9001", ("198.18.0.101", 9001)),
        # With a peer id: the same address (the peer's id is known from the connection).
        ("/ip4/203.0.113.7/tcp/4001/p2p/QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N",
         ("203.0.113.7", 4001)),
        ("/ip6/2001:db8::1/tcp/9001", ("2001:db8::1", 9001)),
        ("/ip4/127.0.0.1/tcp/9001", None),  # loopback
        ("/ip6/::1/tcp/9001", None),
        ("/ip4/169.254.1.1/tcp/9001", None),  # link-local
        ("/ip6/fe80::1/tcp/9001", None),
        ("/ip4/10.77.1.11/tcp/9001", None),  # our own LAN
        ("/ip6/fd00:1::5/tcp/9001", None),
        ("/ip4/224.0.0.1/tcp/9001", None),  # multicast
        ("/ip4/0.0.0.0/tcp/9001", None),
        ("/ip4/240.0.0.1/tcp/9001", None),  # reserved
        ("/ip4/198.18.0.101/tcp/22", None),  # a well-known service port
        ("/ip4/198.18.0.101/udp/9001/quic-v1", None),
        ("/dns4/example.com/tcp/9001", None),
        ("/ip4/198.18.0.2/tcp/4001/p2p/QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N/p2p-circuit",
         None),
        ("/ip6/::ffff:127.0.0.1/tcp/9001", None),  # loopback behind an IPv4-mapped address
    ],
)  # fmt: skip
def test_dial_target(addr: str, expected: tuple[str, int] | None) -> None:
    assert dial_target(multiaddr.Multiaddr(addr), LAN) == expected


def test_only_the_first_addresses_of_a_connect_are_read() -> None:
    raw = [multiaddr.Multiaddr(f"/ip4/198.18.0.4/tcp/{5000 + i}").to_bytes() for i in range(50)]
    raw.insert(1, b"\xff\xff not a multiaddr")
    decoded = decode_addrs(raw)
    assert len(decoded) <= MAX_ADDRS
    assert all("/tcp/50" in str(a) for a in decoded)
