"""Which advertised addresses can be dialled: an advert with none is ignored, not listed.

An advert is signed by its peer but its addresses are whatever that peer wrote: none at all,
``/ip4/0.0.0.0/tcp/0``, or text that is no multiaddr. Listing such a peer made discovery dial
a peer the peerstore knew no address for, which raised and restarted the network.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import multiaddr
from libp2p.peer.peerinfo import info_from_p2p_addr

from engine.domain.wire import Advert

# Only the first few addresses of an advert are looked at: each one costs a parse.
MAX_ADDRS = 8
RELAYED = "/p2p-circuit"
_HOST_PROTOCOLS = frozenset({"ip4", "ip6", "dns", "dns4", "dns6"})


def dialable(peer_id: str, addrs: Sequence[str]) -> list[multiaddr.Multiaddr]:
    """The transport parts of ``addrs`` (``…/p2p/<peer_id>``) with a host and a TCP port > 0.

    An unspecified host (0.0.0.0) with a real port counts: it is what a node listening on all
    interfaces advertises, and it does reach a peer on the same machine.
    """
    good: list[multiaddr.Multiaddr] = []
    for addr in addrs[:MAX_ADDRS]:
        if RELAYED in addr:
            continue  # reached through its relay only (relay.py), never dialled as TCP
        try:
            info = info_from_p2p_addr(multiaddr.Multiaddr(addr))
            if str(info.peer_id) != peer_id:
                continue
            for transport in info.addrs:
                names = [p.name for p in transport.protocols()]
                if not names or names[0] not in _HOST_PROTOCOLS or "tcp" not in names:
                    continue
                if 0 < int(transport.value_for_protocol("tcp")) < 65536:
                    good.append(transport)
        except Exception:
            continue  # not a multiaddr, no /p2p part, a bad port: not dialable
    return good


def is_usable(advert: Advert) -> bool:
    """A withdrawal needs no address; an offer without a dialable one cannot be acted on.
    A circuit address (``…/p2p/RELAY/p2p-circuit/p2p/PEER``) counts: a peer behind NAT has
    no other."""
    return (
        advert.withdrawn
        or bool(dialable(advert.peer_id, advert.addrs))
        or any(
            RELAYED in a and a.endswith(f"/p2p/{advert.peer_id}") for a in advert.addrs[:MAX_ADDRS]
        )
    )


def subnet_of(addrs: Sequence[str]) -> str:
    """The /24 (IPv4) or /56 (IPv6) of the first IP address in ``addrs``; "" when none.

    Identities are free but addresses are not: the peer table's per-subnet quota groups
    peers by where they say (or are seen) to be, so a thousand keys behind one address, or
    naming one address, share one small quota instead of filling the table.
    """
    for addr in addrs[:MAX_ADDRS]:
        parts = addr.split("/")
        if len(parts) < 3 or parts[1] not in ("ip4", "ip6"):
            continue
        try:
            ip = ipaddress.ip_address(parts[2])
        except ValueError:
            continue
        prefix = 24 if ip.version == 4 else 56
        return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))
    return ""
