"""The overlay's packet rules (docs/cluster-overlay.md), pure so both ends and the tests share
them: a job's subnet is one private IPv4 /24; a packet crosses only when it is a well-formed
IPv4 packet no larger than the MTU whose source is its sender's own address and whose
destination is another member's. Everything else (IPv6, ARP-like junk, broadcast, another
subnet, a forged source) is dropped and counted."""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence

# The TUN device's MTU, and the largest packet a frame carries. Not a path's 1500: packets
# cross inside a reliable, ordered libp2p stream and are never fragmented on the way, and the
# cost of the carriage is per packet (docs/cluster-overlay.md: gloo's all-reduce through the
# overlay measured 11.7 MiB/s at 1400, 16.3 at 9000 and 40.8 at 32000 on one machine).
MTU = 32000
SUBNET_PREFIX = 24
HEADER_MIN = 20


class OverlayError(ValueError):
    """A subnet or address that the overlay does not take (said in one line)."""


def parse_subnet(text: str) -> ipaddress.IPv4Network:
    """``10.x.y.0/24`` (any private /24): OverlayError otherwise."""
    try:
        net = ipaddress.IPv4Network(text, strict=True)
    except ValueError as exc:
        raise OverlayError(f"subnet {text!r}: {exc}; give a private /24 like 10.7.1.0/24") from exc
    if net.prefixlen != SUBNET_PREFIX or not net.is_private or net.is_loopback:
        raise OverlayError(f"subnet {text!r}: give a private /24 like 10.7.1.0/24")
    return net


def member_address(net: ipaddress.IPv4Network, text: str) -> ipaddress.IPv4Address:
    """A host address of ``net`` (not its network or broadcast address)."""
    try:
        address = ipaddress.IPv4Address(text)
    except ValueError as exc:
        raise OverlayError(f"address {text!r}: {exc}") from exc
    if address not in net or address in (net.network_address, net.broadcast_address):
        raise OverlayError(f"address {text}: not a host address of {net}")
    return address


def endpoints(packet: bytes, mtu: int = MTU) -> tuple[bytes, bytes] | None:
    """(source, destination) as 4 bytes each of a well-formed IPv4 packet of at most ``mtu``
    bytes; None for anything else."""
    size = len(packet)
    if size < HEADER_MIN or size > mtu or packet[0] >> 4 != 4:
        return None
    ihl = (packet[0] & 0x0F) * 4
    (total,) = struct.unpack_from("!H", packet, 2)
    if ihl < HEADER_MIN or ihl > size or total != size:
        return None
    return packet[12:16], packet[16:20]


def check_members(
    subnet: str, address: str, members: Sequence[tuple[str, str]]
) -> tuple[ipaddress.IPv4Network, bytes, dict[str, bytes]]:
    """The job's /24, our address and the other members' (peer id -> address) from
    (peer id, address) pairs, or OverlayError saying what is wrong: one address per member,
    ours among them, all hosts of the /24, one replica per provider."""
    net = parse_subnet(subnet)
    own = member_address(net, address).packed
    others: dict[str, bytes] = {}
    seen: set[bytes] = set()
    for peer_id, text in members:
        packed = member_address(net, text).packed
        if packed in seen:
            raise OverlayError(f"address {text} is given to two members")
        seen.add(packed)
        if packed == own:
            continue
        if peer_id in others:
            raise OverlayError(f"peer {peer_id} has two replicas: one per provider for now")
        others[peer_id] = packed
    if own not in seen:
        raise OverlayError(f"address {address} is not among the members")
    if not others:
        raise OverlayError("an overlay needs another member")
    return net, own, others
