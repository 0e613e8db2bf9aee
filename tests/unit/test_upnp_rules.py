"""What the UPnP port mapper asks a router for, and what it refuses to believe of one
(engine/network/upnp.py). ``FakeGateway`` is a small fake of miniupnpc's ``UPnP`` object; the
real client against a real miniupnpd is tests/network/test_upnp.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio

from engine.network.upnp import PortMapper, advertised

PEER = "12D3KooWpeer"


@dataclass
class FakeGateway:
    external: str = "11.77.0.104"
    lanaddr: str = "10.77.4.10"
    devices: int = 1
    taken: dict[int, tuple[str, int, str, str, bool, str, int]] = field(default_factory=dict)
    added: list[tuple[Any, ...]] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    discoverdelay: int = 0

    def discover(self) -> int:
        return self.devices

    def selectigd(self) -> str:
        return "http://10.77.4.1:5000/ctl/IPConn"

    def externalipaddress(self) -> str:
        return self.external

    def getspecificportmapping(self, port: int, proto: str) -> Any:
        return self.taken.get(port)

    def addportmapping(self, *args: Any) -> bool:
        self.added.append(args)
        return True

    def deleteportmapping(self, port: int, proto: str) -> bool:
        self.deleted.append(port)
        return True


def _map_once(gateway: FakeGateway, port: int | None = 9001) -> PortMapper:
    mapper = PortMapper(lambda: port, PEER, client=lambda: gateway)

    async def main() -> None:
        await mapper._map()

    trio.run(main)
    return mapper


def test_the_listen_port_is_forwarded_to_this_host_and_advertised_at_the_routers_address() -> None:
    gateway = FakeGateway()
    mapper = _map_once(gateway)
    assert gateway.added == [(9001, "TCP", "10.77.4.10", 9001, "nunet-tui", "", 3600)]
    assert mapper.addrs() == [f"/ip4/11.77.0.104/tcp/9001/p2p/{PEER}"]
    assert mapper.status.mapping is not None
    assert advertised(mapper.status.mapping, PEER) == mapper.addrs()[0]


def test_a_port_another_host_holds_is_never_taken_over() -> None:
    other = ("10.77.4.11", 9001, "TCP", "someone", True, "", 0)
    gateway = FakeGateway(taken={9001: other})
    mapper = _map_once(gateway)
    assert [args[0] for args in gateway.added] == [9002]  # the next free one
    assert mapper.addrs() == [f"/ip4/11.77.0.104/tcp/9002/p2p/{PEER}"]
    crowded = FakeGateway(taken={p: other for p in range(9001, 9006)})
    refused = _map_once(crowded)
    assert crowded.added == [] and refused.addrs() == []
    assert "all forwarded to other hosts" in refused.status.problem


def test_a_router_behind_another_nat_or_an_odd_lan_address_maps_nothing() -> None:
    for external in ("198.18.0.102", "10.0.0.1", "100.64.0.1", "", "not an address"):
        gateway = FakeGateway(external=external)
        mapper = _map_once(gateway)
        assert gateway.added == [] and mapper.addrs() == [], external
        assert "not public" in mapper.status.problem
    lan = FakeGateway(lanaddr="127.0.0.1")
    assert _map_once(lan).addrs() == [] and lan.added == []
    nobody = _map_once(FakeGateway(devices=0))
    assert nobody.status.problem == "no UPnP router answered on the LAN"
    unbound = _map_once(FakeGateway(), port=None)
    assert unbound.status.problem.startswith("nothing to forward")
