"""Dial-back requests (AutoNAT, engine/network/autonat.py) against a real daemon.

py-libp2p 0.8.1's AutoNAT server dials every address a request lists, with no rate limit,
no bound on concurrent requests and no timeout (docs/network-nat.md, "AutoNAT"). Ours dials
only the asker's own IP, at most MAX_ADDRS addresses, and a flood of requests from many
identities on one address is rate-limited per address, not only per identity: here a
request naming a third party's address never reaches it, and 24 fresh identities on one
address get a handful of dial-backs between them.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest
import trio
from nacl.signing import SigningKey

from engine.domain import wire
from engine.identity import Identity
from engine.network.autonat import (
    AUTONAT_PROTOCOL,
    MAX_BYTES,
    DialBackReply,
    DialBackRequest,
)
from engine.network.host import build_host, parse_peer_addr
from tests.adversarial.hostile import HostilePeer
from tests.daemon_harness import Daemon

FLOOD = 24


class Listener:
    """A plain TCP port that counts who connects (and hangs up on them)."""

    def __init__(self, ip: str) -> None:
        self.sock = socket.socket()
        self.sock.bind((ip, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Callable[[str], Listener]]:
    made: list[Listener] = []

    def make(ip: str) -> Listener:
        made.append(Listener(ip))
        return made[-1]

    yield make
    for one in made:
        one.close()


async def _ask(host: Any, daemon_id: Any, addrs: list[str]) -> DialBackReply | None:
    """One request; None when the daemon ended the stream without an answer."""
    with trio.fail_after(30):
        stream = await host.new_stream(daemon_id, [AUTONAT_PROTOCOL])
        try:
            request = msgspec.msgpack.encode(DialBackRequest(addrs=addrs))
            await wire.write_frame(stream, request, MAX_BYTES)
            await stream.close()
            data = await wire.read_frame(stream, MAX_BYTES)
        finally:
            await stream.reset()
    if data is None:
        return None
    return msgspec.msgpack.decode(data, type=DialBackReply)


def test_a_third_partys_address_is_never_dialled(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    listener: Callable[[str], Listener],
) -> None:
    victim = daemons("victim", 80)
    boot = victim.addrs()[0]
    peer = hostile(bootstrap=[boot])
    peer.wait_connected(victim.peer_id)
    third = listener("127.0.0.2")  # another host: the asker is 127.0.0.1
    own_port = int(peer.addrs[0].split("/tcp/")[1].split("/")[0])
    other = hostile()
    info = parse_peer_addr(boot)

    async def ask() -> DialBackReply | None:
        return await _ask(
            peer.host,
            info.peer_id,
            [
                f"/ip4/127.0.0.2/tcp/{third.port}",  # a third party
                f"/ip4/127.0.0.1/tcp/{third.port}/p2p/{other.peer_id}",  # another peer's
                f"/dns4/localhost/tcp/{third.port}",  # a name: whose address is it?
                f"/ip4/0.0.0.0/tcp/{own_port}",  # its own: dialled
            ],
        )

    reply = peer.call(ask)
    assert reply is not None and reply.refused == ""
    by_addr = {r.addr: r for r in reply.results}
    assert not by_addr[f"/ip4/127.0.0.2/tcp/{third.port}"].reached
    assert "refused" in by_addr[f"/ip4/127.0.0.2/tcp/{third.port}"].detail
    assert [r.reached for r in reply.results[:3]] == [False, False, False]
    # Its own address, at the IP the daemon saw it come from, proved by Noise.
    assert by_addr[f"/ip4/127.0.0.1/tcp/{own_port}"].reached, reply
    assert reply.observed.startswith("/ip4/127.0.0.1/tcp/")
    assert third.accepted == 0

    # More addresses than MAX_ADDRS: the request does not even decode.
    async def too_many() -> DialBackReply | None:
        return await _ask(peer.host, info.peer_id, [f"/ip4/0.0.0.0/tcp/{own_port}"] * 5)

    assert peer.call(too_many) is None
    assert third.accepted == 0


def test_a_flood_from_many_identities_on_one_address_is_bounded(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    listener: Callable[[str], Listener],
) -> None:
    victim = daemons("victim", 81)
    boot = victim.addrs()[0]
    peer = hostile(bootstrap=[boot])
    peer.wait_connected(victim.peer_id)
    target = listener("127.0.0.1")  # the asker's own IP: a legitimate address to ask for
    info = parse_peer_addr(boot)
    replies: list[DialBackReply] = []

    async def one() -> None:
        host = build_host(Identity(SigningKey.generate()), [])
        async with host.run(listen_addrs=[]):
            with trio.fail_after(30):
                await host.connect(info)
            addrs = [f"/ip4/127.0.0.1/tcp/{target.port}"]
            reply = await _ask(host, info.peer_id, addrs)
            assert reply is not None
            replies.append(reply)
            await host.close()

    async def flood() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(FLOOD):
                nursery.start_soon(one)

    peer.call(flood)
    assert len(replies) == FLOOD
    answered = [r for r in replies if not r.refused]
    refused = [r for r in replies if r.refused]
    # A burst of 4 per address, then one every 10 s: a few dial-backs, never 24.
    assert 1 <= len(answered) <= 6, [r.refused for r in replies]
    assert all("too many" in r.refused or "busy" in r.refused for r in refused)
    assert target.accepted <= 6
