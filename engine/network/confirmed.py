"""Which addresses of a peer we may dial: only ones a connection confirmed (issue 21).

An advert is signed by its peer, but its addresses are whatever that peer wrote, and adverts
are relayed: 1,000 fresh identities' adverts over one connection made our nodes open 2,801
TCP connections to an address and port of the attacker's choosing (a reflection and
port-scan primitive). A dial budget (dialbudget.py) slowed that down; here it ends. A peer's
advertised address is dialled only when its IP is one the peer was *seen* at: the source of
a connection it made to us, or the address we reached it at (a completed TCP handshake and
Noise, which no one can fake for an address they do not hold). An attacker can then only
make us dial its own machines.

A newcomer has seen nobody yet. Its bootstrap peers (configured by its user, and dialled
already) have: on ``CONFIRM_PROTOCOL`` it asks them which addresses of the peers it wants to
reach they confirmed the same way, and dials those. A bootstrap answers only for peers it
saw or had confirmed by its own bootstrap peers, so the chain of trust is the chain of
configured bootstraps; any other peer's answer is not asked for.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import msgspec
import multiaddr
import trio
from libp2p.custom_types import TProtocol

from engine.domain import wire
from engine.domain.ratelimit import PeerRateLimiter
from engine.network.addrs import dialable
from engine.network.one_request import serve_one_request

log = logging.getLogger("nunet.network.confirmed")

CONFIRM_PROTOCOL = TProtocol("/nunet/confirm/1.0.0")
CONFIRM_TIMEOUT_S = 5.0
MAX_ASKED = 64  # peers per question
MAX_PEERS = 4096  # peers whose sightings we remember (oldest forgotten first)
MAX_IPS = 4  # addresses a peer was seen at, per peer
MAX_VOUCHED = 2  # addresses a bootstrap confirmed, per peer (what a dial tries)
MAX_BYTES = 64 * 1024


class ConfirmQuery(wire.Schema, frozen=True):
    """Which addresses of these peers have you confirmed?"""

    peer_ids: Annotated[
        list[Annotated[str, msgspec.Meta(max_length=128)]], msgspec.Meta(max_length=MAX_ASKED)
    ]


class ConfirmAnswer(wire.Schema, frozen=True):
    """Per peer id asked, the multiaddrs (``.../p2p/<peer id>``) the answerer confirmed."""

    addrs: Annotated[
        dict[
            str,
            Annotated[
                list[Annotated[str, msgspec.Meta(max_length=256)]],
                msgspec.Meta(max_length=MAX_VOUCHED),
            ],
        ],
        msgspec.Meta(max_length=MAX_ASKED),
    ]


_encoder = msgspec.msgpack.Encoder()


def _ip_of(addr: multiaddr.Multiaddr) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    for proto in ("ip4", "ip6"):
        with contextlib.suppress(Exception):
            return ipaddress.ip_address(addr.value_for_protocol(proto))
    return None


class ConfirmedAddrs:
    """Where each peer was seen, and which of its addresses a bootstrap confirmed."""

    def __init__(self, max_peers: int = MAX_PEERS) -> None:
        self.max_peers = max_peers
        self._seen: OrderedDict[str, list[str]] = OrderedDict()  # peer -> IPs
        self._vouched: OrderedDict[str, tuple[str, ...]] = OrderedDict()  # peer -> multiaddrs

    def observe(self, peer_id: str, observed: str | None) -> None:
        """A connection with ``peer_id`` runs over ``observed`` (``/ip4/a.b.c.d/tcp/p``)."""
        if not observed:
            return
        try:
            ip = _ip_of(multiaddr.Multiaddr(observed))
        except Exception:
            return
        if ip is None:
            return
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        ips = self._seen.pop(peer_id, [])
        if str(ip) not in ips:
            ips = [str(ip), *ips][:MAX_IPS]
        self._seen[peer_id] = ips
        self._trim(self._seen)

    def vouch(self, peer_id: str, addrs: Sequence[str]) -> None:
        """A bootstrap peer confirmed these addresses of ``peer_id``."""
        good = tuple(str(a) + "/p2p/" + peer_id for a in dialable(peer_id, addrs)[:MAX_VOUCHED])
        if good:
            self._vouched.pop(peer_id, None)
            self._vouched[peer_id] = good
            self._trim(self._vouched)

    def seen(self, peer_id: str) -> bool:
        return peer_id in self._seen

    def confirmed(self, peer_id: str, claimed: Sequence[str]) -> list[multiaddr.Multiaddr]:
        """Of ``claimed`` (an advert's addresses), those on an IP the peer was seen at, then
        those a bootstrap confirmed: the only addresses of it we dial."""
        ips = {ipaddress.ip_address(ip) for ip in self._seen.get(peer_id, ())}
        good: list[multiaddr.Multiaddr] = []
        if ips:
            for addr in dialable(peer_id, claimed):
                ip = _ip_of(addr)
                if ip is None:
                    continue
                if ip in ips:
                    good.append(addr)
                elif ip.is_unspecified:
                    # Listening on every interface (0.0.0.0): its port, at the IPs we saw it
                    # at (on its own machine, 0.0.0.0 itself reaches it).
                    good.extend(_at_seen_ips(addr, ip, ips))
        for addr in dialable(peer_id, self._vouched.get(peer_id, ())):
            if all(str(addr) != str(g) for g in good):
                good.append(addr)
        return good

    def _trim(self, table: OrderedDict[str, Any]) -> None:
        while len(table) > self.max_peers:
            table.popitem(last=False)


def _at_seen_ips(
    addr: multiaddr.Multiaddr,
    unspecified: ipaddress.IPv4Address | ipaddress.IPv6Address,
    seen: set[ipaddress.IPv4Address | ipaddress.IPv6Address],
) -> list[multiaddr.Multiaddr]:
    family = "ip4" if unspecified.version == 4 else "ip6"
    out = []
    for ip in sorted(seen, key=str):
        if ip.version != unspecified.version:
            continue
        if ip.is_loopback:
            out.append(addr)
        else:
            out.append(
                multiaddr.Multiaddr(
                    str(addr).replace(f"/{family}/{unspecified}/", f"/{family}/{ip}/", 1)
                )
            )
    return list({str(a): a for a in out}.values())


class ConfirmService:
    """Both sides of ``CONFIRM_PROTOCOL``. ``claimed(peer_id)``: the addresses the peer's
    advert names (None: not in our table); ``observed(peer_id)``: the address a live
    connection to it runs over."""

    def __init__(
        self,
        host: Any,
        confirmed: ConfirmedAddrs,
        claimed: Callable[[str], Sequence[str] | None],
        observed: Callable[[str], str | None],
    ) -> None:
        self.host = host
        self.confirmed = confirmed
        self.claimed = claimed
        self.observed = observed
        self._limiter = PeerRateLimiter(2.0, 10.0)
        self.confirmed_for = 0  # peers whose address we confirmed to another, for tests
        host.set_stream_handler(CONFIRM_PROTOCOL, self._serve)

    def answer_for(self, peer_ids: Sequence[str]) -> dict[str, list[str]]:
        answer: dict[str, list[str]] = {}
        for peer_id in dict.fromkeys(peer_ids):
            claimed = self.claimed(peer_id)
            if claimed is None:
                continue
            # A peer connected right now counts as seen even before the upkeep noticed it.
            self.confirmed.observe(peer_id, self.observed(peer_id))
            good = self.confirmed.confirmed(peer_id, claimed)[:MAX_VOUCHED]
            if good:
                answer[peer_id] = [f"{a}/p2p/{peer_id}" for a in good]
        self.confirmed_for += len(answer)
        return answer

    async def _serve(self, stream: Any) -> None:
        if not self._limiter.allow(str(stream.muxed_conn.peer_id)):
            with contextlib.suppress(Exception):
                await stream.reset()
            return

        async def answer(data: bytes) -> bytes:
            query = msgspec.msgpack.decode(data, type=ConfirmQuery)
            reply = ConfirmAnswer(addrs=self.answer_for(query.peer_ids))
            return wire.frame(_encoder.encode(reply))

        await serve_one_request(stream, MAX_BYTES, answer, CONFIRM_TIMEOUT_S, "confirmation")

    async def ask(self, voucher: Any, peer_ids: Sequence[str]) -> int:
        """Ask ``voucher`` (a bootstrap peer we are connected to) to confirm addresses of
        ``peer_ids``; returns how many peers it confirmed."""
        stream = None
        got = 0
        try:
            with trio.fail_after(CONFIRM_TIMEOUT_S):
                stream = await self.host.new_stream(voucher, [CONFIRM_PROTOCOL])
                query = ConfirmQuery(peer_ids=list(peer_ids)[:MAX_ASKED])
                await wire.write_frame(stream, _encoder.encode(query), MAX_BYTES)
                await stream.close()
                data = await wire.read_frame(stream, MAX_BYTES)
                if data is None:
                    return 0
                answer = msgspec.msgpack.decode(data, type=ConfirmAnswer)
                for peer_id, addrs in answer.addrs.items():
                    if peer_id in query.peer_ids:
                        self.confirmed.vouch(peer_id, addrs)
                        got += 1
        except (Exception, trio.TooSlowError) as exc:
            log.info("address confirmation by %s failed: %r", voucher, exc)
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.reset()
        return got
