"""What the port mapper asks a router for, by UPnP and by NAT-PMP, and what it refuses to
believe of one (engine/network/port_mapping.py, upnp.py, natpmp.py). ``FakeGateway`` is a
small fake of miniupnpc's ``UPnP`` object, ``FakeNatPmpRouter`` a NAT-PMP router answering
on 127.0.0.1 from a script; the real clients against a real miniupnpd are
tests/network/test_upnp.py."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from engine.network.natpmp import NatPmpClient, NatPmpError, NatPmpMethod, default_gateway
from engine.network.port_mapping import PortMapper, advertised
from engine.network.upnp import UpnpMethod

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
    mapper = PortMapper(lambda: port, PEER, [UpnpMethod(client=lambda: gateway)])

    async def main() -> None:
        await mapper.map_once()

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
    assert nobody.status.problem == "UPnP: no UPnP router answered on the LAN"
    unbound = _map_once(FakeGateway(), port=None)
    assert unbound.status.problem.startswith("nothing to forward")


class FakeNatPmpRouter:
    """A NAT-PMP router on 127.0.0.1: answers each request with what ``answer(request)``
    returns (a list of datagrams, sent in order; none: silence)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.requests: list[bytes] = []
        self.port = 0

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
            await sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
            task_status.started()
            while True:
                request, sender = await sock.recvfrom(64)
                self.requests.append(request)
                for datagram in self.answer(request):
                    await sock.sendto(datagram, sender)


def _external(ip: bytes, result: int = 0) -> bytes:
    return struct.pack("!BBHI", 0, 128, result, 1234) + ip


def _mapped(request: bytes, external_port: int, lifetime: int, result: int = 0) -> bytes:
    internal = struct.unpack("!H", request[4:6])[0]
    return struct.pack("!BBHIHHI", 0, 130, result, 1234, internal, external_port, lifetime)


def _ask(router: FakeNatPmpRouter, call: Any) -> Any:
    async def main() -> Any:
        async with trio.open_nursery() as nursery:
            await nursery.start(router.serve)
            client = NatPmpClient("127.0.0.1", router.port, first_wait_s=0.05, tries=3)
            try:
                return await call(client)
            except NatPmpError as exc:
                return exc  # raised outside the nursery, not inside an exception group
            finally:
                nursery.cancel_scope.cancel()

    result = trio.run(main)
    if isinstance(result, NatPmpError):
        raise result
    return result


def test_natpmp_asks_the_router_in_the_rfcs_wire_format() -> None:
    def answer(request: bytes) -> list[bytes]:
        if request[1] == 0:
            return [_external(bytes([11, 77, 0, 104]))]
        return [_mapped(request, 9003, 7200)]

    router = FakeNatPmpRouter(answer)
    assert _ask(router, lambda c: c.external_address()) == ("11.77.0.104", "127.0.0.1")
    router = FakeNatPmpRouter(answer)
    assert _ask(router, lambda c: c.map_tcp(9001, 9001, 3600)) == ("127.0.0.1", 9003, 7200)
    assert router.requests == [struct.pack("!BBHHHI", 0, 2, 0, 9001, 9001, 3600)]
    router = FakeNatPmpRouter(answer)
    _ask(router, lambda c: c.unmap_tcp(9001))
    assert router.requests == [struct.pack("!BBHHHI", 0, 2, 0, 9001, 0, 0)]  # RFC 6886 §3.4


def test_natpmp_believes_only_a_whole_answer_to_the_request_it_sent() -> None:
    def answer(request: bytes) -> list[bytes]:
        right = _mapped(request, 9001, 3600)
        # A short datagram, an answer to another opcode, a wrong version: all passed over.
        return [right[:10], _external(bytes(4)) + bytes(4), b"\x01" + right[1:], right]

    router = FakeNatPmpRouter(answer)
    assert _ask(router, lambda c: c.map_tcp(9001, 9001, 3600)) == ("127.0.0.1", 9001, 3600)

    def refused(request: bytes) -> list[bytes]:
        return [_mapped(request, 0, 0, result=2)]

    with pytest.raises(NatPmpError, match="refuses"):
        _ask(FakeNatPmpRouter(refused), lambda c: c.map_tcp(9001, 9001, 3600))

    def for_another_port(request: bytes) -> list[bytes]:
        return [struct.pack("!BBHIHHI", 0, 130, 0, 1, 22, 22, 3600)]

    with pytest.raises(NatPmpError, match="port 22, not 9001"):
        _ask(FakeNatPmpRouter(for_another_port), lambda c: c.map_tcp(9001, 9001, 3600))

    def forever(request: bytes) -> list[bytes]:
        return [_mapped(request, 9001, 0xFFFFFFFF)]

    granted = _ask(FakeNatPmpRouter(forever), lambda c: c.map_tcp(9001, 9001, 3600))
    assert granted[2] == 24 * 3600  # renewed within a day, whatever the router says

    silent = FakeNatPmpRouter(lambda request: [])
    with pytest.raises(NatPmpError, match=r"no NAT-PMP answer from the router at 127\.0\.0\.1"):
        _ask(silent, lambda c: c.external_address())
    assert len(silent.requests) == 3  # the RFC's retransmissions, cut at ``tries``


@dataclass
class FakeNatPmp:
    """A NAT-PMP client double for the method's rules: what the router would say."""

    external: str = "11.77.0.104"
    lan: str = "10.77.4.10"
    mapped: list[int] = field(default_factory=list)
    unmapped: list[int] = field(default_factory=list)
    router: str = "natpmp://10.77.4.1:5351"

    async def external_address(self) -> tuple[str, str]:
        return self.external, self.lan

    async def map_tcp(self, internal: int, external: int, lifetime: int) -> tuple[str, int, int]:
        self.mapped.append(internal)
        return self.lan, external, lifetime

    async def unmap_tcp(self, internal: int) -> None:
        self.unmapped.append(internal)


def _mapper(*methods: Any) -> PortMapper:
    return PortMapper(lambda: 9001, PEER, list(methods))


def test_natpmp_is_asked_when_no_upnp_router_answers_and_says_which_made_the_forward() -> None:
    natpmp = FakeNatPmp()
    mapper = _mapper(
        UpnpMethod(client=lambda: FakeGateway(devices=0)),
        NatPmpMethod(gateway=lambda: "10.77.4.1", client=lambda gw: natpmp),  # type: ignore[arg-type,return-value]
    )
    trio.run(mapper.map_once)
    mapping = mapper.status.mapping
    assert mapping is not None and mapping.method == "NAT-PMP"
    assert mapper.addrs() == [f"/ip4/11.77.0.104/tcp/9001/p2p/{PEER}"]
    assert natpmp.mapped == [9001]

    async def withdraw() -> None:
        with trio.move_on_after(0.5):
            await mapper.run(lambda: False)

    trio.run(withdraw)
    assert natpmp.unmapped == [9001] and mapper.addrs() == []


def test_natpmp_maps_nothing_behind_another_nat_or_with_no_gateway() -> None:
    for external in ("100.64.0.1", "192.168.1.1", "0.0.0.0"):
        natpmp = FakeNatPmp(external=external)
        method = NatPmpMethod(gateway=lambda: "10.77.4.1", client=lambda gw, f=natpmp: f)  # type: ignore[misc]
        mapper = _mapper(method)
        trio.run(mapper.map_once)
        assert mapper.addrs() == [] and natpmp.mapped == [], external
        assert mapper.status.problem.startswith("NAT-PMP: the router's external address")
    lonely = _mapper(
        UpnpMethod(client=lambda: FakeGateway(devices=0)), NatPmpMethod(gateway=lambda: None)
    )
    trio.run(lonely.map_once)
    assert lonely.status.problem == (
        "UPnP: no UPnP router answered on the LAN; NAT-PMP: this host has no default gateway to ask"
    )


def test_the_default_gateway_is_read_from_the_kernels_route_table(tmp_path: Path) -> None:
    table = tmp_path / "route"
    header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    table.write_text(
        header
        + "eth0\t00040D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
        + "eth0\t00000000\t01044D0A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    )
    assert default_gateway(table) == "10.77.4.1"
    table.write_text(header + "eth0\t00040D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")
    assert default_gateway(table) is None
    assert default_gateway(tmp_path / "absent") is None
