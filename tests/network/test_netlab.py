"""The NAT lab's routers behave as their kinds are named (RFC 4787 mapping and filtering),
probed with plain UDP/TCP sockets that live in the lab's namespaces."""

from __future__ import annotations

import socket
import sys

import pytest

from tests import netlab
from tests.netlab import Host, Lab, NatKind

ALL_KINDS = list(netlab.HOME_NUMBERS)  # the three routers every lab has (not the UPnP home)
# A negative check ("nothing arrives") needs a bound; replies that should arrive come in
# well under a millisecond on veth.
QUIET_S = 1.0


def _udp(lab: Lab, host: Host, port: int = 0) -> socket.socket:
    sock = lab.socket(host)
    sock.bind(("0.0.0.0", port))
    sock.settimeout(10)
    return sock


def _tcp_server(lab: Lab, host: Host) -> tuple[socket.socket, int]:
    """A listening TCP socket in host's namespace on a free port (no TIME_WAIT clashes)."""
    server = lab.socket(host, socket.SOCK_STREAM)
    server.bind(("0.0.0.0", 0))
    server.listen()
    server.settimeout(10)
    return server, server.getsockname()[1]


def _observed(lab: Lab, home_sock: socket.socket, server: Host, port: int) -> tuple[str, int]:
    """Send from home_sock to a fresh UDP server on server:port; the source it saw."""
    with _udp(lab, server, port) as srv:
        home_sock.sendto(b"probe", (server.addr, port))
        data, source = srv.recvfrom(64)
    assert data == b"probe"
    return source


def _arrives_before_control(
    home_sock: socket.socket, sender: socket.socket, target: tuple[str, int], control: socket.socket
) -> bool:
    """Does an unsolicited datagram from sender get in? A permitted one from control follows
    it through the same router, so its arrival ends the wait instead of a timer."""
    sender.sendto(b"unsolicited", target)
    control.sendto(b"control", target)
    data, _ = home_sock.recvfrom(64)
    return data == b"unsolicited"


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_public_server_sees_the_router_address(nat_lab: Lab, kind: NatKind) -> None:
    home = nat_lab.homes[kind]
    with _udp(nat_lab, home.hosts[0]) as sock:
        addr, port = _observed(nat_lab, sock, nat_lab.public[1], 4001)
        local_port = sock.getsockname()[1]
    assert addr == home.router.addr
    if kind is not NatKind.SYMMETRIC:  # the cones keep the source port where they can
        assert port == local_port
    # TCP too: the server's accepted connection comes from the router.
    server, port = _tcp_server(nat_lab, nat_lab.public[1])
    with server, nat_lab.socket(home.hosts[0], socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect((nat_lab.public[1].addr, port))
        conn, (peer_addr, _) = server.accept()
        conn.close()
    assert peer_addr == home.router.addr


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_home_host_cannot_be_reached_without_a_mapping(nat_lab: Lab, kind: NatKind) -> None:
    home = nat_lab.homes[kind]
    outsider = nat_lab.public[2]
    listener, port = _tcp_server(nat_lab, home.hosts[1])
    with listener:
        for target in (home.router.addr, home.hosts[1].addr):
            with nat_lab.socket(outsider, socket.SOCK_STREAM) as dialer:
                dialer.settimeout(QUIET_S)
                # Neither the router's port nor the private address itself (the outsider has
                # no route to it: ENETUNREACH) lets the dial in.
                with pytest.raises(OSError):
                    dialer.connect((target, port))


def test_a_public_host_with_a_route_to_the_home_is_still_dropped(nat_lab: Lab) -> None:
    """The routers drop new inbound flows that were not DNATed, as home routers do."""
    outsider = nat_lab.public[2]
    for n, home in enumerate(nat_lab.homes.values(), start=1):
        route = ["ip", "route", "replace", f"10.77.{n}.0/24", "via", home.router.addr]
        assert nat_lab.run(outsider, route).returncode == 0
    try:
        for home in nat_lab.homes.values():
            listener, port = _tcp_server(nat_lab, home.hosts[1])
            with listener, nat_lab.socket(outsider, socket.SOCK_STREAM) as dialer:
                dialer.settimeout(QUIET_S)
                with pytest.raises(TimeoutError):
                    dialer.connect((home.hosts[1].addr, port))
    finally:
        for n in range(1, len(nat_lab.homes) + 1):
            nat_lab.run(outsider, ["ip", "route", "del", f"10.77.{n}.0/24"])


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_mapping(nat_lab: Lab, kind: NatKind) -> None:
    """Cones give one external port for every destination; symmetric a new one per flow."""
    home = nat_lab.homes[kind]
    with _udp(nat_lab, home.hosts[0]) as sock:
        seen = {
            _observed(nat_lab, sock, server, port)
            for server in nat_lab.public[1:]
            for port in (4201, 4202)
        }
    assert {addr for addr, _ in seen} == {home.router.addr}
    ports = {port for _, port in seen}
    if kind is NatKind.SYMMETRIC:
        # Random ports: four flows could share one only by a one in 2^45 chance.
        assert len(ports) > 1
    else:
        assert len(ports) == 1


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_filtering(nat_lab: Lab, kind: NatKind) -> None:
    """Once home sent to S1:p, who else may send in to the mapped port: anyone (full cone),
    or only S1:p (port-restricted and symmetric)."""
    home = nat_lab.homes[kind]
    s1, s2 = nat_lab.public[1], nat_lab.public[2]
    with (
        _udp(nat_lab, home.hosts[0]) as sock,
        _udp(nat_lab, s1, 4301) as control,
        _udp(nat_lab, s2) as other_host,
        _udp(nat_lab, s1) as other_port,
    ):
        sock.sendto(b"open", (s1.addr, 4301))
        _, mapped = control.recvfrom(64)
        open_to_all = kind is NatKind.FULL_CONE
        assert _arrives_before_control(sock, other_host, mapped, control) is open_to_all
        if open_to_all:  # the control datagram is still queued behind the unsolicited one
            assert sock.recvfrom(64)[0] == b"control"
        assert _arrives_before_control(sock, other_port, mapped, control) is open_to_all


def test_full_cone_accepts_tcp_to_the_mapped_port(nat_lab: Lab) -> None:
    """A TCP connection out from port P opens P to everyone (what lets a libp2p node that
    dials from its listen port be reached)."""
    home = nat_lab.homes[NatKind.FULL_CONE]
    s1, s2 = nat_lab.public[1], nat_lab.public[2]
    server, server_port = _tcp_server(nat_lab, s1)
    with (
        server,
        nat_lab.socket(home.hosts[0], socket.SOCK_STREAM) as out,
        nat_lab.socket(home.hosts[0], socket.SOCK_STREAM) as listener,
    ):
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind(("0.0.0.0", 0))
        port = listener.getsockname()[1]
        out.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        out.bind(("0.0.0.0", port))
        listener.listen()
        listener.settimeout(10)
        out.settimeout(10)
        out.connect((s1.addr, server_port))
        server.accept()[0].close()
        with nat_lab.socket(s2, socket.SOCK_STREAM) as dialer:
            dialer.settimeout(10)
            dialer.connect((home.router.addr, port))
            conn, (peer, _) = listener.accept()
            conn.close()
        assert peer == s2.addr


def test_a_process_runs_inside_a_namespace(nat_lab: Lab) -> None:
    home = nat_lab.homes[NatKind.PORT_RESTRICTED]
    server = nat_lab.public[1]
    code = (
        "import socket, sys; s = socket.create_connection((sys.argv[1], int(sys.argv[2])), "
        "timeout=10); print(s.getsockname()[0])"
    )
    listener, port = _tcp_server(nat_lab, server)
    with listener:
        proc = nat_lab.popen(
            home.hosts[0],
            [sys.executable, "-c", code, server.addr, str(port)],
            stdout=-1,
            text=True,
        )
        conn, (peer, _) = listener.accept()
        conn.close()
        out, _ = proc.communicate(timeout=30)
    assert out.strip() == home.hosts[0].addr  # the process saw its home address...
    assert peer == home.router.addr  # ...and the server the router's


def test_teardown_and_stale_cleanup() -> None:
    reason = netlab.unavailable_reason()
    if reason:
        pytest.skip(reason)
    with netlab.lab(public_hosts=1, hosts_per_home=1) as built:
        assert built.namespaces()
    assert built.namespaces() == []
    # A lab left by a killed run (its pid is gone) is removed by the next one.
    dead_pid = 4_194_305  # above the largest pid_max Linux allows
    stale = f"{netlab.PREFIX}{dead_pid}x1-inet"
    assert netlab._ip("netns", "add", stale).returncode == 0
    assert f"{netlab.PREFIX}{dead_pid}x1" in netlab.cleanup_stale()
    assert stale not in netlab.namespaces()
