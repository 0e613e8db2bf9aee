"""UPnP port mapping (issue 24 §1): a node behind a home router that offers UPnP IGD asks it to
forward its listen port, so that consumers outside reach it directly, without a relay.

``PortMapper`` runs while the node has an offer out (a consumer dials out and needs no
inbound port). It discovers the router (SSDP), asks for its listen port on the router's
external address (another port when that one is taken), renews the lease at half its time,
and deletes the mapping when the node stops. The mapped address goes into the signed advert
after the listen addresses; consumers dial it as any advertised address: only when its IP is
one the node was seen at (engine/network/confirmed.py), which the router's address is.

miniupnpc, the reference client (a C extension), blocks: every call runs in a worker thread
under a deadline, and the thread is abandoned, never waited for, when the deadline passes.
Answers come from the LAN and are checked all the same: a mapping is only ever asked for
this host's own LAN address and listen port, and an external address the router reports is
used only when it is a global IPv4 address (never a loopback, LAN or reserved one: a router
that is itself behind another NAT cannot forward anything useful).
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

log = logging.getLogger("nunet.network.upnp")

DISCOVER_MS = 2000  # how long SSDP discovery listens for routers
CALL_TIMEOUT_S = 10.0  # one blocking miniupnpc call (discovery included) at most
LEASE_S = 3600  # asked for; renewed at half of it (a router may cap or ignore it)
RETRY_S = 300.0  # after no router, a refusal or an error
OTHER_PORTS = 4  # ports above the listen port tried when the router has it taken
DESCRIPTION = "nunet-tui"


@dataclass(frozen=True)
class Mapping:
    """A port the router forwards to us."""

    external_ip: str
    external_port: int
    internal_ip: str
    internal_port: int
    lease_s: int
    mapped_at: float  # POSIX seconds
    router: str  # the router's control URL


def advertised(mapping: Mapping, peer_id: str) -> str:
    """The address an advert carries for a mapping (as the host's own: with our peer id)."""
    return f"/ip4/{mapping.external_ip}/tcp/{mapping.external_port}/p2p/{peer_id}"


@dataclass(frozen=True)
class UpnpStatus:
    """What the doctor shows: the mapping, or why there is none ("" before the first try)."""

    mapping: Mapping | None = None
    problem: str = ""
    tried: bool = False


class PortMapper:
    """``listen_port``: the TCP port this node listens on (its first non-loopback IPv4
    address); ``peer_id``: ours, for the advertised address; ``client``: makes a miniupnpc
    ``UPnP`` object (the real one needs the router on the LAN)."""

    def __init__(
        self,
        listen_port: Callable[[], int | None],
        peer_id: str,
        *,
        client: Callable[[], Any] | None = None,
        lease_s: int = LEASE_S,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self._listen_port = listen_port
        self.peer_id = peer_id
        self._client = client or _miniupnpc
        self.lease_s = lease_s
        self.on_change = on_change
        self.status = UpnpStatus()
        self._gateway: Any = None
        self._router = ""

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
                ok = await self._map()
                await trio.sleep(5.0 if ok else RETRY_S)
        finally:
            mapping = self.status.mapping
            if mapping is not None:
                with trio.CancelScope(shield=True):
                    await self._unmap(mapping)

    async def _map(self) -> bool:
        port = self._listen_port()
        if port is None:
            nothing = "nothing to forward: no TCP listen address but loopback or IPv6"
            self._set(UpnpStatus(problem=nothing, tried=True))
            return False
        try:
            with trio.fail_after(CALL_TIMEOUT_S):
                mapping = await trio.to_thread.run_sync(
                    self._map_blocking, port, abandon_on_cancel=True
                )
        except trio.TooSlowError:
            self._set(UpnpStatus(problem="the router did not answer in time", tried=True))
            return False
        except _Refused as exc:
            self._set(UpnpStatus(problem=str(exc), tried=True))
            return False
        except Exception as exc:  # miniupnpc raises plain Exception("...") for SOAP errors
            self._set(UpnpStatus(problem=f"the router refused: {exc}", tried=True))
            return False
        renewed = self.status.mapping is not None and _same(self.status.mapping, mapping)
        self._set(UpnpStatus(mapping=mapping, tried=True))
        if not renewed:
            log.info(
                "UPnP: the router forwards %s:%d to port %d",
                mapping.external_ip,
                mapping.external_port,
                port,
            )
        return True

    def _map_blocking(self, port: int) -> Mapping:
        gateway = self._gateway
        if gateway is None:
            gateway = self._client()
            gateway.discoverdelay = DISCOVER_MS
            if gateway.discover() <= 0:
                raise _Refused("no UPnP router answered on the LAN")
            try:
                self._router = str(gateway.selectigd())
            except Exception as exc:
                raise _Refused(f"no UPnP internet gateway on the LAN ({exc})") from None
        lan = str(gateway.lanaddr or "")
        external = str(gateway.externalipaddress() or "")
        if not _is_global_v4(external):
            raise _Refused(
                f"the router's external address {external or '(none)'} is not public: "
                "it is behind another NAT, and a mapping on it would reach no one"
            )
        if not _is_private_v4(lan):
            raise _Refused(f"this host's LAN address {lan!r} is not a private IPv4 address")
        self._gateway = gateway
        for eport in (port, *range(port + 1, port + 1 + OTHER_PORTS)):
            taken = gateway.getspecificportmapping(eport, "TCP")
            if taken is not None and (str(taken[0]), int(taken[1])) != (lan, port):
                continue  # another host's (or another port's) mapping: never replaced
            gateway.addportmapping(eport, "TCP", lan, port, DESCRIPTION, "", self.lease_s)
            return Mapping(external, eport, lan, port, self.lease_s, time.time(), self._router)
        raise _Refused(f"ports {port}-{port + OTHER_PORTS} are all forwarded to other hosts")

    async def _unmap(self, mapping: Mapping) -> None:
        gateway = self._gateway
        self._set(UpnpStatus(tried=True, problem="no offer out: nothing forwarded"))
        if gateway is None:
            return
        with trio.move_on_after(CALL_TIMEOUT_S):
            try:
                await trio.to_thread.run_sync(
                    gateway.deleteportmapping,
                    mapping.external_port,
                    "TCP",
                    abandon_on_cancel=True,
                )
            except Exception as exc:
                log.info("UPnP: removing port %d failed: %s", mapping.external_port, exc)

    def _set(self, status: UpnpStatus) -> None:
        changed = status.mapping != self.status.mapping
        self.status = status
        if changed:
            self.on_change()


def _same(a: Mapping, b: Mapping) -> bool:
    return (a.external_ip, a.external_port, a.internal_port) == (
        b.external_ip,
        b.external_port,
        b.internal_port,
    )


class _Refused(Exception):
    """Why no mapping: said as it is (the doctor shows it)."""


def _miniupnpc() -> Any:
    import miniupnpc  # imported on first use: a C extension nothing else needs

    return miniupnpc.UPnP()


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
