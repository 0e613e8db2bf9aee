"""py-libp2p 0.8.1's QUIC transport (``libp2p/transport/quic``, aioquic underneath), probed.

    python -m tests.network.quic_probe basic      two hosts: echo both ways, 10 MiB, close
    python -m tests.network.quic_probe streams N  one peer opens N streams and holds them
    python -m tests.network.quic_probe noread MB  a sender writes MB to a handler that never reads
    python -m tests.network.quic_probe fill N     N streams, 2 MiB written on each, never read
    python -m tests.network.quic_probe oversized  a multistream message announcing 1 GiB
    python -m tests.network.quic_probe source     the UDP port a dial leaves from
    python -m tests.network.quic_probe mismatch   a dial for X to an address naming B
    python -m tests.network.quic_probe punch ME PEER PEER_IP PORT DELAY  (one side, in the lab)
    python -m tests.network.quic_probe udp PEER_IP PORT DELAY RELAY_IP   (the control: UDP)
        (both print {"event": "ready"}, then start DELAY s after a line on stdin)
    python -m tests.network.quic_probe flood N    N Initial packets, each from a new UDP port
    python -m tests.network.quic_probe stall      one Initial, then silence: how long is it kept?

Each prints one JSON object (what was measured) on stdout. The hosts are configured like ours
(engine/network/host.py build_host: our resource manager with its per-peer stream cap, one
connection per peer, the stream/multistream guards), with QUIC instead of TCP + Noise + yamux:
QUIC brings its own security (TLS 1.3 with libp2p's certificate extension) and streams.
tests/network/test_quic_probe.py turns each finding into a test (docs/network-nat.md, "QUIC").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.transport.quic.config import QUICTransportConfig

from engine.network.host import DIAL_TIMEOUT_S, PerPeerResourceManager
from engine.network.libp2p_guards import bound_multistream_messages, guard_host

QUIC_ANY = "/ip4/127.0.0.1/udp/0/quic-v1"
ECHO = TProtocol("/nunet-probe/echo/1")
BULK = TProtocol("/nunet-probe/bulk/1")
HOLD = TProtocol("/nunet-probe/hold/1")  # a handler that never reads, and keeps the stream
MIB = 1 << 20


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def rss_mb() -> float:
    """This process's resident memory now (Linux: /proc/self/statm), in MiB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return round(pages * resource.getpagesize() / MIB, 1)


def quic_host(handlers: dict[TProtocol, Callable[[Any], Awaitable[None]]] | None = None) -> Any:
    """A host like build_host's, over QUIC (QUICTransportConfig is a ConnectionConfig)."""
    host = new_host(
        key_pair=create_new_key_pair(),
        resource_manager=PerPeerResourceManager(),
        listen_addrs=[multiaddr.Multiaddr(QUIC_ANY)],
        connection_config=QUICTransportConfig(
            max_connections_per_peer=1, dial_timeout=DIAL_TIMEOUT_S
        ),
        enable_mDNS=False,
    )
    guard_host(host)
    bound_multistream_messages()
    for protocol, handler in (handlers or {}).items():
        host.set_stream_handler(protocol, handler)
    return host


@contextlib.asynccontextmanager
async def running(*hosts: Any) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as stack:
        for host in hosts:
            await stack.enter_async_context(host.run([multiaddr.Multiaddr(QUIC_ANY)]))
        yield


async def connect(a: Any, b: Any) -> float:
    started = time.monotonic()
    with trio.fail_after(10):
        await a.connect(PeerInfo(b.get_id(), b.get_addrs()))
    return time.monotonic() - started


def udp_port(host: Any) -> int:
    for addr in host.get_addrs():
        return int(addr.value_for_protocol("udp"))
    raise RuntimeError("the host listens on no UDP address")


async def read_all(stream: Any) -> bytes:
    """Everything until the writer's FIN (py-libp2p raises StreamEOF at the end)."""
    chunks = []
    with contextlib.suppress(Exception):
        while data := await stream.read(65536):
            chunks.append(data)
    return b"".join(chunks)


async def echo(stream: Any) -> None:
    data = await stream.read(65536)
    await stream.write(data[::-1])
    await stream.close()


# -- 1. what works ------------------------------------------------------------------------


async def basic(size: int = 10 * MIB) -> dict[str, Any]:
    received: dict[str, Any] = {}
    done = trio.Event()

    async def bulk(stream: Any) -> None:
        data = await read_all(stream)
        received.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        await stream.close()
        done.set()

    a = quic_host({ECHO: echo, BULK: bulk})
    b = quic_host({ECHO: echo, BULK: bulk})
    result: dict[str, Any] = {"probe": "basic"}
    async with running(a, b):
        result["connect_s"] = round(await connect(a, b), 3)
        echoes = []
        for x, y in ((a, b), (b, a)):  # a request/response each way on the one connection
            stream = await x.new_stream(y.get_id(), [ECHO])
            await stream.write(b"request" * 100)
            answer = await stream.read(65536)
            echoes.append(answer == (b"request" * 100)[::-1])
            await stream.close()
        result["echo_both_ways"] = all(echoes)
        blob = os.urandom(size)
        started = time.monotonic()
        stream = await a.new_stream(b.get_id(), [BULK])
        for offset in range(0, size, 65536):
            await stream.write(blob[offset : offset + 65536])
        await stream.close()
        with trio.move_on_after(60):
            await done.wait()
        result["bulk_s"] = round(time.monotonic() - started, 2)
        result["bulk_sent"] = size
        result["bulk_received"] = received.get("bytes")
        result["bulk_intact"] = received.get("sha256") == hashlib.sha256(blob).hexdigest()
        result["connections"] = len(a.get_network().get_connections(b.get_id()))
    result["closed"] = True
    return result


# -- 2. attacks ---------------------------------------------------------------------------


async def many_streams(count: int) -> dict[str, Any]:
    """One peer opens ``count`` streams to a handler that holds them open: how many one
    connection carries at once, and whether the connection survives the attempt."""
    per_connection: dict[int, int] = {}

    async def hold(stream: Any) -> None:
        key = id(stream.muxed_conn)
        per_connection[key] = per_connection.get(key, 0) + 1
        await trio.sleep_forever()

    victim = quic_host({HOLD: hold})
    attacker = quic_host()
    opened = failed = 0
    errors: set[str] = set()
    async with running(victim, attacker):
        await connect(attacker, victim)
        with trio.move_on_after(60):
            for _ in range(count):
                try:
                    # Far above what one open takes on a busy machine: only a stream the
                    # peer's limit holds back waits this long.
                    with trio.fail_after(10):
                        stream = await attacker.new_stream(victim.get_id(), [HOLD])
                        await stream.write(b"x")
                    opened += 1
                except (Exception, trio.TooSlowError) as exc:
                    failed += 1
                    errors.add(type(exc).__name__)
                    if failed > 3:
                        break
    return {
        "probe": "streams",
        "asked": count,
        "opened_by_attacker": opened,
        "failed": failed,
        "errors": sorted(errors),
        "connections_used": len(per_connection),
        "max_streams_one_connection": max(per_connection.values(), default=0),
    }


async def never_reads(megabytes: int, blocked_s: float = 5.0) -> dict[str, Any]:
    """A sender writes ``megabytes`` to a handler that reads nothing for a while, then reads
    everything: does flow control stop the sender, and does what was written all arrive?
    A write (64 KiB) that has not returned after ``blocked_s`` counts as held back: a slow
    machine slows every write, it does not hold one for seconds."""
    size = megabytes * MIB
    release = trio.Event()
    read_done = trio.Event()
    received: dict[str, int] = {}

    async def hold(stream: Any) -> None:
        await release.wait()
        received["bytes"] = len(await read_all(stream))
        read_done.set()

    victim = quic_host({HOLD: hold})
    sender = quic_host()
    rss_before = rss_mb()
    async with running(victim, sender):
        await connect(sender, victim)
        stream = await sender.new_stream(victim.get_id(), [HOLD])
        written = 0
        started = time.monotonic()
        while written < size:
            with trio.move_on_after(blocked_s) as held:
                await stream.write(b"\0" * 65536)
            if held.cancelled_caught:
                break
            written += 65536
        write_s = time.monotonic() - started
        rss_peak = rss_mb()
        with contextlib.suppress(Exception):
            await stream.close()
        release.set()
        with trio.move_on_after(30):
            await read_done.wait()
    return {
        "probe": "noread",
        "asked_mb": megabytes,
        "written_before_blocked": written,
        "write_s": round(write_s, 2),
        "received_after_reading": received.get("bytes"),
        "rss_growth_mb": round(rss_peak - rss_before, 1),
    }


async def fill(streams: int, per_stream_mb: int = 2) -> dict[str, Any]:
    """One peer opens ``streams`` streams to a handler that never reads and writes
    ``per_stream_mb`` on each: what the victim buffers for it (its RSS growth)."""
    opened = 0

    async def hold(stream: Any) -> None:
        nonlocal opened
        opened += 1
        await trio.sleep_forever()

    victim = quic_host({HOLD: hold})
    attacker = quic_host()
    chunk = b"\0" * 65536
    async with running(victim, attacker):
        await connect(attacker, victim)
        rss_before = rss_mb()
        written = 0
        with trio.move_on_after(60):
            for _ in range(streams):
                stream = await attacker.new_stream(victim.get_id(), [HOLD])
                for _ in range(per_stream_mb * 16):
                    await stream.write(chunk)
                    written += len(chunk)
        await trio.sleep(1.0)
        growth = rss_mb() - rss_before
    return {
        "probe": "fill",
        "streams": streams,
        "opened_at_victim": opened,
        "written_mb": written // MIB,
        "rss_growth_mb_both_hosts": round(growth, 1),
    }


async def oversized(announced: int = 1 << 30) -> dict[str, Any]:
    """A raw QUIC stream whose first multistream-select message announces ``announced``
    bytes (the length prefix of engine/network/libp2p_guards.py bound_multistream_messages),
    then sends 256 KiB: is it refused before the body is read, and does the connection live?"""
    from libp2p.utils.varint import encode_uvarint

    victim = quic_host({ECHO: echo})
    attacker = quic_host()
    outcome = "open"
    async with running(victim, attacker):
        await connect(attacker, victim)
        conn = attacker.get_network().get_connections(victim.get_id())[0]
        raw = await conn.muxed_conn.open_stream()
        with contextlib.suppress(Exception):
            await raw.write(encode_uvarint(announced) + b"\0" * (256 * 1024))
        answered = 0  # the listener's own multistream header comes first (20 bytes)
        with trio.move_on_after(10):
            try:
                while True:
                    answered += len(await raw.read(65536))
            except Exception as exc:
                outcome = f"{type(exc).__name__} after {answered} bytes"
        stream = await attacker.new_stream(victim.get_id(), [ECHO])  # the connection lives on
        await stream.write(b"still here")
        alive = await stream.read(65536) == b"still here"[::-1]
    return {"probe": "oversized", "announced": announced, "outcome": outcome, "alive": alive}


def initial_datagrams(port: int) -> list[bytes]:
    """The datagrams an aioquic QUIC v1 client sends first (a fresh connection's Initial)."""
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.connection import QuicConnection

    config = QuicConfiguration(is_client=True, alpn_protocols=["libp2p"])
    client = QuicConnection(configuration=config)
    client.connect(("127.0.0.1", port), now=time.time())
    return [data for data, _ in client.datagrams_to_send(now=time.time())]


def pending_count(host: Any) -> int:
    """Handshakes the host's QUIC listener holds, not yet connections."""
    total = 0
    for transport in host.get_network().transport_manager.get_transports():
        for listener in getattr(transport, "_listeners", []):
            total += len(getattr(listener, "_pending_cid_by_quic_id", {}))
    return total


async def flood(count: int) -> dict[str, Any]:
    """``count`` Initial packets, each from a new source port and never followed up: what
    the listener holds, and whether an honest peer still connects. Each Initial waits for
    the listener's answer (at most 1 s) before the next goes, so none is lost in a socket
    buffer on a busy machine: what is held is what the listener chose to keep."""
    victim = quic_host()
    honest = quic_host()
    async with running(victim, honest):
        port = udp_port(victim)
        packets = [initial_datagrams(port) for _ in range(count)]  # the attacker's work
        rss_before = rss_mb()
        started = time.monotonic()
        cpu_before = time.process_time()
        answered = 0
        sockets = []
        for datagrams in packets:
            sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sockets.append(sock)
            for datagram in datagrams:
                await sock.sendto(datagram, ("127.0.0.1", port))
            with trio.move_on_after(1.0):
                await sock.recv(2048)
                answered += 1
        cpu_s = time.process_time() - cpu_before
        send_s = time.monotonic() - started
        pending = pending_count(victim)
        rss_growth = rss_mb() - rss_before
        for sock in sockets:
            sock.close()
        try:
            honest_s: float | None = round(await connect(honest, victim), 3)
        except (Exception, trio.TooSlowError):
            honest_s = None
    return {
        "probe": "flood",
        "initials": count,
        "send_s": round(send_s, 2),
        "answered": answered,
        "victim_cpu_ms_per_initial": round(cpu_s * 1000 / count, 2),
        "pending_handshakes_held": pending,
        "rss_growth_mb": round(rss_growth, 1),
        "honest_connect_s": honest_s,
    }


async def stall(wait_s: float = 40.0) -> dict[str, Any]:
    """One Initial and then nothing: how long the listener keeps the half-open handshake."""
    victim = quic_host()
    async with running(victim):
        port = udp_port(victim)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for datagram in initial_datagrams(port):
            sock.sendto(datagram, ("127.0.0.1", port))
        started = time.monotonic()
        held_s = None
        await trio.sleep(0.2)
        held_at_start = pending_count(victim)
        while time.monotonic() - started < wait_s:
            if pending_count(victim) == 0:
                held_s = round(time.monotonic() - started, 1)
                break
            await trio.sleep(0.5)
        sock.close()
    return {"probe": "stall", "held_at_start": held_at_start, "dropped_after_s": held_s}


async def dial_source_port() -> dict[str, Any]:
    """The UDP port an outbound QUIC connection leaves from, as the far end sees it, against
    the dialer's listen port. Hole punching needs them equal: the peer was told, and the NAT
    mapped, the listen port."""
    seen: list[int] = []

    async def note(stream: Any) -> None:
        conn: Any = stream.muxed_conn  # a QUICConnection: (ip, port)
        remote = conn.get_remote_address()
        seen.append(int(remote[1]))
        await echo(stream)

    listener = quic_host({ECHO: note})
    dialer = quic_host()
    async with running(listener, dialer):
        await connect(dialer, listener)
        stream = await dialer.new_stream(listener.get_id(), [ECHO])
        await stream.write(b"which port?")
        await stream.read(65536)
        return {"probe": "source", "listen_port": udp_port(dialer), "dial_port": seen[0]}


async def mismatched_id() -> dict[str, Any]:
    """A dial for peer X at an address that ends in /p2p/B (B listening there): refused,
    or connected to B? And which peer answers ``new_stream(X)``?"""
    listener = quic_host({ECHO: echo})
    dialer = quic_host()
    stranger = ID.from_pubkey(create_new_key_pair().public_key)
    result: dict[str, Any] = {"probe": "mismatch"}
    async with running(listener, dialer):
        try:
            with trio.fail_after(10):
                await dialer.connect(PeerInfo(stranger, listener.get_addrs()))
            result["connect"] = "connected"
        except (Exception, trio.TooSlowError) as exc:
            result["connect"] = type(exc).__name__
        try:
            with trio.fail_after(10):
                stream = await dialer.new_stream(stranger, [ECHO])
                await stream.write(b"who?")
                await stream.read(65536)
            result["stream_reached"] = (
                "the listener" if stream.muxed_conn.peer_id == listener.get_id() else "?"
            )
        except (Exception, trio.TooSlowError) as exc:
            result["stream_reached"] = type(exc).__name__
    return result


def seeded_key_pair(seed: str) -> Any:
    return create_new_key_pair(hashlib.sha256(seed.encode()).digest())


def ready_then_go(delay_s: float) -> None:
    """Say this side is up (listening, imports done), wait for the test's "go" line on
    stdin, then ``delay_s`` more: both sides start together, or in the order given."""
    emit(event="ready")
    sys.stdin.readline()
    time.sleep(delay_s)


async def punch(me: str, peer: str, peer_ip: str, port: int, delay_s: float) -> dict[str, Any]:
    """One side of a simultaneous QUIC dial through two NATs (run in a lab namespace): both
    listen on ``port``, wait for the go (``ready_then_go``), then dial the other's
    router at ``port`` three times, 3 s each, while accepting whatever comes in."""
    host = new_host(
        key_pair=seeded_key_pair(me),
        listen_addrs=[multiaddr.Multiaddr(f"/ip4/0.0.0.0/udp/{port}/quic-v1")],
        enable_mDNS=False,
    )
    # The peer's id follows from its seed: nothing to exchange.
    peer_id = ID.from_pubkey(seeded_key_pair(peer).public_key)
    target = multiaddr.Multiaddr(f"/ip4/{peer_ip}/udp/{port}/quic-v1")
    outcome: dict[str, Any] = {"probe": "punch", "me": me, "dials": []}
    async with host.run([multiaddr.Multiaddr(f"/ip4/0.0.0.0/udp/{port}/quic-v1")]):
        await trio.to_thread.run_sync(ready_then_go, delay_s)
        for _ in range(3):
            if host.get_network().get_connections(peer_id):
                break
            try:
                with trio.fail_after(3):
                    await host.connect(PeerInfo(peer_id, [target]))
                outcome["dials"].append("connected")
            except (Exception, trio.TooSlowError) as exc:
                outcome["dials"].append(type(exc).__name__)
        await trio.sleep(1.0)  # the other side's last dial
        conns: list[Any] = host.get_network().get_connections(peer_id)
        outcome["connected"] = bool(conns)
        outcome["remote"] = [list(c.muxed_conn.get_remote_address() or ()) for c in conns]
    return outcome


def udp_punch(peer_ip: str, port: int, delay_s: float, relay_ip: str) -> dict[str, Any]:
    """The control for ``punch``: the same two hosts, plain UDP from the listen port itself
    (what a QUIC stack that dials from its listen socket sends): first to a public host (as
    to a bootstrap peer: the NAT maps the port), then, from the go, to the peer every
    0.5 s until one of the peer's datagrams comes in. Says from where."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", port))
    sock.settimeout(0.5)
    sock.sendto(b"hello", (relay_ip, 9))  # the listen port's first contact: a bootstrap
    ready_then_go(delay_s)
    heard = None
    for _ in range(20):  # 10 s: the other side may start a little late
        sock.sendto(b"punch", (peer_ip, port))
        try:
            _, source = sock.recvfrom(2048)
        except TimeoutError:
            continue
        heard = [source[0], source[1]]
        for _ in range(3):  # so the other side hears us too, if it has not yet
            sock.sendto(b"punch", (peer_ip, port))
            time.sleep(0.2)
        break
    sock.close()
    return {"probe": "udp_punch", "heard_from": heard}


def main(argv: list[str]) -> None:
    what = argv[1] if len(argv) > 1 else "basic"
    if what == "punch":  # punch ME PEER PEER_ROUTER_IP PORT DELAY_S
        me, peer, peer_ip, port, delay_s = argv[2:7]
        emit(**trio.run(punch, me, peer, peer_ip, int(port), float(delay_s)))
        return
    if what == "udp":  # udp PEER_IP PORT DELAY_S RELAY_IP
        emit(**udp_punch(argv[2], int(argv[3]), float(argv[4]), argv[5]))
        return
    arg = argv[2] if len(argv) > 2 else ""
    probes: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
        "basic": lambda: basic(int(arg or 10) * MIB),
        "streams": lambda: many_streams(int(arg or 300)),
        "noread": lambda: never_reads(int(arg or 16)),
        "oversized": lambda: oversized(),
        "source": dial_source_port,
        "mismatch": mismatched_id,
        "fill": lambda: fill(int(arg or 100)),
        "flood": lambda: flood(int(arg or 500)),
        "stall": lambda: stall(float(arg or 40)),
    }
    emit(**trio.run(probes[what]))


if __name__ == "__main__":
    main(sys.argv)
