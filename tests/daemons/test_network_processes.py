"""Real nodes in separate processes on 127.0.0.1: discovery, heartbeats, chat, kill -9,
channels. Each node is ``python -m engine.network.standalone`` (real libp2p, Noise, yamux)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.daemons.test_network_support import Node, start_nodes

HEARTBEAT = "0.5"


@pytest.fixture
def cluster() -> Iterator[list[Node]]:
    """A bootstrap node and four more started from it, all on one channel."""
    nodes: list[Node] = []
    try:
        boot = Node("--heartbeat", HEARTBEAT).ready()
        nodes.append(boot)
        nodes.extend(start_nodes(4, boot, "--heartbeat", HEARTBEAT))
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def test_five_nodes_from_one_bootstrap_see_each_others_adverts(cluster: list[Node]) -> None:
    everyone = {node.peer_id for node in cluster}
    for node in cluster:
        node.wait_peers(everyone - {node.peer_id}, timeout=15)
    peers = cluster[1].command("peers")["peers"]
    advert = next(p["advert"] for p in peers if p["peer_id"] == cluster[2].peer_id)
    assert advert["cpu_mhz"] == 2000
    assert advert["gpus"][0]["vram_mb"] == 8192
    assert advert["prices"] == {"basic": 0.5, "gpu": 2.0}
    assert advert["channel"] == "nunet-test"
    assert any(a.endswith("/p2p/" + cluster[2].peer_id) for a in advert["addrs"])


def test_heartbeats_arrive(cluster: list[Node]) -> None:
    target = cluster[3].peer_id
    first = cluster[0].wait_for(
        lambda e: e["event"] == "peer" and e["peer_id"] == target and e["heartbeat"]
    )
    peers = cluster[0].command("peers")["peers"]
    hb = next(p["heartbeat"] for p in peers if p["peer_id"] == target)
    assert hb["free_cpu_mhz"] == 2000 and hb["uptime_s"] > 0
    time.sleep(1.2)  # two more intervals: the seq must have moved on
    peers = cluster[0].command("peers")["peers"]
    later = next(p["heartbeat"] for p in peers if p["peer_id"] == target)
    assert later["seq"] > hb["seq"]
    assert first["present"]


def test_chat_round_trip_both_ways(cluster: list[Node]) -> None:
    a, b = cluster[1], cluster[2]
    a.wait_peers({b.peer_id})
    started = a.command("start", peer=b.peer_id)
    request = b.wait_for(lambda e: e["event"] == "chat_request")
    assert request["peer_id"] == a.peer_id
    assert request["conversation"] == started["conversation"]
    for text in ("one", "two", "[bold red]x[/] \x1b[2J"):
        assert a.command("send", peer=b.peer_id, text=text)["event"] == "sent"
    got = [
        b.wait_for(lambda e, t=t: e["event"] == "message" and e["text"] == t)
        for t in ("one", "two", "[bold red]x[/] \x1b[2J")
    ]
    assert [m["seq"] for m in got] == sorted(m["seq"] for m in got)
    assert all(m["peer_id"] == a.peer_id for m in got)
    reply = b.command("send", peer=a.peer_id, text="back")
    assert reply["event"] == "sent"
    assert a.wait_for(lambda e: e["event"] == "message")["text"] == "back"


def test_chat_errors_are_clear(cluster: list[Node]) -> None:
    a, b = cluster[1], cluster[2]
    a.wait_peers({b.peer_id})
    big = a.command("send", peer=b.peer_id, text="x" * 5000)
    assert big["event"] == "error" and big["kind"] == "MessageTooLarge"
    assert "4096" in big["message"]
    b.kill()
    gone = a.command("send", peer=b.peer_id, text="anyone?", timeout=20)
    assert gone["event"] == "error" and gone["kind"] == "PeerUnreachable"


def test_killed_node_is_dropped_within_three_heartbeats(cluster: list[Node]) -> None:
    everyone = {node.peer_id for node in cluster}
    observer, victim = cluster[0], cluster[4]
    observer.wait_peers(everyone - {observer.peer_id})
    victim.kill()
    killed_at = time.time()
    event = observer.wait_for(
        lambda e: e["event"] == "peer" and e["peer_id"] == victim.peer_id and not e["present"],
        timeout=10,
    )
    # 3 heartbeats of 0.5 s, checked every half interval, plus the last beat's age.
    assert event["t"] - killed_at < 3 * 0.5 + 0.5 + 0.5
    time.sleep(1.0)  # and it does not come back from the DHT's copy of its advert
    assert victim.peer_id not in observer.peer_ids()
    for node in cluster[1:4]:
        node.wait_peers(everyone - {node.peer_id, victim.peer_id}, exact=True, timeout=5)


def test_withdrawn_advert_leaves_the_list(cluster: list[Node]) -> None:
    everyone = {node.peer_id for node in cluster}
    observer, provider = cluster[1], cluster[3]
    observer.wait_peers(everyone - {observer.peer_id})
    provider.command("withdraw")
    observer.wait_for(
        lambda e: e["event"] == "peer" and e["peer_id"] == provider.peer_id and not e["present"],
        timeout=5,
    )


def test_other_channel_is_not_listed() -> None:
    nodes: list[Node] = []
    try:
        boot = Node("--heartbeat", HEARTBEAT).ready()
        nodes.append(boot)
        same = start_nodes(1, boot, "--heartbeat", HEARTBEAT)[0]
        other = start_nodes(1, boot, "--heartbeat", HEARTBEAT, "--channel", "other-channel")[0]
        nodes += [same, other]
        boot.wait_peers({same.peer_id})
        time.sleep(2.0)  # several heartbeats and advert rounds
        assert other.peer_id not in boot.peer_ids()
        assert other.peer_id not in same.peer_ids()
        assert other.peer_ids() == set()
    finally:
        for node in nodes:
            node.stop()
