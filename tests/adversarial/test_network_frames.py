"""One bad message never stops a service: malformed gossipsub frames and addressless adverts
against real daemons.

Before the fix a 6-byte frame on ``/meshsub/1.1.0`` escaped py-libp2p's pubsub reader and
restarted the victim's network (on a new port with tcp/0, so its peers lost it for good), and
a signed advert without an address crash-looped the network of every node that received it.
Each test attacks, then checks that the victim kept its network (same address, no restart in
its log, its honest peer still listed) and still chats with an honest daemon.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from typing import Any

import trio
from libp2p.pubsub.pb import rpc_pb2
from libp2p.records.validator import NamespacedValidator, Validator
from libp2p.utils import encode_varint_prefixed
from nacl.signing import SigningKey

from engine.domain import wire
from engine.identity import Identity
from engine.network import adverts
from engine.network.discovery import EXCHANGE_PROTOCOL, topic_name
from engine.network.link import NETWORK_RESTART
from tests.adversarial.hostile import HostilePeer
from tests.conftest import TEST_ADDRESS
from tests.daemon_harness import Daemon, wait_for

CHANNEL = "nunet-test"
MESHSUB = "/meshsub/1.1.0"


def _rpc(build: Callable[[Any], None]) -> bytes:
    rpc = rpc_pb2.RPC()
    build(rpc)
    return encode_varint_prefixed(rpc.SerializeToString())


def _garbage_publish(rpc: Any) -> None:
    msg = rpc.publish.add()
    msg.from_id = b"not a peer id"  # py-libp2p's push_msg task raised on this
    msg.data = os.urandom(64)
    msg.seqno = b"\x01"
    msg.topicIDs.append(topic_name(CHANNEL, "adverts"))
    msg.signature = os.urandom(64)
    msg.key = os.urandom(12)


def _garbage_control(rpc: Any) -> None:
    rpc.senderRecord = os.urandom(80)
    rpc.control.ihave.add(topicID="x" * 300, messageIDs=[os.urandom(9) for _ in range(50)])
    rpc.control.prune.add(topicID=topic_name(CHANNEL, "adverts"), backoff=2**63).peers.add(
        peerID=b"junk", signedPeerRecord=os.urandom(40)
    )


FRAMES: dict[str, bytes] = {
    "six bytes that are no RPC": b"\x05\x0a\x03\xff\xff\xff",
    "a huge varint length": b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f" + b"x" * 16,
    "a truncated protobuf": _rpc(lambda r: r.subscriptions.add(subscribe=True, topicid="t" * 64))[
        :24
    ],
    "random bytes": os.urandom(512),
    "a valid RPC with a garbage message": _rpc(_garbage_publish),
    "a valid RPC with garbage control": _rpc(_garbage_control),
}


def _log(daemon: Daemon) -> str:
    return daemon.home.log_file.read_text(encoding="utf-8", errors="replace")


def _restarts(daemon: Daemon) -> list[str]:
    return [line for line in _log(daemon).splitlines() if NETWORK_RESTART in line]


_IDS: dict[str, str] = {}


def _id(daemon: Daemon) -> str:
    """The daemon's peer id, asked once (each ``Daemon.peer_id`` is a CLI call)."""
    key = str(daemon.home.home)
    if key not in _IDS:
        _IDS[key] = daemon.peer_id
    return _IDS[key]


def _peer_ids(daemon: Daemon) -> set[str]:
    return {p["peer_id"] for p in daemon.cli("peer", "list")["peers"]}


def _honest_pair(daemons: Callable[..., Daemon]) -> tuple[Daemon, Daemon]:
    victim = daemons("victim", 21)
    friend = daemons("friend", 22, bootstrap=victim.addrs()[0])
    for daemon, memory in ((victim, 5000), (friend, 5001)):  # providers are what is listed
        daemon.cli("onboard", "-m", str(memory), "-c", "4000", "-a", TEST_ADDRESS, "-n", CHANNEL)
    wait_for(lambda: _id(friend) in _peer_ids(victim), "the victim never listed its friend")
    wait_for(lambda: _id(victim) in _peer_ids(friend), "the friend never listed the victim")
    return victim, friend


def _still_serves(victim: Daemon, friend: Daemon, addrs: list[str]) -> None:
    assert victim.addrs() == addrs, "the victim's listen address changed: its network restarted"
    assert not _restarts(victim) and not _restarts(friend)
    assert _id(friend) in _peer_ids(victim)
    # "delivered": acknowledged by the other side once stored there.
    assert victim.cli("chat", "send", _id(friend), "still here")["status"] == "delivered"
    assert friend.cli("chat", "send", _id(victim), "me too")["status"] == "delivered"


def _stderr_of_libraries(daemon: Daemon) -> list[str]:
    """Lines on the daemon's stderr that are not our own log lines (py-libp2p's blocks)."""
    ours = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ \w+ +nunet[.:]")
    text = daemon.stderr_path.read_text(encoding="utf-8", errors="replace")
    return [line for line in text.splitlines() if line.strip() and not ours.match(line)]


def test_malformed_gossipsub_frames_do_not_restart_the_victims_network(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    victim, friend = _honest_pair(daemons)
    addrs = victim.addrs()
    peer = hostile(seed=b"\x51" * 32, bootstrap=[addrs[0]])
    peer.wait_connected(_id(victim))
    for frame in FRAMES.values():
        stream = peer.open(_id(victim), MESHSUB)
        stream.write(frame)
        # The victim answers a frame it cannot read by resetting the stream (or waits for
        # the rest of a frame that never comes): either way nothing else happens.
        with contextlib.suppress(trio.TooSlowError):
            stream.read(1, timeout=1.0)
        stream.reset()
    status = victim.cli("network", "status")
    contained = status["contained_failures"]
    # The frames reached the victim's pubsub reader and were contained there.
    assert contained.get("pubsub reader", 0) >= 1, contained
    assert contained.get("pubsub message", 0) >= 1, contained
    assert "network" not in contained
    # The hostile peer leaves: py-libp2p's complaints about it go to the log file, not stderr.
    peer.call(peer.host.close)  # its connections close as when its process ends
    peer.stop()
    wait_for(
        lambda: f"peer {peer.peer_id} missed its heartbeats" in _log(victim),
        "the victim never noticed the hostile peer leave",
        timeout=30,
    )
    _still_serves(victim, friend, addrs)
    assert _stderr_of_libraries(victim) == []
    assert _stderr_of_libraries(friend) == []


class _AcceptAll(Validator):
    """The hostile peer's DHT stores and serves whatever it is given."""

    def validate(self, key: str, value: bytes) -> None:
        pass

    def select(self, key: str, values: list[bytes]) -> int:
        return 0


def _unusable_adverts(signer: Identity) -> list[bytes]:
    """Validly signed by ``signer``, but with nothing a node could dial."""
    sealed = []
    me = signer.peer_id
    for i, addrs in enumerate(
        (
            (),
            (
                f"/ip4/0.0.0.0/tcp/0/p2p/{me}",
                "garbage, not a multiaddr",
                f"/ip4/1.2.3.4/tcp/0/p2p/{me}",
            ),
        )
    ):
        advert = adverts.stamp(
            wire.Advert(peer_id="", channel="", cpu_mhz=8000, ram_mb=16000),
            peer_id=me,
            channel=CHANNEL,
            seq=int(time.time() * 1000) + i,
            addrs=addrs,
            ttl_s=3600,
        )
        sealed.append(wire.seal(signer, "advert", advert))
    return sealed


def test_an_advert_without_a_usable_address_is_ignored_and_restarts_nobody(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    victim, friend = _honest_pair(daemons)
    addrs, friend_addrs = victim.addrs(), friend.addrs()
    peer = hostile(seed=b"\x52" * 32)  # not connected yet: its handlers go in first
    bad = _unusable_adverts(peer.identity)
    # A peer that is never online: its advert, relayed by exchange, is what the victim used to
    # dial (no connection, no address: the raise that crash-looped every receiver's network).
    ghost = Identity(SigningKey(b"\x53" * 32))
    relayed = _unusable_adverts(ghost)
    topic = topic_name(CHANNEL, "adverts")

    async def serve_bad_exchange(stream: Any) -> None:
        await wire.read_frame(stream, wire.MAX_QUERY_BYTES)
        await stream.write(b"".join(wire.frame(s) for s in bad + relayed))
        await stream.close()

    async def without_own_checks() -> None:
        # The peer's own validators would refuse to send or store these: it is hostile.
        peer.service.pubsub.remove_topic_validator(topic)
        peer.service.dht.validator = NamespacedValidator({adverts.NAMESPACE: _AcceptAll()})

    peer.serve(str(EXCHANGE_PROTOCOL), serve_bad_exchange)
    peer.call(without_own_checks)
    peer.connect(addrs[0])
    peer.wait_connected(_id(victim))

    async def publish_and_store() -> None:
        for sealed in bad:
            await peer.service.pubsub.publish(topic, sealed)
        with trio.move_on_after(5):
            try:
                await peer.service.dht.put_value(adverts.advert_key(CHANNEL, peer.peer_id), bad[-1])
                await peer.service.dht.provide(adverts.provider_key(CHANNEL))
            except Exception:
                pass  # the victim's DHT refusing the record is the defence at work

    def ignored(via: str, who: str = peer.peer_id) -> bool:
        return f"advert of {who} ({via}) ignored" in _log(victim)

    def gossip_reached() -> bool:
        peer.call(publish_and_store)
        return ignored("gossip")

    # Gossip needs the mesh to form first: publish again until the victim has seen one.
    wait_for(gossip_reached, "the addressless advert never reached the victim by gossip")
    wait_for(lambda: ignored("exchange"), "the victim never pulled the addressless advert")
    assert ignored("exchange", ghost.peer_id), "the relayed advert never reached the victim"
    victim.cli("peer", "list", "--dht")  # the DHT path too
    listed = {p["peer_id"]: p for p in victim.cli("peer", "list")["peers"]}
    assert ghost.peer_id not in listed
    hostile_entry = listed.get(peer.peer_id)
    assert (
        hostile_entry is None
        or not hostile_entry["resources"]
        or (hostile_entry["resources"]["memory_mb"] != 16000)
    ), "the addressless advert was listed"
    peer.stop()  # the sender leaves: what it left in the DHT must not crash-loop anyone
    friend.cli("peer", "list", "--dht")
    victim.cli("peer", "list", "--dht")
    assert friend.addrs() == friend_addrs
    _still_serves(victim, friend, addrs)
