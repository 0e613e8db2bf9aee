"""The NAT lab: network namespaces, veth pairs and netfilter NAT on this machine.

One "internet" namespace holds a bridge for the public segment (198.18.0.0/24, inside the
198.18.0.0/15 benchmarking block), with public hosts (the first is the bootstrap/relay node)
and the WAN side of three home routers. Each router has a LAN bridge (10.77.N.0/24) with its
home hosts behind it, and one kind of NAT:

- full cone (endpoint-independent mapping and filtering): masquerade keeps the source port
  where it can, and every new outbound flow records "external port -> internal host" in a
  dynamic nftables map; inbound packets to a recorded port are DNATed back to that host,
  whoever sends them. (A static DNAT would expose every port, which no router does.)
- port-restricted cone: plain masquerade. Linux keeps the source port where it can, so the
  mapping is endpoint-independent, and conntrack lets in only replies from the address and
  port the flow was sent to.
- symmetric (address-and-port-dependent mapping): masquerade with `fully-random` (iptables'
  `--random-fully`), a fresh random external port for every new flow.

Every router also drops new inbound flows that were not DNATed, so a public host that adds a
route to 10.77.0.0/16 still cannot reach a home host. The rules are written with `nft`
(iptables here is the nf_tables backend; the same netfilter, one tool for the dynamic map).

Names carry a prefix, the pid and a counter (`nl<pid>x<n>-...`), so parallel test workers
never collide; `Lab` tears everything down on exit, and `cleanup_stale()` removes what a
killed run left behind (namespaces whose pid no longer exists). Interfaces are created
directly inside the namespaces, so nothing appears in the root namespace.

For people: `python -m tests.netlab up` builds a lab and waits (Ctrl-C tears it down),
`python -m tests.netlab list` shows labs, `python -m tests.netlab down` removes stale ones.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = "nl"
PUBLIC_NET = "198.18.0"  # /24 of the 198.18.0.0/15 benchmarking block: the lab's internet
RELAY_ADDR = f"{PUBLIC_NET}.2"
NETNS_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000
_NAME = re.compile(rf"^{PREFIX}(\d+)x(\d+)-")
_counter = 0
_counter_lock = threading.Lock()


class NatKind(enum.StrEnum):
    FULL_CONE = "full-cone"
    PORT_RESTRICTED = "port-restricted"
    SYMMETRIC = "symmetric"
    UPNP = "upnp"  # a port-restricted router that runs miniupnpd (``add_upnp_home``)


# Home N sits on 10.77.N.0/24 behind router 198.18.0.(100+N).
HOME_NUMBERS = {NatKind.FULL_CONE: 1, NatKind.PORT_RESTRICTED: 2, NatKind.SYMMETRIC: 3}


@dataclass(frozen=True)
class Host:
    """A namespace with one address: a public host, a home host or a router's WAN side."""

    name: str  # e.g. "relay", "full-cone-1"
    ns: str
    addr: str


@dataclass(frozen=True)
class Home:
    kind: NatKind
    router: Host  # its address is the router's public (WAN) address
    hosts: tuple[Host, ...]


@dataclass
class Lab:
    tag: str  # the "nl<pid>x<n>" part every namespace name starts with
    inet_ns: str
    public: tuple[Host, ...]  # public[0] is the bootstrap/relay node
    homes: dict[NatKind, Home]
    _procs: list[subprocess.Popen[Any]] = field(default_factory=list)

    @property
    def relay(self) -> Host:
        return self.public[0]

    def namespaces(self) -> list[str]:
        return namespaces(self.tag)

    def popen(self, host: Host, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a process inside host's namespace (`ip netns exec`); killed at teardown."""
        proc = subprocess.Popen(["ip", "netns", "exec", host.ns, *argv], **kwargs)
        self._procs.append(proc)
        return proc

    def run(
        self, host: Host, argv: Sequence[str], *, timeout: float = 30, **kwargs: Any
    ) -> subprocess.CompletedProcess[Any]:
        """Run a process inside host's namespace to completion."""
        return subprocess.run(
            ["ip", "netns", "exec", host.ns, *argv], timeout=timeout, check=False, **kwargs
        )

    def socket(self, host: Host, kind: socket.SocketKind = socket.SOCK_DGRAM) -> socket.socket:
        """An IPv4 socket that lives in host's namespace (created there; usable from here)."""
        return socket_in(host.ns, kind)

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self._procs.clear()
        remove(self.tag)
        for leftover in Path("/tmp").glob(f"{self.tag}-miniupnpd.*"):
            leftover.unlink(missing_ok=True)


def unavailable_reason() -> str | None:
    """Why the lab cannot be built here (None when it can): root, `ip`, `nft`, netns."""
    if sys.platform != "linux":
        return "the NAT lab needs Linux network namespaces"
    if os.geteuid() != 0:
        return "the NAT lab needs root (ip netns, nft); CI runs as root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"the NAT lab needs `{tool}` (iproute2 / nftables) on PATH"
    probe = f"{PREFIX}{os.getpid()}x0-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@contextlib.contextmanager
def lab(*, public_hosts: int = 3, hosts_per_home: int = 2) -> Iterator[Lab]:
    """Build a lab, yield it, and tear it down (also when building fails half-way)."""
    cleanup_stale()
    global _counter
    with _counter_lock:
        _counter += 1
        tag = f"{PREFIX}{os.getpid()}x{_counter}"
    built = Lab(tag=tag, inet_ns=f"{tag}-inet", public=(), homes={})
    try:
        _build(built, public_hosts, hosts_per_home)
        yield built
    finally:
        built.close()


def _build(lab: Lab, public_hosts: int, hosts_per_home: int) -> None:
    inet = lab.inet_ns
    _netns_add(inet)
    _ip("-n", inet, "link", "add", "br0", "type", "bridge")
    _ip("-n", inet, "link", "set", "br0", "up")
    public = []
    for i in range(public_hosts):
        name = "relay" if i == 0 else f"public-{i}"
        host = Host(name, f"{lab.tag}-{name}", f"{PUBLIC_NET}.{2 + i}")
        _netns_add(host.ns)
        _veth(host.ns, "eth0", inet, f"p{i}", bridge="br0")
        _addr(host.ns, "eth0", f"{host.addr}/24")
        public.append(host)
    lab.public = tuple(public)
    for kind, n in HOME_NUMBERS.items():
        router = Host(f"{kind}-router", f"{lab.tag}-{kind}-rt", f"{PUBLIC_NET}.{100 + n}")
        _netns_add(router.ns)
        _veth(router.ns, "wan", inet, f"r{n}", bridge="br0")
        _addr(router.ns, "wan", f"{router.addr}/24")
        hosts = _lan(lab, router, kind, n, hosts_per_home)
        lab.homes[kind] = Home(kind, router, hosts)


def _lan(lab: Lab, router: Host, kind: NatKind, n: int, count: int) -> tuple[Host, ...]:
    """A router's LAN (10.77.n.0/24 on a bridge), its NAT rules and ``count`` hosts."""
    _ip("-n", router.ns, "link", "add", "br-lan", "type", "bridge")
    _ip("-n", router.ns, "link", "set", "br-lan", "up")
    _addr(router.ns, "br-lan", f"10.77.{n}.1/24")
    _sysctl(router.ns, "net.ipv4.ip_forward", "1")
    nat = NatKind.PORT_RESTRICTED if kind is NatKind.UPNP else kind
    _nft(router.ns, _router_rules(nat))
    hosts = []
    for j in range(count):
        host = Host(f"{kind}-{j + 1}", f"{lab.tag}-{kind}-{j + 1}", f"10.77.{n}.{10 + j}")
        _netns_add(host.ns)
        _veth(host.ns, "eth0", router.ns, f"h{j}", bridge="br-lan")
        _addr(host.ns, "eth0", f"{host.addr}/24")
        _ip("-n", host.ns, "route", "add", "default", "via", f"10.77.{n}.1")
        hosts.append(host)
    return tuple(hosts)


# The UPnP home (``add_upnp_home``): home 4 behind a port-restricted router that also runs
# miniupnpd, the UPnP IGD and NAT-PMP daemon of real home routers. Its WAN address is outside
# the reserved blocks, unlike the rest of the lab's internet: miniupnpd refuses to map ports
# on a reserved external address (it would be behind another NAT), as it should. The lab's
# namespaces have no route out of this machine, so no packet to or from it can leave.
UPNP_WAN = "11.77.0.104"
UPNP_HOME = 4
_UPNP_RULES = """
table inet filter {
  chain miniupnpd {
  }
  chain prerouting_miniupnpd {
  }
  chain postrouting_miniupnpd {
  }
  chain forward {
    type filter hook forward priority 0; policy accept;
    jump miniupnpd
  }
  chain prerouting {
    type nat hook prerouting priority -100; policy accept;
    jump prerouting_miniupnpd
  }
  chain postrouting {
    type nat hook postrouting priority 100; policy accept;
    jump postrouting_miniupnpd
  }
}
"""


def upnp_unavailable_reason() -> str | None:
    """Why the UPnP home cannot be built (None when it can): the lab's needs and miniupnpd."""
    reason = unavailable_reason()
    if reason is None and shutil.which("miniupnpd") is None:
        reason = "the UPnP home needs miniupnpd (apt install miniupnpd)"
    return reason


def add_upnp_home(lab: Lab, *, hosts: int = 1, upnp: bool = True) -> Home:
    """Home 4 (10.77.4.0/24) behind a port-restricted router whose miniupnpd maps ports for
    its LAN (secure mode: a host maps only to itself) by NAT-PMP, and by UPnP unless ``upnp``
    is False (a router that speaks NAT-PMP only, as Apple's did). Every public host and
    router learns the route to its WAN address; miniupnpd is stopped with the lab."""
    n = UPNP_HOME
    subnet = UPNP_WAN.rsplit(".", 1)[0] + ".0/24"
    router = Host("upnp-router", f"{lab.tag}-upnp-rt", UPNP_WAN)
    _netns_add(router.ns)
    _veth(router.ns, "wan", lab.inet_ns, f"r{n}", bridge="br0")
    _addr(router.ns, "wan", f"{UPNP_WAN}/24")
    _ip("-n", router.ns, "route", "add", f"{PUBLIC_NET}.0/24", "dev", "wan")
    for other in (*lab.public, *(home.router for home in lab.homes.values())):
        dev = "eth0" if other in lab.public else "wan"
        _ip("-n", other.ns, "route", "add", subnet, "dev", dev)
    members = _lan(lab, router, NatKind.UPNP, n, hosts)
    _nft(router.ns, _UPNP_RULES)
    conf = Path(f"/tmp/{lab.tag}-miniupnpd.conf")
    conf.write_text(
        "ext_ifname=wan\nlistening_ip=br-lan\nport=0\nenable_natpmp=yes\n"
        f"enable_upnp={'yes' if upnp else 'no'}\n"
        "secure_mode=yes\nsystem_uptime=yes\nuuid=4b79b16e-83a8-4195-88ae-052702c8debd\n"
        f"allow 1024-65535 10.77.{n}.0/24 1024-65535\ndeny 0-65535 0.0.0.0/0 0-65535\n"
    )
    lab.popen(
        router,
        ["miniupnpd", "-d", "-f", str(conf), "-P", f"/tmp/{lab.tag}-miniupnpd.pid"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    home = Home(NatKind.UPNP, router, members)
    lab.homes[NatKind.UPNP] = home
    return home


# How long the full-cone router remembers a mapping after the last new flow through it.
FULL_CONE_MAPPING_S = 300


def _router_rules(kind: NatKind) -> str:
    masquerade = "masquerade fully-random" if kind is NatKind.SYMMETRIC else "masquerade"
    full_cone = kind is NatKind.FULL_CONE
    maps = (
        "".join(
            f"map fc_{proto} {{ type inet_service : ipv4_addr; flags dynamic,timeout; "
            f"timeout {FULL_CONE_MAPPING_S}s; }}\n"
            for proto in ("tcp", "udp")
        )
        if full_cone
        else ""
    )
    pre = (
        "".join(
            f'iifname "wan" meta l4proto {proto} dnat to {proto} dport map @fc_{proto}\n'
            for proto in ("tcp", "udp")
        )
        if full_cone
        else ""
    )
    # Recorded before masquerade rewrites the packet: the external port is the internal one
    # whenever masquerade could keep it (a collision would make the entry point elsewhere).
    record = (
        "".join(
            f'oifname "wan" meta l4proto {proto} '
            f"update @fc_{proto} {{ {proto} sport : ip saddr }}\n"
            for proto in ("tcp", "udp")
        )
        if full_cone
        else ""
    )
    return f"""
table ip lab {{
{maps}
  chain pre {{ type nat hook prerouting priority dstnat; policy accept;
{pre}  }}
  chain post {{ type nat hook postrouting priority srcnat; policy accept;
{record}    oifname "wan" {masquerade}
  }}
  chain inbound {{ type filter hook forward priority filter; policy accept;
    iifname "wan" ct state new ct status & dnat == 0 counter drop
  }}
}}
"""


# -- running things inside a namespace ------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def socket_in(ns: str, kind: socket.SocketKind = socket.SOCK_DGRAM) -> socket.socket:
    """Create an IPv4 socket inside namespace ns: a socket stays in the namespace it was
    created in, so only this thread switches, for the one call, and switches straight back."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(NETNS_DIR / ns, os.O_RDONLY)
    try:
        _setns(target)
        try:
            return socket.socket(socket.AF_INET, kind)
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)


# -- naming, teardown and stale labs --------------------------------------------------------


def namespaces(tag: str | None = None) -> list[str]:
    """The lab namespaces that exist (all labs, or the one with this tag)."""
    listed = _ip("netns", "list", check=False).stdout.splitlines()
    names = [line.split()[0] for line in listed if line.strip()]
    return sorted(n for n in names if _NAME.match(n) and (tag is None or n.startswith(f"{tag}-")))


def remove(tag: str) -> None:
    """Delete one lab: kill what runs in its namespaces, then the namespaces (and veths)."""
    for ns in namespaces(tag):
        for pid in _ip("netns", "pids", ns, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "del", ns, check=False)


def cleanup_stale() -> list[str]:
    """Remove labs whose creating process is gone; returns the tags removed."""
    tags = set()
    for ns in namespaces():
        match = _NAME.match(ns)
        if match and not _alive(int(match.group(1))):
            tags.add(f"{PREFIX}{match.group(1)}x{match.group(2)}")
    for tag in sorted(tags):
        remove(tag)
    return sorted(tags)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- small wrappers ---------------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _netns_add(ns: str) -> None:
    _ip("netns", "add", ns)
    _ip("-n", ns, "link", "set", "lo", "up")


def _veth(ns_a: str, name_a: str, ns_b: str, name_b: str, *, bridge: str) -> None:
    """A veth pair created directly in its two namespaces; the b end joins a bridge."""
    _ip("link", "add", "name", name_a, "netns", ns_a, "type", "veth", "peer", "name", name_b,
        "netns", ns_b)  # fmt: skip
    _ip("-n", ns_b, "link", "set", name_b, "master", bridge, "up")
    _ip("-n", ns_a, "link", "set", name_a, "up")


def _addr(ns: str, dev: str, cidr: str) -> None:
    _ip("-n", ns, "addr", "add", cidr, "dev", dev)


def _sysctl(ns: str, key: str, value: str) -> None:
    path = "/proc/sys/" + key.replace(".", "/")
    _ip("netns", "exec", ns, "sh", "-c", f"echo {value} > {path}")


def _nft(ns: str, rules: str) -> None:
    done = subprocess.run(
        ["ip", "netns", "exec", ns, "nft", "-f", "-"],
        input=rules,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if done.returncode != 0:
        raise RuntimeError(f"nft in {ns}: {done.stderr.strip()}")


# -- for people ---------------------------------------------------------------------------------


def _describe(built: Lab) -> str:
    lines = [f"lab {built.tag} (public segment {PUBLIC_NET}.0/24 in {built.inet_ns})"]
    lines += [f"  public  {h.name:<18} {h.addr:<14} ip netns exec {h.ns} ..." for h in built.public]
    for home in built.homes.values():
        r = home.router
        lines.append(f"  router  {r.name:<18} {r.addr:<14} ({home.kind} NAT, ns {r.ns})")
        lines += [
            f"    home  {h.name:<16} {h.addr:<14} ip netns exec {h.ns} ..." for h in home.hosts
        ]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    command = argv[0] if argv else "help"
    if command == "up":
        reason = unavailable_reason()
        if reason:
            print(reason, file=sys.stderr)
            return 1
        with lab() as built:
            print(_describe(built), flush=True)
            print("Ctrl-C tears it down.", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
        return 0
    if command == "down":
        print("removed:", " ".join(cleanup_stale()) or "nothing")
        return 0
    if command == "list":
        print("\n".join(namespaces()) or "no lab namespaces")
        return 0
    print("usage: python -m tests.netlab up | down | list", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
