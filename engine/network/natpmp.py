"""NAT-PMP port mapping (RFC 6886), the other way home routers forward a port on request
(Apple's, and most routers running miniupnpd, which answers both). ``upnp.py`` asks it when no
UPnP router answers.

The protocol is two UDP datagrams to the default gateway's port 5351: "what is your external
address" and "map TCP port p for t seconds". Answers come from the LAN and are believed only
as far as they are checked: the socket is connected to the gateway, so the kernel drops
datagrams from anyone else; an answer must have the exact size, version and opcode of the
request it answers; a mapping is only ever asked for this host's own listen port, a refusal is
said in words, and the lifetime a router grants is bounded before it schedules anything.
"""

from __future__ import annotations

import ipaddress
import struct
import time
from collections.abc import Callable
from pathlib import Path

import trio

from engine.network.port_mapping import Mapping, Refused, checked_addresses

NATPMP_PORT = 5351
# RFC 6886 §3.1: 250 ms, doubling, nine tries (64 s in all); a node asking in the background
# needs no more than four (3.75 s): a router that answers at all answers the first.
FIRST_WAIT_S = 0.25
TRIES = 4
# What we believe of a granted lifetime: at least a minute (shorter would have us renew all
# the time), at most a day (a router's "forever" is still renewed).
MIN_LIFETIME_S = 60
MAX_LIFETIME_S = 24 * 3600

_OP_EXTERNAL = 0
_OP_MAP_TCP = 2
_RESULTS = {
    1: "it does not speak this version of NAT-PMP",
    2: "it refuses (NAT-PMP is off or this host is not allowed to map ports)",
    3: "it has no working internet connection",
    4: "it has no ports left to map",
    5: "it does not know this request",
}
_RTF_UP_GATEWAY = 0x3


class NatPmpError(Exception):
    """Why the router gave no mapping, said as the doctor shows it."""


def default_gateway(route_file: Path = Path("/proc/net/route")) -> str | None:
    """The IPv4 default gateway of this host's network namespace (None when it has none)."""
    try:
        lines = route_file.read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 4 or fields[1] != "00000000":
            continue
        try:
            flags = int(fields[3], 16)
            gateway = ipaddress.IPv4Address(struct.pack("<I", int(fields[2], 16)))
        except ValueError:
            continue
        if flags & _RTF_UP_GATEWAY == _RTF_UP_GATEWAY and not gateway.is_unspecified:
            return str(gateway)
    return None


class NatPmpClient:
    """Asks the router at ``gateway`` (its NAT-PMP ``port``: 5351 on every router)."""

    def __init__(
        self,
        gateway: str,
        port: int = NATPMP_PORT,
        *,
        first_wait_s: float = FIRST_WAIT_S,
        tries: int = TRIES,
    ) -> None:
        self.gateway = gateway
        self.port = port
        self.first_wait_s = first_wait_s
        self.tries = tries

    @property
    def router(self) -> str:
        return f"natpmp://{self.gateway}:{self.port}"

    async def external_address(self) -> tuple[str, str]:
        """(the router's external address, our address on its LAN)."""
        answer, lan = await self._ask(struct.pack("!BB", 0, _OP_EXTERNAL), _OP_EXTERNAL, 12)
        return str(ipaddress.IPv4Address(answer[8:12])), lan

    async def map_tcp(
        self, internal_port: int, external_port: int, lifetime_s: int
    ) -> tuple[str, int, int]:
        """Asks for ``external_port`` (a hint the router may not follow) forwarded to our
        ``internal_port``: (our LAN address, the external port granted, its lifetime)."""
        request = struct.pack(
            "!BBHHHI", 0, _OP_MAP_TCP, 0, internal_port, external_port, lifetime_s
        )
        answer, lan = await self._ask(request, _OP_MAP_TCP, 16)
        internal, external, lifetime = struct.unpack("!HHI", answer[8:16])
        if internal != internal_port:
            raise NatPmpError(f"the router answered for port {internal}, not {internal_port}")
        if external == 0 or lifetime == 0:
            raise NatPmpError("the router granted no port")
        return lan, external, max(MIN_LIFETIME_S, min(lifetime, MAX_LIFETIME_S))

    async def unmap_tcp(self, internal_port: int) -> None:
        """RFC 6886 §3.4: a request with lifetime 0 and external port 0 deletes the mapping."""
        request = struct.pack("!BBHHHI", 0, _OP_MAP_TCP, 0, internal_port, 0, 0)
        await self._ask(request, _OP_MAP_TCP, 16)

    async def _ask(self, request: bytes, opcode: int, size: int) -> tuple[bytes, str]:
        """Sends ``request`` on the RFC's schedule until an answer of ``size`` bytes to
        ``opcode`` comes; returns it with our address on the gateway's LAN."""
        with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
            # Connected: the kernel hands us only the gateway's datagrams from its port.
            await sock.connect((self.gateway, self.port))
            lan = str(sock.getsockname()[0])
            wait = self.first_wait_s
            for _ in range(self.tries):
                await sock.send(request)
                with trio.move_on_after(wait):
                    while True:
                        try:
                            answer = await sock.recv(64)
                        except ConnectionRefusedError:
                            break  # ICMP port unreachable: nothing listens; try again
                        if len(answer) != size or answer[0] != 0 or answer[1] != 128 + opcode:
                            continue  # not the answer to this request
                        result = struct.unpack("!H", answer[2:4])[0]
                        if result:
                            why = _RESULTS.get(result, f"it answered with error {result}")
                            raise NatPmpError(f"the router at {self.gateway}: {why}")
                        return answer, lan
                wait *= 2
        waited = self.first_wait_s * (2**self.tries - 1)
        raise NatPmpError(f"no NAT-PMP answer from the router at {self.gateway} in {waited:g} s")


class NatPmpMethod:
    """The second way ``port_mapping.PortMapper`` asks the router: NAT-PMP to the default
    gateway (``gateway``: where it is, read when asked; None: this host has no gateway)."""

    name = "NAT-PMP"

    def __init__(
        self,
        gateway: Callable[[], str | None] = default_gateway,
        client: Callable[[str], NatPmpClient] = NatPmpClient,
    ) -> None:
        self._gateway = gateway
        self._client = client

    async def map(self, port: int, lease_s: int) -> Mapping:
        gateway = self._gateway()
        if gateway is None:
            raise Refused("this host has no default gateway to ask")
        client = self._client(gateway)
        try:
            # The external address first: a router behind another NAT maps nothing useful.
            external, lan = await client.external_address()
            checked_addresses(external, lan)
            lan, eport, lease = await client.map_tcp(port, port, lease_s)
        except NatPmpError as exc:
            raise Refused(str(exc)) from None
        return Mapping(external, eport, lan, port, lease, time.time(), client.router, self.name)

    async def unmap(self, mapping: Mapping) -> None:
        gateway = self._gateway()
        if gateway is not None:
            await self._client(gateway).unmap_tcp(mapping.internal_port)
