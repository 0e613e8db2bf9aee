"""Which advertised addresses can be dialled: an advert with none is ignored, not listed.

An advert is signed by its peer but its addresses are whatever that peer wrote: none at all,
``/ip4/0.0.0.0/tcp/0``, or text that is no multiaddr. Listing such a peer made discovery dial
a peer the peerstore knew no address for, which raised and restarted the network.
"""

from __future__ import annotations

from collections.abc import Sequence

import multiaddr
from libp2p.peer.peerinfo import info_from_p2p_addr

from engine.network.wire import Advert

# Only the first few addresses of an advert are looked at: each one costs a parse.
MAX_ADDRS = 8
_HOST_PROTOCOLS = frozenset({"ip4", "ip6", "dns", "dns4", "dns6"})


def dialable(peer_id: str, addrs: Sequence[str]) -> list[multiaddr.Multiaddr]:
    """The transport parts of ``addrs`` (``…/p2p/<peer_id>``) with a host and a TCP port > 0.

    An unspecified host (0.0.0.0) with a real port counts: it is what a node listening on all
    interfaces advertises, and it does reach a peer on the same machine.
    """
    good: list[multiaddr.Multiaddr] = []
    for addr in addrs[:MAX_ADDRS]:
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
    """A withdrawal needs no address; an offer without a dialable one cannot be acted on."""
    return advert.withdrawn or bool(dialable(advert.peer_id, advert.addrs))
