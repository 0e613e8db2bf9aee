"""Sybil adverts (issue 21): a hostile peer relays, over its one gossipsub connection, the signed
adverts of 600 fresh identities, each a cheaper "provider" than the real one and each naming
one address and port of the attacker's choosing (a listening socket this test owns and counts
accepts on). The consumer's and the provider's peer tables stay within their bounds (the
/24's quota of unverified peers), the named address gets not one connection (nobody saw the
fakes there: engine/network/confirmed.py), the rows of the evicted fakes leave the database,
and the honest consumer still finds the real provider at once and runs a job on it.

Before the fix (measured on the issue's 1,000 identities): 858 rows added for good to the
peers table of each node that heard them, 326 fakes listed at once, the honest matcher found
no provider, and the nodes made 2,801 TCP connections to the named address. After it (600
identities, 2 busy cores): the consumer lists at most 32 of them (the quota), the address got
no connection (with the dial budget alone it still got 12-32: one budgeted dial per node and
minute, each retried by py-libp2p), the consumer's peers table holds the listed peers only,
its RSS grew by a few MB, and the job ran.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nacl.signing import SigningKey

from engine.domain import wire
from engine.identity import Identity
from engine.network.peers import SUBNET_QUOTA
from tests.adversarial.hostile import HostilePeer, provider_advert
from tests.adversarial.test_stream_exhaustion import rss_mb
from tests.daemon_harness import Daemon, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, _submit, scripts

__all__ = ["scripts"]

FAKES = 600
# Another /24 than the daemons' 127.0.0.1: the fakes' quota group is not the real provider's.
TRAP_HOST = "127.0.1.3"
RSS_GROWTH_LIMIT_MB = 40.0


class Trap:
    """A listening socket that counts the connections made to it and closes each at once."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((TRAP_HOST, 0))
        self.sock.listen(128)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepts += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


def _fake_messages(
    peer: HostilePeer, port: int, count: int, channel: str = "nunet-test"
) -> list[Any]:
    """Pubsub messages, each from (and signed by) its own fresh identity, whose advert names
    the trap's address: what gossipsub would forward for a thousand real peers."""
    from libp2p.pubsub.pb import rpc_pb2
    from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX

    from engine.network.discovery import topic_name
    from engine.network.host import key_pair_of

    topic = topic_name(channel, "adverts")
    now = time.time()
    made = []
    for _ in range(count):
        fake = Identity(SigningKey.generate())
        keys = key_pair_of(fake)
        advert = msgspec.structs.replace(
            provider_advert(
                peer, channel=channel, prices={"low": 0.01, "moderate": 0.02, "high": 0.03}
            ),
            peer_id=fake.peer_id,
            addrs=(f"/ip4/{TRAP_HOST}/tcp/{port}/p2p/{fake.peer_id}",),
            seq=int(now * 1000),
            at=now,
            expires_at=now + 3600,
        )
        msg = rpc_pb2.Message(
            data=wire.seal(fake, "advert", advert),
            topicIDs=[topic],
            from_id=_peer_bytes(fake.peer_id),
            seqno=os.urandom(8),
        )
        msg.signature = keys.private_key.sign(
            PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString()
        )
        msg.key = keys.public_key.serialize()
        made.append(msg)
    return made


def _peer_bytes(peer_id: str) -> bytes:
    from engine.network.host import peer_id_of

    return bytes(peer_id_of(peer_id).to_bytes())


async def _relay(peer: HostilePeer, messages: list[Any]) -> None:
    """Push each through the hostile node's own pubsub: it forwards them to the victims."""
    import trio

    pubsub = peer.service.pubsub
    me = peer.host.get_id()
    for msg in messages:
        await pubsub.push_msg(me, msg)
        await trio.sleep(0)


def _peer_rows(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        return int(conn.execute("SELECT count(*) FROM peers").fetchone()[0])


def _listed(daemon: Daemon) -> list[dict[str, Any]]:
    return list(daemon.cli("peer", "list")["peers"])


@pytest.mark.timeout(120)
def test_sybil_adverts_stay_bounded_undialled_and_the_real_provider_wins(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer], scripts: str
) -> None:
    provider, consumer = _pair(daemons)
    peer = hostile(seed=b"\x21" * 32, bootstrap=[consumer.addrs()[0]])
    peer.wait_connected(consumer.peer_id)
    assert consumer.proc is not None
    rss_before = rss_mb(consumer.proc.pid)
    rows_before = _peer_rows(consumer.home.database)
    trap = Trap()
    try:
        messages = _fake_messages(peer, trap.port, FAKES)
        began = time.monotonic()
        peer.call(_relay, peer, messages)
        relay_s = time.monotonic() - began
        # The adverts reached the consumer: some fakes are listed (the quota's worth).
        wait_for(lambda: len(_listed(consumer)) > 2, "no relayed advert reached the consumer")
        time.sleep(2.0)  # the tail of the flood and the dials it may trigger
        listed = _listed(consumer)
        fakes = [p for p in listed if p["peer_id"] not in {provider.peer_id, peer.peer_id}]
        print(
            f"\nsybil adverts: {FAKES} relayed in {relay_s:.1f} s; consumer lists "
            f"{len(fakes)} fakes, trap accepts {trap.accepts}"
        )
        assert len(fakes) <= SUBNET_QUOTA
        assert all(not p.get("verified") for p in fakes)
        # Not one dial: nobody ever saw the fakes at the trap's address (confirmed.py).
        assert trap.accepts == 0, trap.accepts
        # The real provider stays listed and verified, and wins the match at once.
        real = [p for p in listed if p["peer_id"] == provider.peer_id]
        assert real and real[0].get("verified"), real
        asked = time.monotonic()
        job = _submit(consumer, f"{scripts}/iris.py", name="honest")
        assert job["state"] == "accepted" and job["provider"] == provider.peer_id, job
        assert time.monotonic() - asked < 10.0
        wait_for(lambda: _state(consumer, job["job_id"]) == "completed", "honest job failed", 60)
        # The provider heard them too (gossip reaches it through the consumer): bounded.
        assert len(_listed(provider)) <= SUBNET_QUOTA + 3
        # Bounded stores: the evicted fakes' rows went with them.
        rows_after = _peer_rows(consumer.home.database)
        assert rows_after - rows_before <= SUBNET_QUOTA + 3, (rows_before, rows_after)
        growth = rss_mb(consumer.proc.pid) - rss_before
        print(f"peers rows {rows_before} -> {rows_after}; consumer RSS +{growth:.1f} MB")
        assert growth < RSS_GROWTH_LIMIT_MB
        assert trap.accepts == 0, trap.accepts
    finally:
        trap.close()
