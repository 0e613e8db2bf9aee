"""AutoNAT: does the internet reach us? Peers we are connected to dial us back.

py-libp2p 0.8.1 ships ``libp2p.host.autonat`` (AutoNAT v1). Probed in the NAT lab
(docs/network-nat.md, "AutoNAT"), it cannot tell a reachable node from an unreachable one:
its server "dials back" with ``host.connect``, which returns at once when a connection to
the asker already exists, and the request arrives over one, so every asker is told OK, behind
any NAT. It also dials every address the request lists (64 KiB of them), one after the other,
with no timeout, no rate limit and no bound on concurrent requests, and it dials the peer id
the message names rather than the one that asked. So the protocol is our own, small and
bounded, on ``/nunet/autonat/1.0.0``:

- The asker sends at most ``MAX_ADDRS`` TCP addresses; ``/ip4/0.0.0.0/tcp/P`` means "where
  you see me, port P" (the asker rarely knows its public address).
- The server dials back only the IP the request came from (never a third party: no
  amplification, no port scan of someone else), never over a relayed connection (its remote
  address is the relay's), at most ``MAX_ADDRS`` addresses, each under ``DIAL_S``, with a
  fresh TCP connection and a Noise handshake that must prove the asker's peer id (not the
  connection the request came on); requests are rate-limited per peer, per address and per
  subnet (identities are free) and ``CONCURRENT`` are served at once in all.
- The asker asks up to ``MAX_SERVERS`` peers (bootstrap and relays first) over direct
  connections, keeps the verdict with its evidence, and asks again every ``interval_s`` and
  when its listen addresses change.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import msgspec
import multiaddr
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from engine.domain import wire
from engine.domain.ratelimit import ScopedRateLimiter, ThrottledWarning, remote_host
from engine.network.host import is_relayed_conn
from engine.network.one_request import serve_one_request

log = logging.getLogger("nunet.network.autonat")

AUTONAT_PROTOCOL = TProtocol("/nunet/autonat/1.0.0")
MAX_ADDRS = 4  # addresses dialled back per request
MAX_ADDR_CHARS = 256
MAX_BYTES = 4096
DIAL_S = 3.0  # one dial back: TCP and Noise
ASK_S = MAX_ADDRS * DIAL_S + 5.0  # the asker waits longer than the server may dial
CONCURRENT = 4  # requests served at once, node-wide
MAX_SERVERS = 3  # peers asked per round
MAX_EVIDENCE = 16
RETRY_S = 30.0  # next round when the last one told us nothing
TICK_S = 2.0  # how often the asker looks for servers and address changes

Outcome = Literal["reached", "failed", "refused", "no answer"]
Verdict = Literal["public", "private", "unknown"]


class DialBackRequest(wire.Schema, frozen=True):
    addrs: Annotated[
        list[Annotated[str, msgspec.Meta(max_length=MAX_ADDR_CHARS)]],
        msgspec.Meta(max_length=MAX_ADDRS),
    ]


class DialBackResult(wire.Schema, frozen=True):
    addr: Annotated[str, msgspec.Meta(max_length=MAX_ADDR_CHARS)]
    reached: bool
    detail: Annotated[str, msgspec.Meta(max_length=200)] = ""


class DialBackReply(wire.Schema, frozen=True):
    # Where the request came from, as the server saw it (/ip4/a.b.c.d/tcp/p): our observed
    # address; "" when it refused before looking.
    observed: Annotated[str, msgspec.Meta(max_length=MAX_ADDR_CHARS)] = ""
    results: Annotated[list[DialBackResult], msgspec.Meta(max_length=MAX_ADDRS)] = []
    refused: Annotated[str, msgspec.Meta(max_length=200)] = ""


_encoder = msgspec.msgpack.Encoder()


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    ip = ipaddress.ip_address(text)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def dial_target(addr: str, observed_ip: str) -> tuple[str | None, str]:
    """The address to dial back for ``addr`` asked from ``observed_ip``: (``/ipX/IP/tcp/P``,
    "") or (None, why not). Only TCP, only the asker's own IP (an unspecified IP stands for
    it), nothing after the port but the asker's own ``/p2p`` (checked by the caller)."""
    try:
        parts = multiaddr.Multiaddr(addr)
        protos = [p.name for p in parts.protocols()]
    except Exception:
        return None, "not a multiaddr"
    if protos[:2] not in (["ip4", "tcp"], ["ip6", "tcp"]) or any(p != "p2p" for p in protos[2:]):
        return None, "only /ip4|ip6/…/tcp/… addresses are dialled back"
    family = protos[0]
    try:
        ip = _ip(parts.value_for_protocol(family))
        seen = _ip(observed_ip)
        port = int(parts.value_for_protocol("tcp"))
    except Exception:
        return None, "bad address"
    if not 0 < port < 65536:
        return None, "bad port"
    if ip.is_unspecified:
        ip = seen
    if ip != seen:
        return None, "not the address this request came from: refused"
    return f"/{'ip6' if ip.version == 6 else 'ip4'}/{ip}/tcp/{port}", ""


def _p2p_of(addr: str) -> str | None:
    with contextlib.suppress(Exception):
        return multiaddr.Multiaddr(addr).get_peer_id()
    return None


def _stream_relayed(stream: Any) -> bool:
    muxed = getattr(stream, "muxed_conn", None)
    if muxed is None:
        return True  # cannot tell: fail closed
    if is_relayed_conn(muxed):
        return True
    raw = getattr(getattr(muxed, "secured_conn", None), "conn", None)
    return raw is not None and is_relayed_conn(raw)


class DialBackServer:
    """Answers dial-back requests within the bounds in the module's docstring."""

    def __init__(self, host: Any, dial: Callable[[ID, str], Any] | None = None) -> None:
        self.host = host
        self._dial = dial or self._dial_fresh
        # (rate per second, burst): a peer asks once a round (minutes); one address is one
        # household, which may run a few nodes; a /24 a few households.
        self.limiter = ScopedRateLimiter((1 / 30, 2.0), (1 / 10, 4.0), (1 / 5, 8.0))
        self.busy = 0
        self.served = 0
        self.refused = 0
        self.dials = 0  # dial-backs attempted, for tests and the doctor
        self._refusals = ThrottledWarning(log, "autonat: %d dial-back requests refused (last %s)")

    def install(self) -> None:
        self.host.set_stream_handler(AUTONAT_PROTOCOL, self._serve)

    async def _serve(self, stream: Any) -> None:
        async def answer(data: bytes) -> bytes:
            request = msgspec.msgpack.decode(data, type=DialBackRequest)
            reply = await self.answer(stream, request)
            return wire.frame(_encoder.encode(reply))

        await serve_one_request(stream, MAX_BYTES, answer, ASK_S, "dial-back request")

    async def answer(self, stream: Any, request: DialBackRequest) -> DialBackReply:
        peer = stream.muxed_conn.peer_id
        host = remote_host(stream)
        if _stream_relayed(stream):
            return self._refuse(peer, "over a relayed connection: refused")
        if host is None:
            return self._refuse(peer, "no address seen for this connection: refused")
        if not self.limiter.allow(str(peer), host, trusted=False):
            return self._refuse(peer, "too many dial-back requests: ask later")
        if self.busy >= CONCURRENT:
            return self._refuse(peer, "busy: ask later")
        observed = ""
        with contextlib.suppress(Exception):
            remote = stream.muxed_conn.get_remote_address()
            family = "ip6" if ":" in str(remote[0]) else "ip4"
            observed = f"/{family}/{remote[0]}/tcp/{int(remote[1])}"
        self.busy += 1
        try:
            results = []
            done: set[str] = set()
            for addr in request.addrs[:MAX_ADDRS]:
                target, why = dial_target(addr, host)
                owner = _p2p_of(addr)
                if target is not None and owner is not None and owner != str(peer):
                    target, why = None, "another peer's address: refused"
                if target is None or target in done:
                    results.append(DialBackResult(addr=addr, reached=False, detail=why))
                    continue
                done.add(target)
                self.dials += 1
                reached, detail = await self._dial_one(peer, target)
                results.append(DialBackResult(addr=target, reached=reached, detail=detail))
        finally:
            self.busy -= 1
        self.served += 1
        return DialBackReply(observed=observed, results=results)

    def _refuse(self, peer: Any, why: str) -> DialBackReply:
        self.refused += 1
        self._refusals.note(f"{peer}: {why}")
        return DialBackReply(refused=why)

    async def _dial_one(self, peer: ID, target: str) -> tuple[bool, str]:
        try:
            with trio.fail_after(DIAL_S):
                await self._dial(peer, target)
        except trio.TooSlowError:
            return False, f"no answer within {DIAL_S:g} s"
        except Exception as exc:
            return False, (str(exc) or type(exc).__name__)[:200]
        return True, ""

    async def _dial_fresh(self, peer: ID, target: str) -> None:
        """A new TCP connection and a Noise handshake that proves ``peer`` is there, then
        closed: never the connection the request came on (the library's mistake), never
        registered with the swarm."""
        swarm = self.host.get_network()
        addr = multiaddr.Multiaddr(target)
        transport = swarm.transport_manager.transport_for_dialing(addr)
        if transport is None:
            raise OSError("no transport dials this address")
        raw = await transport.dial(addr)
        try:
            secured = await swarm.upgrader.upgrade_security(raw, True, peer)
            with contextlib.suppress(Exception):
                await secured.close()
        finally:
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await raw.close()


@dataclass(frozen=True)
class Evidence:
    peer_id: str
    addr: str  # the address the peer dialled (or was asked to)
    outcome: Outcome
    detail: str
    at: float


@dataclass
class Reachability:
    """The asker's side: the verdict, its evidence, and the rounds that refresh it."""

    host: Any
    interval_s: float = 600.0
    verdict: Verdict = "unknown"
    since: float | None = None  # when the verdict last changed
    checked_at: float | None = None
    evidence: list[Evidence] = field(default_factory=list)
    observed: dict[str, str] = field(default_factory=dict)  # peer id -> what it saw of us
    rounds: int = 0
    again: bool = False  # ask at the next tick (the router forwards a port now: port_mapping.py)

    def soon(self) -> None:
        """Ask again at once: what reaches us changed (a port forward made or gone)."""
        self.again = True

    async def run(
        self,
        servers: Callable[[], Sequence[ID]],
        addrs: Callable[[], Sequence[str]],
        changed: Callable[[], None],
    ) -> None:
        """Ask ``servers()`` (in order of preference) about ``addrs()`` now, every
        ``interval_s``, every ``RETRY_S`` while nothing is known, and when ``addrs()``
        changes; ``changed()`` when the verdict changes."""
        next_at = 0.0
        last: tuple[str, ...] = ()
        while True:
            wanted = tuple(sorted(dialback_addrs(addrs())))
            asked = [s for s in servers()][:MAX_SERVERS]
            now = trio.current_time()
            if asked and wanted and (now >= next_at or wanted != last or self.again):
                last = wanted
                self.again = False
                before = self.verdict
                await self.check(asked, list(wanted))
                informed = any(e.outcome in ("reached", "failed") for e in self.evidence)
                next_at = trio.current_time() + (self.interval_s if informed else RETRY_S)
                if self.verdict != before:
                    log.info("reachability: %s (was %s)", self.verdict, before)
                    changed()
            await trio.sleep(TICK_S)

    async def check(self, servers: Sequence[ID], addrs: list[str]) -> Verdict:
        """One round: every server asked at once; the verdict from what they found."""
        found: list[Evidence] = []
        self.observed = {}  # what this round's servers saw: bounded by MAX_SERVERS

        async def ask(server: ID) -> None:
            found.extend(await self.ask(server, addrs))

        async with trio.open_nursery() as nursery:
            for server in servers:
                nursery.start_soon(ask, server)
        self.rounds += 1
        self.checked_at = time.time()
        self.evidence = sorted(found, key=lambda e: (e.peer_id, e.addr))[:MAX_EVIDENCE]
        verdict = verdict_of(self.evidence)
        if verdict != "unknown" or self.since is None:
            if verdict != self.verdict:
                self.since = self.checked_at
            self.verdict = verdict
        return self.verdict

    async def ask(self, server: ID, addrs: list[str]) -> list[Evidence]:
        peer = str(server)
        stream = None
        try:
            with trio.fail_after(ASK_S):
                stream = await self.host.new_stream(server, [AUTONAT_PROTOCOL])
                if _stream_relayed(stream):
                    return [Evidence(peer, "", "refused", "relayed connection: not asked", _now())]
                request = DialBackRequest(addrs=addrs[:MAX_ADDRS])
                await wire.write_frame(stream, _encoder.encode(request), MAX_BYTES)
                await stream.close()
                data = await wire.read_frame(stream, MAX_BYTES)
            if data is None:
                return [Evidence(peer, "", "no answer", "the stream ended", _now())]
            reply = msgspec.msgpack.decode(data, type=DialBackReply)
        except (Exception, trio.TooSlowError) as exc:
            detail = f"no answer within {ASK_S:g} s" if isinstance(exc, trio.TooSlowError) else ""
            return [Evidence(peer, "", "no answer", (detail or str(exc))[:200], _now())]
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.reset()
        if _is_tcp_addr(reply.observed):  # a peer's claim: kept only if it is an address
            self.observed[peer] = reply.observed
        if reply.refused:
            return [Evidence(peer, "", "refused", reply.refused, _now())]
        return [
            Evidence(peer, r.addr, "reached" if r.reached else "failed", r.detail, _now())
            for r in reply.results
        ]


def verdict_of(evidence: Sequence[Evidence]) -> Verdict:
    """Public when more peers reached us than failed to; private when peers dialled and none
    reached us; unknown when nobody dialled (refusals and silence prove nothing)."""
    reached = {e.peer_id for e in evidence if e.outcome == "reached"}
    failed = {e.peer_id for e in evidence if e.outcome == "failed"} - reached
    if reached and len(reached) >= len(failed):
        return "public"
    if failed and not reached:
        return "private"
    return "unknown"


def dialback_addrs(listen: Sequence[str]) -> list[str]:
    """What to ask a server to dial: each TCP port we listen on, at whatever address the
    server sees us (``/ip4/0.0.0.0/tcp/P``): a node behind NAT does not know its public one."""
    wanted: list[str] = []
    for addr in listen:
        try:
            parts = multiaddr.Multiaddr(addr)
            names = [p.name for p in parts.protocols()]
            if names[:2] not in (["ip4", "tcp"], ["ip6", "tcp"]):
                continue
            port = int(parts.value_for_protocol("tcp"))
        except Exception:
            continue
        ip = "0.0.0.0" if names[0] == "ip4" else "::"
        candidate = f"/{names[0]}/{ip}/tcp/{port}"
        if port and candidate not in wanted:
            wanted.append(candidate)
    return wanted[:MAX_ADDRS]


def _is_tcp_addr(text: str) -> bool:
    with contextlib.suppress(Exception):
        names = [p.name for p in multiaddr.Multiaddr(text).protocols()]
        return names in (["ip4", "tcp"], ["ip6", "tcp"])
    return False


def _now() -> float:
    return time.time()
