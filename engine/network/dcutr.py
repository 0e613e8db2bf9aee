"""Hole punching (DCUtR): a relayed connection upgraded to a direct TCP one where the NATs allow.

Two nodes that reach each other through a relay (relay.py) exchange, over that relayed
connection, the addresses they are seen at (``/libp2p/dcutr``: CONNECT, CONNECT, SYNC). The
responder then opens its router towards the initiator's address and the initiator dials in
(``HolePunch._punch`` says how, and why not both at once). Once a direct connection exists,
new streams take it (the swarm prefers direct connections); the relayed one is left to end
(the swarm trims a peer's extra connection after its 20 s grace, or the relay's circuit
ends) so that streams still on it finish. When the initiator is publicly reachable the
responder's plain dial gets through (connection reversal). Between two symmetric NATs
nothing does and the relayed connection stays.

py-libp2p 0.8.1's ``relay/circuit_v2/dcutr.py`` speaks the same protocol but is not run here
(docs/network-nat.md, measured in the NAT lab): it dials every address a CONNECT names, any
number of them, loopback and LAN included, and adds them to the peerstore for ten minutes;
it answers on any connection, relayed or not; its initiator always upgrades its dial as the
Noise responder, so when its SYN lands on the peer's listener (not a simultaneous open) both
ends are responders and the handshake fails; and its auto-drive loop retries every relayed
peer every 2 s. Here a CONNECT is accepted only on a relayed connection, at most MAX_ADDRS of
its addresses are dialled, never loopback, link-local, multicast, our own LAN or a port
under 1024, attempts are rate-limited per peer and dials per target address, and nothing
goes into the peerstore.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import multiaddr
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.dcutr_pb2 import HolePunch as HolePunchMsg
from libp2p.relay.circuit_v2.utils import write_delimited_msg
from libp2p.utils.varint import read_varint_prefixed_bytes_limited

from engine.domain.ratelimit import PeerRateLimiter, ThrottledWarning
from engine.network.host import has_direct, has_relayed, is_relayed_conn

log = logging.getLogger("nunet.network.dcutr")

PROTOCOL = TProtocol("/libp2p/dcutr")
MAX_MESSAGE = 4096  # the spec's bound on one message
MAX_ADDRS = 4  # addresses of a peer's CONNECT that we dial (the rest are ignored)
READ_S = 10.0  # for each message of the exchange
ROUND_S = 3.0  # how long one round of dials may take
RETRY_S = 0.5  # the initiator's second dial, if the first was refused
# The opening SYN (_punch): past our router (1 hop; 2 for a host behind two), dead before the
# peer's on a real path (the lab's routers are one hop apart: there it reaches the peer's).
OPEN_TTL = 2
# The opening socket is closed this soon (its SYN is out; closing a SYN_SENT socket sends
# nothing): the peer's SYN must find no socket of ours for that pair of addresses but our
# listener, even where no router answers the dead SYN with an ICMP error.
OPEN_WAIT_S = 0.02
SYNC_GAP_S = 0.05  # the initiator dials this long after the responder's SYN left
# Per peer: a few attempts, then one a minute (a relayed connection that cannot be upgraded
# is not asked again and again). Per target address: what any number of peers together can
# make us dial there (the amplification bound: one SYN per dial, from our listen port).
PEER_BURST, PEER_RATE = 3.0, 1 / 60
TARGET_BURST, TARGET_RATE = 4.0, 1 / 30


def _lan_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The networks of this machine's interfaces: a CONNECT naming one is never dialled (a
    peer must not make us scan our own LAN)."""
    import psutil

    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    with contextlib.suppress(Exception):
        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if not a.netmask:
                    continue
                with contextlib.suppress(ValueError):
                    nets.append(
                        ipaddress.ip_network(f"{a.address.split('%')[0]}/{a.netmask}", strict=False)
                    )
    return nets


def dial_target(
    addr: multiaddr.Multiaddr,
    lan: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network],
) -> tuple[str, int] | None:
    """(ip, port) of a CONNECT address we may dial, None for anything else: TCP over an IP
    literal only, not through a relay, not loopback, link-local, multicast, unspecified or
    reserved, not on one of our own networks, not a port under 1024."""
    text = str(addr)
    if "/p2p-circuit" in text:
        return None
    parts = text.split("/")
    # /ip4/A/tcp/P[/p2p/ID]
    if len(parts) < 5 or parts[1] not in ("ip4", "ip6") or parts[3] != "tcp":
        return None
    if len(parts) > 5 and not (len(parts) == 7 and parts[5] == "p2p"):
        return None
    try:
        ip = ipaddress.ip_address(parts[2])
        port = int(parts[4])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if (
        ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_unspecified
        or ip.is_reserved
        or not 1024 <= port <= 65535
        or any(ip in net for net in lan)
    ):
        return None
    return str(ip), port


def decode_addrs(raw: Sequence[bytes]) -> list[multiaddr.Multiaddr]:
    out = []
    for item in raw[:MAX_ADDRS]:
        with contextlib.suppress(Exception):
            addr = multiaddr.Multiaddr(item)
            str(addr)  # bytes are parsed lazily: a bad one raises here, not in dial_target
            out.append(addr)
    return out


async def _read(stream: Any) -> HolePunchMsg:
    with trio.fail_after(READ_S):
        data = await read_varint_prefixed_bytes_limited(stream, MAX_MESSAGE)
    msg = HolePunchMsg()
    msg.ParseFromString(data)
    return msg


async def _write(stream: Any, kind: int, addrs: Sequence[bytes] = ()) -> None:
    msg = HolePunchMsg()
    msg.type = kind  # type: ignore[assignment]
    msg.ObsAddrs.extend(addrs)
    with trio.fail_after(READ_S):
        await write_delimited_msg(stream, msg)


class HolePunch:
    """Both sides of DCUtR for one host: ``install()`` answers peers, ``upgrade(peer)`` asks."""

    def __init__(
        self,
        host: Any,
        *,
        lan: Callable[[], list[ipaddress.IPv4Network | ipaddress.IPv6Network]] = _lan_networks,
    ) -> None:
        self.host = host
        self._lan = lan  # our own networks, never dialled for a peer
        self._peer_rate = PeerRateLimiter(PEER_RATE, PEER_BURST)
        self._target_rate = PeerRateLimiter(TARGET_RATE, TARGET_BURST)
        self._busy: set[ID] = set()
        self._refused = ThrottledWarning(log, "dcutr: refused %d requests (last from %s: %s)")
        self.attempts = 0
        self.upgraded = 0
        self.dials = 0

    def install(self) -> None:
        self.host.set_stream_handler(PROTOCOL, self._handle)

    # --- what we tell the peer ------------------------------------------------------------

    def _listen_tcp(self) -> list[tuple[str, int]]:
        out = []
        with contextlib.suppress(Exception):
            for addr in self.host.get_transport_addrs():
                parts = str(addr).split("/")
                if len(parts) >= 5 and parts[1] in ("ip4", "ip6") and parts[3] == "tcp":
                    out.append((parts[2], int(parts[4])))
        return out

    def our_addrs(self) -> list[bytes]:
        """Where the peer should dial us: the address our router shows (an observed IP) at
        our listen port (cone routers keep the port), then the specific addresses we listen
        on (a public node that does not listen on 0.0.0.0); at most MAX_ADDRS."""
        listen = self._listen_tcp()
        ports = sorted({port for _, port in listen})
        found: list[str] = []
        for ip in self.observed_ips():
            family = "ip6" if ":" in ip else "ip4"
            found += [f"/{family}/{ip}/tcp/{port}" for port in ports]
        for ip, port in listen:
            with contextlib.suppress(ValueError):
                address = ipaddress.ip_address(ip)
                if not (address.is_unspecified or address.is_loopback or address.is_link_local):
                    found.append(f"/{'ip6' if ':' in ip else 'ip4'}/{ip}/tcp/{port}")
        out = []
        for text in dict.fromkeys(found):
            with contextlib.suppress(Exception):
                out.append(multiaddr.Multiaddr(text).to_bytes())
        return out[:MAX_ADDRS]

    def observed_ips(self) -> list[str]:
        manager = getattr(self.host, "_observed_addr_manager", None)
        ips: list[str] = []
        with contextlib.suppress(Exception):
            for addr in manager.addrs(min_observers=1) if manager is not None else []:
                parts = str(addr).split("/")
                relayed = "/p2p-circuit" in str(addr)
                if len(parts) > 2 and parts[1] in ("ip4", "ip6") and not relayed:
                    ips.append(parts[2])
        return list(dict.fromkeys(ips))

    # --- the two sides ----------------------------------------------------------------------

    async def upgrade(self, peer_id: ID) -> bool:
        """Ask ``peer_id``, to which we hold a relayed connection, for a direct one. True once
        a direct connection exists (also when one already did)."""
        if has_direct(self.host, peer_id):
            return True
        if not has_relayed(self.host, peer_id) or peer_id in self._busy:
            return False
        if not self._peer_rate.allow(str(peer_id)):
            return False
        self._busy.add(peer_id)
        self.attempts += 1
        stream = None
        try:
            stream = await self.host.new_stream(peer_id, [PROTOCOL])
            await _write(stream, HolePunchMsg.CONNECT, self.our_addrs())
            sent = time.monotonic()
            answer = await _read(stream)
            if answer.type != HolePunchMsg.CONNECT:
                return False
            rtt = time.monotonic() - sent
            targets = self._targets(peer_id, decode_addrs(list(answer.ObsAddrs)))
            # Our router first (_punch says why): the peer's opening SYN, sent when our SYNC
            # arrives, then finds it expecting the peer.
            await self._open_all(targets)
            await _write(stream, HolePunchMsg.SYNC)
            # The peer opens its router when our SYNC arrives, half a round trip from now; we
            # dial once its SYN has left.
            await trio.sleep(min(rtt, 2.0) + SYNC_GAP_S)
            return await self._punch(peer_id, targets, initiator=True)
        except (Exception, trio.TooSlowError) as exc:
            log.info("dcutr with %s: %s", peer_id, exc)
            return has_direct(self.host, peer_id)
        finally:
            self._busy.discard(peer_id)
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.close()

    async def _handle(self, stream: Any) -> None:
        peer_id = stream.muxed_conn.peer_id
        try:
            reason = self._refusal(stream, peer_id)
            if reason:
                self._refused.note(peer_id, reason)
                with contextlib.suppress(Exception):
                    await stream.reset()
                return
            self._busy.add(peer_id)
            try:
                connect = await _read(stream)
                if connect.type != HolePunchMsg.CONNECT:
                    return
                targets = self._targets(peer_id, decode_addrs(list(connect.ObsAddrs)))
                await _write(stream, HolePunchMsg.CONNECT, self.our_addrs())
                sync = await _read(stream)
                if sync.type != HolePunchMsg.SYNC:
                    return
                await self._punch(peer_id, targets, initiator=False)
            finally:
                self._busy.discard(peer_id)
        except (Exception, trio.TooSlowError) as exc:
            log.debug("dcutr from %s: %s", peer_id, exc)
        finally:
            with contextlib.suppress(Exception):
                await stream.close()

    def _refusal(self, stream: Any, peer_id: ID) -> str:
        if not is_relayed_conn(stream.muxed_conn):
            return "not on a relayed connection"
        if peer_id in self._busy:
            return "an attempt is already under way"
        if has_direct(self.host, peer_id):
            return "already directly connected"
        if not self._peer_rate.allow(str(peer_id)):
            return "too many attempts"
        return ""

    def _targets(self, peer_id: ID, addrs: Sequence[multiaddr.Multiaddr]) -> list[tuple[str, int]]:
        lan = self._lan()
        out: list[tuple[str, int]] = []
        for addr in addrs:
            target = dial_target(addr, lan)
            if target is None or target in out:
                continue
            if not self._target_rate.allow(target[0]):
                self._refused.note(peer_id, f"too many dials to {target[0]}")
                continue
            out.append(target)
        return out

    async def _punch(
        self, peer_id: ID, targets: Sequence[tuple[str, int]], initiator: bool
    ) -> bool:
        """Both open their routers, the initiator dials in; the Noise roles never cross.

        Noise needs one initiator and one responder, and when both ends connect() at once
        (TCP simultaneous open) both believe they dialled. py-libp2p's dcutr.py makes its
        initiator the Noise responder for that case, and when its SYN lands on the peer's
        listener instead both ends are responders and the handshake fails; and a router that
        answers an unexpected SYN with a reset (the lab's do) kills the other side's dial
        first. So here each side first sends, from its listen port, a SYN with a small TTL
        (OPEN_TTL) and closes that socket at once: the SYN leaves its own router, which now
        expects the peer's address (a full cone: anyone, for minutes), and dies before the
        peer's router, which neither resets nor learns anything. The initiator opens before
        its SYNC, the responder when the SYNC arrives. Then only the initiator dials, as the
        usual client, from its listen port (the address it told us), and lands on the
        responder's listener: one connect(), one accept(), the usual roles. When the
        initiator is reachable as it is (public, or a full cone that has opened), the
        responder's plain dial, right after its opening SYN and from another port, gets
        there too (connection reversal; also what gets a symmetric NAT's host to a full
        cone)."""
        if not targets:
            return False
        if initiator:
            await self._dial_all(peer_id, targets, self._source(), attempts=2)
        else:
            await self._open_all(targets)
            # From another port than the listen port: never the same pair of addresses as
            # the initiator's dial, so the two can both succeed without a crossed role.
            await self._dial_all(peer_id, targets, None, attempts=1)
            with trio.move_on_after(ROUND_S):
                while not has_direct(self.host, peer_id):
                    await trio.sleep(0.05)
        if has_direct(self.host, peer_id):
            self.upgraded += 1
            log.info("direct connection to %s (hole punched)", peer_id)
            return True
        return False

    async def _dial_all(
        self,
        peer_id: ID,
        targets: Sequence[tuple[str, int]],
        source: tuple[str, int] | None,
        attempts: int,
    ) -> None:
        for attempt in range(attempts):
            if attempt:
                await trio.sleep(RETRY_S)
            with trio.move_on_after(ROUND_S) as scope:
                async with trio.open_nursery() as nursery:
                    # The other side's dial may win: a SYN of ours that no router answers
                    # need not hold the round (nor the caller) until ROUND_S.
                    nursery.start_soon(self._cancel_once_direct, peer_id, scope)
                    async with trio.open_nursery() as dials:
                        for ip, port in targets:
                            dials.start_soon(self._dial, peer_id, ip, port, source)
                    nursery.cancel_scope.cancel()
            if has_direct(self.host, peer_id):
                return

    async def _cancel_once_direct(self, peer_id: ID, scope: trio.CancelScope) -> None:
        while not has_direct(self.host, peer_id):
            await trio.sleep(0.05)
        scope.cancel()

    async def _open_all(self, targets: Sequence[tuple[str, int]]) -> None:
        source = self._source()
        if source is None:
            return
        async with trio.open_nursery() as nursery:
            for ip, port in targets:
                nursery.start_soon(self._open_mapping, source, ip, port)

    async def _open_mapping(self, source: tuple[str, int], ip: str, port: int) -> None:
        """One SYN from our listen port to (ip, port) that dies OPEN_TTL hops out."""
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        if (":" in source[0]) != (":" in ip):
            return
        sock = trio.socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET:
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, OPEN_TTL)
            else:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, OPEN_TTL)
            await sock.bind(source)
            self.dials += 1
            with trio.move_on_after(OPEN_WAIT_S), contextlib.suppress(OSError):
                await sock.connect((ip, port))
        except OSError as exc:
            log.debug("dcutr: no opening SYN to %s:%d: %s", ip, port, exc)
        finally:
            sock.close()  # a SYN_SENT socket goes without a reset

    def _source(self) -> tuple[str, int] | None:
        for ip, port in self._listen_tcp():
            if ":" not in ip:
                return ip, port
        return None

    async def _dial(self, peer_id: ID, ip: str, port: int, source: tuple[str, int] | None) -> None:
        family = "ip6" if ":" in ip else "ip4"
        addr = multiaddr.Multiaddr(f"/{family}/{ip}/tcp/{port}")
        self.dials += 1
        try:
            # One attempt: the swarm's dial_addr retries with backoff, past our round.
            await self.host.get_network()._dial_addr_single_attempt(addr, peer_id, source)
        except Exception as exc:
            log.debug("dcutr dial %s at %s: %s", peer_id, addr, exc)
