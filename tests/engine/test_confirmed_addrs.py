"""Only confirmed addresses are dialled (engine/network/confirmed.py): a peer's advertised
address counts once the peer was seen at its IP, by us or by one of our bootstrap peers; and
a newcomer that has seen nobody still reaches a provider it never met, through its bootstrap,
within seconds."""

from __future__ import annotations

import time

import trio
from nacl.signing import SigningKey

from engine.domain import wire
from engine.identity import Identity
from engine.network.confirmed import ConfirmedAddrs
from tests.engine.test_network_service import Hooks, service, wait_until

PEER = Identity(SigningKey.generate()).peer_id


def addr(host: str, port: int = 4001) -> str:
    return f"/ip4/{host}/tcp/{port}/p2p/{PEER}"


def test_an_address_counts_once_the_peer_was_seen_at_its_ip() -> None:
    confirmed = ConfirmedAddrs()
    claimed = (addr("203.0.113.9"), addr("198.51.100.7", 9000))
    assert confirmed.confirmed(PEER, claimed) == []  # an advert alone: nothing to dial
    confirmed.observe(PEER, "/ip4/198.51.100.7/tcp/51234")  # it connected from there
    assert [str(a) for a in confirmed.confirmed(PEER, claimed)] == ["/ip4/198.51.100.7/tcp/9000"]
    # Listening on every interface: its port, at the IPs we saw it at (0.0.0.0 itself on
    # this machine).
    assert [str(a) for a in confirmed.confirmed(PEER, (addr("0.0.0.0"),))] == [
        "/ip4/198.51.100.7/tcp/4001"
    ]
    confirmed.observe(PEER, "/ip4/127.0.0.1/tcp/40000")
    assert [str(a) for a in confirmed.confirmed(PEER, (addr("0.0.0.0"),))] == [
        "/ip4/0.0.0.0/tcp/4001",
        "/ip4/198.51.100.7/tcp/4001",
    ]


def test_a_bootstraps_confirmation_is_dialled_and_bounded() -> None:
    confirmed = ConfirmedAddrs(max_peers=2)
    confirmed.vouch(PEER, [addr("192.0.2.1"), addr("192.0.2.2"), addr("192.0.2.3"), "junk"])
    assert [str(a) for a in confirmed.confirmed(PEER, ())] == [
        "/ip4/192.0.2.1/tcp/4001",
        "/ip4/192.0.2.2/tcp/4001",
    ]
    # Another peer's address is no confirmation of this one's.
    other = Identity(SigningKey.generate()).peer_id
    confirmed.vouch(other, [addr("192.0.2.9")])
    assert confirmed.confirmed(other, ()) == []
    for n in range(3):
        confirmed.observe(f"peer{n}", f"/ip4/10.0.0.{n}/tcp/1")
    assert not confirmed.seen("peer0") and confirmed.seen("peer2")


def test_a_newcomer_reaches_a_provider_it_never_met_through_its_bootstrap() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            bootstrap = service()
            await nursery.start(bootstrap.run)
            provider = service(bootstrap.listen_addrs())
            await nursery.start(provider.run)
            await wait_until(lambda: provider.identity.peer_id in bootstrap.connected_peers())
            # A consumer: it advertises nothing, so only it can make the connection.
            newcomer = service(bootstrap.listen_addrs())
            newcomer.callbacks = Consumer()
            began = time.monotonic()
            await nursery.start(newcomer.run)
            pid = provider.identity.peer_id
            # Listed, then dialled at the address the bootstrap confirmed, and verified.
            await wait_until(lambda: pid in newcomer.connected_peers(), 15)
            await wait_until(lambda: (newcomer.peer(pid) or _unverified()).verified, 5)
            print(f"\nnewcomer connected to the provider in {time.monotonic() - began:.1f} s")
            assert newcomer.discovery is not None and newcomer.discovery.confirmed.seen(pid)
            assert bootstrap.discovery is not None and bootstrap.discovery.confirm.confirmed_for
            nursery.cancel_scope.cancel()

    trio.run(main)


class Consumer(Hooks):
    def advert(self) -> wire.Advert | None:
        return None


def _unverified() -> object:
    class Unverified:
        verified = False

    return Unverified()
