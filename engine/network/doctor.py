"""The connectivity doctor (``api.NetworkDoctor``): can consumers reach this node, over what,
and the one fix that would help when they cannot (issue 24 §3)."""

from __future__ import annotations

import contextlib
import ipaddress
from typing import Any

import multiaddr

from engine import api
from engine.network.host import is_relayed_conn, tcp_listen
from engine.network.service import NetworkService

RELAY_FIX = 'add a relay: [network] relays = ["/ip4/…/tcp/…/p2p/<relay peer id>"]'


def diagnose(service: NetworkService | None) -> api.NetworkDoctorReport:
    if service is None or service.host is None:
        return api.NetworkDoctorReport(
            online=False,
            fix="run the node with its network (`nunet-tui daemon`, or the app) and ask again",
        )
    found = service.reachability
    evidence = tuple(
        api.ReachabilityEvidence(
            peer_id=e.peer_id, addr=e.addr, outcome=e.outcome, detail=e.detail, at=e.at
        )
        for e in (found.evidence if found is not None else [])
    )
    reservations = tuple(_reservations(service))
    verdict = found.verdict if found is not None else "unknown"
    listen = tuple(service.listen_addrs())
    observed = tuple(sorted(set(found.observed.values()))) if found is not None else ()
    upnp, upnp_addr, upnp_failed = _upnp(service)
    if verdict == "public" or (upnp_addr is not None and verdict != "private"):
        reach: Any = "direct"
    elif reservations:
        reach = "relayed"
    elif verdict == "private":
        reach = "no"
    else:
        reach = "unknown"
    return api.NetworkDoctorReport(
        online=True,
        reachability=verdict,
        reachability_since=found.since if found is not None else None,
        checked_at=found.checked_at if found is not None else None,
        evidence=evidence,
        listen_addrs=listen,
        observed_addrs=observed,
        reservations=reservations,
        upnp=upnp,
        upnp_addr=upnp_addr,
        connections=tuple(_connections(service)),
        consumers_reach=reach,
        fix=fix_for(
            verdict,
            service.bound_listen(),
            bool(reservations),
            service.settings,
            lan_ip=_lan_ip(service),
            upnp_failed=upnp_failed,
        ),
    )


def _upnp(service: NetworkService) -> tuple[str, str | None, bool]:
    """(what the router forwards, or why nothing; the advertised address; whether asking the
    router failed, so that turning UPnP or NAT-PMP on there is worth saying)."""
    mapper = service.port_mapper
    if mapper is None:
        return "not tried ([network] upnp = false)", None, False
    status = mapper.status
    mapping = status.mapping
    if mapping is not None:
        text = (
            f"the router forwards {mapping.external_ip}:{mapping.external_port} to port "
            f"{mapping.internal_port} on {mapping.internal_ip} ({mapping.method})"
        )
        return text, mapper.addrs()[0], False
    if not status.tried:
        return "not tried yet (only while an offer is out)", None, False
    return status.problem or "no mapping", None, True


def fix_for(
    verdict: str,
    bound: list[str],
    relayed: bool,
    settings: Any,
    lan_ip: str | None = None,
    upnp_failed: bool = False,
) -> str | None:
    """One line: what would make this node reachable (None when it is, or nothing is known).

    A private node with a TCP port: forward it (direct connections beat any relay), or turn
    on UPnP or NAT-PMP in the router when asking it failed (engine/network/port_mapping.py);
    one without a port, or not even relayed with no relay configured: add a relay.
    ``lan_ip``: our address on the LAN (the local end of a direct connection), named when the
    listen address does not say it."""
    if verdict == "public":
        return None
    port, host = tcp_listen(bound)
    host = host or lan_ip
    if verdict == "private" and port is not None:
        where = f" to this host ({host})" if host else " to this host"
        upnp = ", or turn on UPnP or NAT-PMP in the router" if upnp_failed else ""
        return f"forward (or open) TCP port {port} on your router{where}{upnp}"
    if verdict == "private" or (not relayed and not settings.relays and not settings.bootstrap):
        return RELAY_FIX
    if verdict == "unknown" and not settings.bootstrap and not settings.relays:
        return "add a bootstrap peer ([network] bootstrap) to learn whether peers reach you"
    return None


def _lan_ip(service: NetworkService) -> str | None:
    """The local address of our first direct connection: the LAN address a router forwards
    to (what a port forward needs), read from the socket, not guessed."""
    network = service.host.get_network()
    for conns in network.connections.values():
        for conn in conns:
            if is_relayed_conn(conn):
                continue
            with contextlib.suppress(Exception):
                socket = _socket_of(conn.muxed_conn)
                ip = ipaddress.ip_address(socket.getsockname()[0])
                if not (ip.is_loopback or ip.is_unspecified):
                    return str(ip)
    return None


_WRAPPED = ("secured_conn", "conn", "read_writer", "read_write_closer", "stream", "_wrapped")


def _socket_of(layer: Any) -> Any:
    """The socket under a connection's layers (yamux, Noise, its framing, the raw and trio
    streams): py-libp2p names no way down, so each known wrapper attribute is followed."""
    for _ in range(10):
        socket = getattr(layer, "socket", None)
        if socket is not None and hasattr(socket, "getsockname"):
            return socket
        layer = next((getattr(layer, a) for a in _WRAPPED if hasattr(layer, a)), None)
        if layer is None:
            break
    raise LookupError("no socket under this connection")


def _reservations(service: NetworkService) -> list[api.RelayReservation]:
    client = service.relay_client
    if client is None:
        return []
    me = str(service.host.get_id())
    return [
        api.RelayReservation(
            relay_peer_id=str(relay),
            circuit_addr=f"{held.addr}/p2p-circuit/p2p/{me}",
            expires_at=held.expires,
        )
        for relay, held in sorted(client.reserved.items(), key=lambda kv: str(kv[0]))
    ]


def _connections(service: NetworkService) -> list[api.PeerConnection]:
    rows = []
    network = service.host.get_network()
    for peer, conns in sorted(network.connections.items(), key=lambda kv: str(kv[0])):
        if not conns:
            continue
        conn = conns[0]
        if is_relayed_conn(conn):
            rows.append(
                api.PeerConnection(
                    peer_id=str(peer),
                    path="relayed",
                    transport=_relay_transport(conn),
                    remote_addr=_first_addr(conn),
                    via_relay=_relay_peer(conn),
                )
            )
        else:
            remote = _first_addr(conn)
            rows.append(
                api.PeerConnection(
                    peer_id=str(peer),
                    path="direct",
                    transport=transport_of(remote),
                    remote_addr=remote,
                )
            )
    return rows


def transport_of(addr: str) -> str:
    """The transport a multiaddr names: quic, ws, wss, webtransport, tcp, udp…"""
    names: list[str] = []
    with contextlib.suppress(Exception):
        names = [p.name for p in multiaddr.Multiaddr(addr).protocols()]
    for name in ("webtransport", "quic-v1", "quic", "wss", "ws", "tcp", "udp"):
        if name in names:
            return "quic" if name.startswith("quic") else name
    return "?"


def _first_addr(conn: Any) -> str:
    with contextlib.suppress(Exception):
        addrs = conn.get_transport_addresses()
        if addrs:
            return str(addrs[0])
    with contextlib.suppress(Exception):
        ip, port = conn.muxed_conn.get_remote_address()
        return f"/{'ip6' if ':' in ip else 'ip4'}/{ip}/tcp/{int(port)}"
    return "?"


def _circuit_stream(conn: Any) -> Any:
    """The relay's stream a relayed connection runs in (its ``muxed_conn`` is our connection
    to the relay), found down the connection's layers."""
    layer = conn.muxed_conn
    for _ in range(10):
        stream = getattr(layer, "stream", None)
        if stream is not None and hasattr(stream, "muxed_conn"):
            return stream
        layer = next((getattr(layer, a) for a in _WRAPPED if hasattr(layer, a)), None)
        if layer is None:
            break
    raise LookupError("no relay stream under this connection")


def _relay_peer(conn: Any) -> str | None:
    """The relay carrying ``conn``: the peer of the stream the circuit runs in (the
    circuit's address names the wrong one on the inbound side, docs/network-nat.md #8)."""
    with contextlib.suppress(Exception):
        return str(_circuit_stream(conn).muxed_conn.peer_id)
    return None


def _relay_transport(conn: Any) -> str:
    """The transport of the connection to the relay that carries the circuit."""
    with contextlib.suppress(Exception):
        ip, port = _circuit_stream(conn).muxed_conn.get_remote_address()
        return transport_of(f"/{'ip6' if ':' in ip else 'ip4'}/{ip}/tcp/{int(port)}")
    return "?"
