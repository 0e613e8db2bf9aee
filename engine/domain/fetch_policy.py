"""What a provider agrees to fetch for a job: the addresses a script URL or git host may have.

A consumer names a script URL or a git repository; the provider's machine fetches it. Left
open, that lets any consumer read the provider's own loopback and LAN services (a database's
HTTP port, a router's admin page, a cloud VM's metadata credentials) back through the job's
log. So every fetch resolves the host itself, refuses every address that is not public unless
the provider allowed its network (``jobs.fetch_allow_networks``, for LAN markets), and then
connects only to the addresses it checked: a name that answers a public address to the check
and a private one to the connection (DNS rebinding) gets nowhere. engine/jobs/vetted_http.py
is the HTTP client that does so (and follows redirects one checked hop at a time);
engine/jobs/sources.py pins git to the checked address the same way.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from engine.errors import EngineError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[IPAddress]]

SETTING = "jobs.fetch_allow_networks"
DEFAULT_PORTS = {"http": 80, "https": 443, "ssh": 22, "git": 9418}

# Never fetched from, whatever the setting says: no market serves job code from these, and
# each is a way into the provider itself (0.0.0.0 and :: connect to the local host on Linux).
_NEVER: tuple[tuple[str, str], ...] = (
    ("169.254.169.254/32", "cloud metadata service"),
    ("169.254.170.2/32", "cloud metadata service (container credentials)"),
    ("100.100.100.200/32", "cloud metadata service"),
    ("fd00:ec2::254/128", "cloud metadata service"),
    ("0.0.0.0/8", "unspecified ('this host')"),
    ("::/128", "unspecified ('this host')"),
    ("224.0.0.0/4", "multicast"),
    ("ff00::/8", "multicast"),
    ("255.255.255.255/32", "broadcast"),
)
# Refused unless the provider allows a network that holds the address. Most specific first:
# the first match names the address's kind in the refusal.
_NOT_PUBLIC: tuple[tuple[str, str], ...] = (
    ("127.0.0.0/8", "loopback"),
    ("::1/128", "loopback"),
    ("10.0.0.0/8", "private (RFC 1918)"),
    ("172.16.0.0/12", "private (RFC 1918)"),
    ("192.168.0.0/16", "private (RFC 1918)"),
    ("100.64.0.0/10", "carrier-grade NAT (RFC 6598)"),
    ("169.254.0.0/16", "link-local"),
    ("fe80::/10", "link-local"),
    ("fc00::/7", "unique local (ULA)"),
    ("fec0::/10", "site-local"),
    ("192.0.0.0/24", "IETF protocol assignment"),
    ("192.0.2.0/24", "documentation"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("2001:db8::/32", "documentation"),
    ("198.18.0.0/15", "benchmarking"),
    ("240.0.0.0/4", "reserved"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard-only"),
    ("::/96", "IPv4-compatible (deprecated)"),
)
# Host names of metadata services, refused before any lookup (they resolve to link-local
# addresses, but a provider that allows those for its LAN must still not reach them by name).
_METADATA_NAMES = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})


def _table(rows: tuple[tuple[str, str], ...]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(net), what) for net, what in rows)


_NEVER_NETS = _table(_NEVER)
_NOT_PUBLIC_NETS = _table(_NOT_PUBLIC)


def parse_networks(values: Iterable[str], setting: str = SETTING) -> tuple[IPNetwork, ...]:
    """The CIDRs of ``setting``, or a config error naming the one that is not a network."""
    networks: list[IPNetwork] = []
    for value in values:
        try:
            # strict=False: 192.168.1.7/24 means the /24 it lies in, as `ip addr` shows it.
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise EngineError(
                "config",
                f"{setting}: {value!r} is not a network; write CIDRs such as "
                '"192.168.1.0/24" or "127.0.0.1/32"',
            ) from None
    return tuple(networks)


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` has for a TCP connection (IP literals in any form the C
    library takes, 127.1 and 2130706433 included, come back as the address they mean)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else "not a valid host name"
        raise EngineError("fetch_unresolved", f"cannot resolve host {host!r}: {reason}") from exc
    addresses: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


# A label the C library reads as a number: decimal, octal (leading 0) or hex (0x).
_NUMERIC_LABEL = re.compile(r"(0[xX][0-9a-fA-F]*|[0-9]+)")


def odd_ipv4_problem(host: str) -> str | None:
    """Why ``host``, an IPv4 address written other than as four plain decimal numbers
    (``0177.0.0.1``, ``0x7f.1``, ``2130706433``, ``127.1``), is refused, or None. httpx
    refuses some of these forms while parsing (an exception that is no fetch error) and the
    C library reads the others its own way: one clear refusal instead, saying what it means."""
    labels = host.rstrip(".").split(".")
    if not all(_NUMERIC_LABEL.fullmatch(label) for label in labels):
        return None  # a name: no top-level domain is all digits
    try:
        canonical = str(ipaddress.IPv4Address(host))
    except ValueError:
        canonical = None
    if canonical == host:
        return None
    try:
        meant = f" (it means {socket.inet_ntoa(socket.inet_aton(host))})"
    except OSError:
        meant = ""
    return (
        f"host {host!r} is an IPv4 address in octal, hex or short form{meant}: "
        "write it as four decimal numbers, e.g. 192.0.2.10"
    )


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries and that a connection would end up at."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class FetchPolicy:
    """Which addresses a job's code may be fetched from. The default refuses everything that
    is not a public address; ``allow_networks`` opens networks of the provider's choosing."""

    allow_networks: tuple[IPNetwork, ...] = ()
    resolver: Resolver = field(default=resolve, compare=False, repr=False)

    @classmethod
    def from_settings(cls, networks: Iterable[str]) -> FetchPolicy:
        return cls(parse_networks(networks))

    def refusal(self, address: IPAddress) -> str | None:
        """Why ``address`` is not fetched from ("a loopback address"), or None."""
        judged = self._judge(address)
        return judged[0] if judged else None

    def _judge(self, address: IPAddress) -> tuple[str, bool] | None:
        """Why ``address`` is refused and whether the setting could allow it, or None."""
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        if mapped is not None:  # ::ffff:a.b.c.d is a.b.c.d itself
            judged = self._judge(mapped)
            return (f"{judged[0]}, written as IPv4-mapped IPv6", judged[1]) if judged else None
        for network, what in _NEVER_NETS:
            if address in network:
                return f"a {what} address: never fetched from", False
        if any(address in network for network in self.allow_networks):
            return None
        embedded = _embedded_ipv4(address)
        if embedded is not None and (judged := self._judge(embedded)):
            return f"an IPv6 address that leads to {embedded}, {judged[0]}", judged[1]
        for network, what in _NOT_PUBLIC_NETS:
            if address in network:
                return f"a {what} address", True
        if not address.is_global or address.is_reserved:
            return "not a public address", True
        return None

    def check_host(self, host: str, port: int) -> list[IPAddress]:
        """The addresses of ``host`` to connect to, every one of them allowed; else a
        ``fetch_refused`` error naming the host, the address and the setting."""
        name = host.strip("[]").rstrip(".").lower()
        if name in _METADATA_NAMES:
            raise EngineError(
                "fetch_refused",
                f"refused to fetch from {host!r}: a cloud metadata service, never fetched from",
            )
        addresses = self.resolver(name, port)
        if not addresses:
            raise EngineError("fetch_unresolved", f"cannot resolve host {host!r}: no address")
        for address in addresses:
            if judged := self._judge(address):
                # One bad address refuses the name: the connection could land on any of them.
                why, allowable = judged
                hint = f"; a provider allows it with {_hint(address)}" if allowable else ""
                raise EngineError(
                    "fetch_refused", f"refused to fetch from {host!r} ({address}): {why}{hint}"
                )
        return list(addresses)


def _hint(address: IPAddress) -> str:
    """The setting that would allow just this address (its IPv4 form when mapped)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return f'{SETTING} = ["{ipaddress.ip_network(address)}"] (in config.toml, for a trusted LAN)'
