"""Port mapping (issue 24 §1): a node behind a home router asks it to forward its listen port,
so that consumers outside reach it directly, without a relay.

``PortMapper`` runs while the node has an offer out (a consumer dials out and needs no
inbound port). It asks the router by each method it is given in turn (UPnP IGD, ``upnp.py``;
NAT-PMP, ``natpmp.py``) until one forwards the port, renews the lease at half its time through
the method that made it, and deletes the mapping when the offer goes or the node stops. The
mapped address goes into the signed advert after the listen addresses; consumers dial it as
any advertised address: only when its IP is one the node was seen at
(engine/network/confirmed.py), which the router's address is.

What a router says is checked before it is used, by every method alike: a mapping is only
ever asked for this host's own LAN address and listen port, and an external address is used
only when it is a global IPv4 address (never a loopback, LAN or reserved one: a router that
is itself behind another NAT cannot forward anything useful).
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import trio

log = logging.getLogger("nunet.network.port_mapping")

CALL_TIMEOUT_S = 10.0  # one method's whole attempt (discovery included) at most
LEASE_S = 3600  # asked for; renewed at half of what the router grants
RETRY_S = 300.0  # after no router, a refusal or an error
OTHER_PORTS = 4  # ports above the listen port tried when the router has it taken
DESCRIPTION = "nunet-tui"


@dataclass(frozen=True)
class Mapping:
    """A port the router forwards to us, and the method that asked for it."""

    external_ip: str
    external_port: int
    internal_ip: str
    internal_port: int
    lease_s: int
    mapped_at: float  # POSIX seconds
    router: str  # where the method reached the router (UPnP control URL, NAT-PMP address)
    method: str  # "UPnP" or "NAT-PMP"


class Refused(Exception):
    """Why a method got no mapping, said as it is (the doctor shows it)."""


class MappingMethod(Protocol):
    """One way of asking a router for a forward."""

    name: str

    async def map(self, port: int, lease_s: int) -> Mapping:
        """Forward our ``port``; raises ``Refused`` (or times out) when the router won't."""
        ...

    async def unmap(self, mapping: Mapping) -> None:
        """Delete ``mapping`` (best effort: the lease ends it anyway)."""
        ...


def advertised(mapping: Mapping, peer_id: str) -> str:
    """The address an advert carries for a mapping (as the host's own: with our peer id)."""
    return f"/ip4/{mapping.external_ip}/tcp/{mapping.external_port}/p2p/{peer_id}"


@dataclass(frozen=True)
class MappingStatus:
    """What the doctor shows: the mapping, or why there is none ("" before the first try)."""

    mapping: Mapping | None = None
    problem: str = ""
    tried: bool = False


class PortMapper:
    """``listen_port``: the TCP port this node listens on (its first non-loopback IPv4
    address); ``peer_id``: ours, for the advertised address; ``methods``: the ways to ask the
    router, in the order they are tried."""

    def __init__(
        self,
        listen_port: Callable[[], int | None],
        peer_id: str,
        methods: Sequence[MappingMethod],
        *,
        lease_s: int = LEASE_S,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self._listen_port = listen_port
        self.peer_id = peer_id
        self.methods = list(methods)
        self.lease_s = lease_s
        self.on_change = on_change
        self.status = MappingStatus()

    def addrs(self) -> list[str]:
        mapping = self.status.mapping
        return [advertised(mapping, self.peer_id)] if mapping is not None else []

    async def run(self, wanted: Callable[[], bool]) -> None:
        """Hold a mapping while ``wanted()`` (the node has an offer out); remove it on exit."""
        try:
            while True:
                mapping = self.status.mapping
                if not wanted():
                    if mapping is not None:
                        await self._unmap(mapping)
                    await trio.sleep(5.0)
                    continue
                renew_at = mapping.mapped_at + mapping.lease_s / 2 if mapping else 0.0
                if time.time() < renew_at:
                    await trio.sleep(min(5.0, renew_at - time.time()))
                    continue
                ok = await self.map_once()
                await trio.sleep(5.0 if ok else RETRY_S)
        finally:
            mapping = self.status.mapping
            if mapping is not None:
                with trio.CancelScope(shield=True):
                    await self._unmap(mapping)

    async def map_once(self) -> bool:
        """Ask (or renew) once: the method that made the mapping first, then the others."""
        port = self._listen_port()
        if port is None:
            nothing = "nothing to forward: no TCP listen address but loopback or IPv6"
            self._set(MappingStatus(problem=nothing, tried=True))
            return False
        held = self.status.mapping
        methods = sorted(self.methods, key=lambda m: held is None or m.name != held.method)
        problems: list[str] = []
        for method in methods:
            try:
                with trio.fail_after(CALL_TIMEOUT_S):
                    mapping = await method.map(port, self.lease_s)
            except trio.TooSlowError:
                problems.append(f"{method.name}: the router did not answer in time")
                continue
            except Refused as exc:
                problems.append(f"{method.name}: {exc}")
                continue
            except Exception as exc:  # miniupnpc raises plain Exception("...") for SOAP errors
                problems.append(f"{method.name}: the router refused: {exc}")
                continue
            renewed = held is not None and _same(held, mapping)
            self._set(MappingStatus(mapping=mapping, tried=True))
            if not renewed:
                log.info(
                    "%s: the router forwards %s:%d to port %d",
                    mapping.method,
                    mapping.external_ip,
                    mapping.external_port,
                    port,
                )
            return True
        self._set(MappingStatus(problem="; ".join(problems) or "no method to ask", tried=True))
        return False

    async def _unmap(self, mapping: Mapping) -> None:
        self._set(MappingStatus(tried=True, problem="no offer out: nothing forwarded"))
        for method in self.methods:
            if method.name != mapping.method:
                continue
            with trio.move_on_after(CALL_TIMEOUT_S):
                try:
                    await method.unmap(mapping)
                except Exception as exc:
                    log.info(
                        "%s: removing port %d failed: %s", method.name, mapping.external_port, exc
                    )

    def _set(self, status: MappingStatus) -> None:
        changed = status.mapping != self.status.mapping
        self.status = status
        if changed:
            self.on_change()


def checked_addresses(external: str, lan: str) -> None:
    """Raises ``Refused`` unless ``external`` is a global IPv4 address and ``lan`` a private
    one: what every method checks before it asks for (or believes in) a mapping."""
    if not _is_global_v4(external):
        raise Refused(
            f"the router's external address {external or '(none)'} is not public: "
            "it is behind another NAT, and a mapping on it would reach no one"
        )
    if not _is_private_v4(lan):
        raise Refused(f"this host's LAN address {lan!r} is not a private IPv4 address")


def _same(a: Mapping, b: Mapping) -> bool:
    return (a.external_ip, a.external_port, a.internal_port) == (
        b.external_ip,
        b.external_port,
        b.internal_port,
    )


def _is_global_v4(text: str) -> bool:
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return False
    return addr.version == 4 and addr.is_global


def _is_private_v4(text: str) -> bool:
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return False
    return addr.version == 4 and addr.is_private and not addr.is_loopback
