"""The network end to end: real daemons on 127.0.0.1 driven through the real CLI.

A consumer daemon is the bootstrap peer; providers join it, onboard, advertise and beat.
Everything a user would do is done with `nunet-tui --home H ...` commands.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.conftest import TEST_ADDRESS, run_cli
from tests.daemon_harness import Daemon, daemons, wait_for

__all__ = ["daemons"]  # the fixture, used by name


def _onboard(daemon: Daemon, memory: int, channel: str = "nunet-test") -> None:
    daemon.cli("onboard", "-m", str(memory), "-c", "4000", "-a", TEST_ADDRESS, "-n", channel)


def _peers(daemon: Daemon) -> dict[str, Any]:
    return {p["peer_id"]: p for p in daemon.cli("peer", "list")["peers"]}


def test_providers_are_listed_chat_flows_and_dead_nodes_leave(
    daemons: Callable[..., Daemon],
) -> None:
    consumer = daemons("consumer", 1)
    boot = consumer.addrs()[0]
    providers = [daemons(f"p{i}", 10 + i, bootstrap=boot) for i in range(3)]
    for i, provider in enumerate(providers):
        _onboard(provider, 5000 + i)
    ids = {p.peer_id: 5000 + i for i, p in enumerate(providers)}

    def all_listed() -> bool:
        peers = _peers(consumer)
        return all(
            pid in peers
            and peers[pid]["resources"]
            and peers[pid]["resources"]["memory_mb"] == memory
            and peers[pid]["resources"]["free_memory_mb"] is not None  # a heartbeat arrived
            for pid, memory in ids.items()
        )

    wait_for(all_listed, "the consumer never listed all providers with heartbeats")
    status = consumer.cli("network", "status")
    assert status["totals"]["providers"] == 3
    assert status["totals"]["memory_mb"] == sum(ids.values())

    # Chat both ways, with text that must stay literal.
    target, target_id = providers[0], providers[0].peer_id
    nasty = "[bold red]x[/] \x1b[2J"
    sent = consumer.cli("chat", "send", target_id, nasty)
    assert sent["status"] == "delivered"
    history = target.cli("chat", "history", consumer.peer_id)["messages"]
    assert [m["text"] for m in history] == [nasty]
    assert history[0]["from"] == consumer.peer_id
    assert target.cli("chat", "send", consumer.peer_id, "hello back")["status"] == "delivered"

    # Restart the provider: history survives; a message sent while it is down waits and lands.
    target.stop()
    queued = consumer.cli("chat", "send", target_id, "while you were away")
    assert queued["status"] == "queued"
    target.start()
    wait_for(
        lambda: len(target.cli("chat", "history", consumer.peer_id)["messages"]) == 3,
        "the queued message was not delivered after the restart",
        timeout=30,
    )
    texts = [m["text"] for m in target.cli("chat", "history", consumer.peer_id)["messages"]]
    assert texts == [nasty, "hello back", "while you were away"]
    mine = consumer.cli("chat", "history", target_id)["messages"]
    assert [(m["text"], m["status"]) for m in mine] == [
        (nasty, "delivered"),
        ("hello back", "received"),
        ("while you were away", "delivered"),
    ]

    # kill -9: the others drop it within three heartbeats (plus scheduling slack).
    victim = providers[1]
    victim_id = victim.peer_id
    victim.stop(kill=True)
    wait_for(lambda: victim_id not in _peers(consumer), "a killed provider stayed listed", 8)


def test_chat_requests_and_channels_do_not_mix(daemons: Callable[..., Daemon]) -> None:
    consumer = daemons("consumer", 2)
    boot = consumer.addrs()[0]
    same = daemons("same", 20, bootstrap=boot)
    other = daemons("other", 21, bootstrap=boot, channel="nunet-team")
    _onboard(same, 5000)
    _onboard(other, 5000, channel="nunet-team")
    same_id, other_id = same.peer_id, other.peer_id
    wait_for(lambda: same_id in _peers(consumer), "same-channel provider not listed")
    time.sleep(2)  # several heartbeats: the other channel's provider must still be absent
    assert other_id not in _peers(consumer)
    assert consumer.peer_id not in _peers(other)

    assert consumer.cli("chat", "start", same_id)["message"].startswith("chat request sent")
    requests = wait_for(
        lambda: same.cli("chat", "list")["requests"], "the chat request did not arrive"
    )
    assert requests[0]["peer_id"] == consumer.peer_id
    assert "joined" in same.cli("chat", "join", str(requests[0]["id"]))["message"]
    assert same.cli("chat", "list")["requests"] == []
    consumer.cli("chat", "start", same_id)
    wait_for(lambda: same.cli("chat", "list")["requests"], "second request did not arrive")
    assert "cleared 1" in same.cli("chat", "clear")["message"]


def test_chat_errors_are_clear(daemons: Callable[..., Daemon]) -> None:
    node = daemons("solo", 3)
    garbled = run_cli("chat", "send", "12D3KooW-not-a-peer", "hi", home=node.home)
    assert garbled.returncode == 1 and "not a libp2p peer id" in garbled.stderr
    itself = run_cli("chat", "send", node.peer_id, "hi", home=node.home)
    assert itself.returncode == 1 and "own peer id" in itself.stderr
    peer = "12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5"
    big = run_cli("chat", "send", peer, "x" * 5000, home=node.home)
    assert big.returncode == 1 and "4 KiB" in big.stderr
    refused = run_cli("chat", "send", peer, "hi", "--no-queue", home=node.home)
    assert refused.returncode == 1 and "not sent" in refused.stderr


def test_a_providers_display_name_reaches_the_consumer_with_its_id(
    daemons: Callable[..., Daemon],
) -> None:
    consumer = daemons("consumer", 4)
    named = '[provider]\ndisplay_name = "Ana\'s rig"\n'
    provider = daemons("named", 41, bootstrap=consumer.addrs()[0], extra_toml=named)
    _onboard(provider, 5000)
    pid = provider.peer_id

    def seen() -> Any:
        peer = _peers(consumer).get(pid)
        return peer if peer and peer["resources"] else None

    assert wait_for(seen, "the consumer never listed the named provider")["display_name"] == (
        "Ana's rig"
    )
    # The text listing shows the name with the whole id (what `chat start` takes).
    listing = run_cli("peer", "list", home=consumer.home)
    assert listing.returncode == 0, listing.stderr
    assert f"  Ana's rig · {pid}  " in listing.stdout
