"""UPnP IGD port mapping (issue 24 §1): the first way ``port_mapping.PortMapper`` asks a home
router to forward our listen port.

miniupnpc, the reference client (a C extension), blocks: every call runs in a worker thread,
abandoned (never waited for) when the mapper's deadline passes. The router is found by SSDP
once and kept; a port another host holds is never taken over (the next few are tried).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio

from engine.network.port_mapping import (
    DESCRIPTION,
    OTHER_PORTS,
    Mapping,
    Refused,
    checked_addresses,
)

DISCOVER_MS = 2000  # how long SSDP discovery listens for routers


class UpnpMethod:
    """``client`` makes a miniupnpc ``UPnP`` object (the real one needs the router on the
    LAN)."""

    name = "UPnP"

    def __init__(self, client: Callable[[], Any] | None = None) -> None:
        self._client = client or _miniupnpc
        self._gateway: Any = None
        self._router = ""

    async def map(self, port: int, lease_s: int) -> Mapping:
        return await trio.to_thread.run_sync(
            self._map_blocking, port, lease_s, abandon_on_cancel=True
        )

    async def unmap(self, mapping: Mapping) -> None:
        gateway = self._gateway
        if gateway is not None:
            await trio.to_thread.run_sync(
                gateway.deleteportmapping, mapping.external_port, "TCP", abandon_on_cancel=True
            )

    def _map_blocking(self, port: int, lease_s: int) -> Mapping:
        gateway = self._gateway
        if gateway is None:
            gateway = self._client()
            gateway.discoverdelay = DISCOVER_MS
            if gateway.discover() <= 0:
                raise Refused("no UPnP router answered on the LAN")
            try:
                self._router = str(gateway.selectigd())
            except Exception as exc:
                raise Refused(f"no UPnP internet gateway on the LAN ({exc})") from None
        lan = str(gateway.lanaddr or "")
        external = str(gateway.externalipaddress() or "")
        checked_addresses(external, lan)
        self._gateway = gateway
        for eport in (port, *range(port + 1, port + 1 + OTHER_PORTS)):
            taken = gateway.getspecificportmapping(eport, "TCP")
            if taken is not None and (str(taken[0]), int(taken[1])) != (lan, port):
                continue  # another host's (or another port's) mapping: never replaced
            gateway.addportmapping(eport, "TCP", lan, port, DESCRIPTION, "", lease_s)
            return Mapping(
                external, eport, lan, port, lease_s, time.time(), self._router, self.name
            )
        raise Refused(f"ports {port}-{port + OTHER_PORTS} are all forwarded to other hosts")


def _miniupnpc() -> Any:
    import miniupnpc  # imported on first use: a C extension nothing else needs

    return miniupnpc.UPnP()
