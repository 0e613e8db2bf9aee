"""The network end to end: real daemons on 127.0.0.1 driven through the real CLI.

A consumer daemon is the bootstrap peer; providers join it, onboard, advertise and beat.
Everything a user would do is done with `nunet-tui --home H ...` commands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.config import Paths
from tests.conftest import REPO, TEST_ADDRESS, make_home, run_cli

HEARTBEAT_ENV = {"NUNET_NETWORK_HEARTBEAT_INTERVAL_S": "1"}


class Daemon:
    def __init__(self, home: Paths, env: dict[str, str]) -> None:
        self.home = home
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr_path = Path(str(home.home)) / "daemon.stderr"

    def start(self) -> Daemon:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nunet_tui", "--home", str(self.home.home), "daemon"],
            cwd=REPO,
            env={**os.environ, **self.env},
            stdout=subprocess.DEVNULL,
            stderr=open(self.stderr_path, "ab"),  # noqa: SIM115 - the child owns it
        )
        # Ready when the network listens: `peer self` then shows an address.
        wait_for(lambda: self.addrs(), f"{self.home.home} never listened", timeout=30)
        return self

    def cli(self, *args: str) -> Any:
        result = run_cli(*args, "--json", home=self.home)
        assert result.returncode == 0, (args, result.stderr)
        return json.loads(result.stdout)

    def addrs(self) -> list[str]:
        assert self.proc is not None and self.proc.poll() is None, (
            "daemon exited: " + self.stderr_path.read_text(errors="replace")[-2000:]
        )
        result = run_cli("--attach", "peer", "self", "--json", home=self.home)
        return json.loads(result.stdout)["addrs"] if result.returncode == 0 else []

    @property
    def peer_id(self) -> str:
        return str(self.cli("peer", "self")["peer_id"])

    def stop(self, kill: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            self.proc.wait(15)
        self.proc = None


def wait_for(check: Callable[[], Any], message: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(message)


@pytest.fixture
def network(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []

    def spawn(name: str, seed: int, bootstrap: str | None = None, channel: str = "") -> Daemon:
        home = make_home(tmp_path / name, seed=bytes([seed]) * 32)
        env = dict(HEARTBEAT_ENV)
        if bootstrap:
            env["NUNET_NETWORK_BOOTSTRAP"] = bootstrap
        if channel:
            env["NUNET_NETWORK_CHANNEL"] = channel
        daemon = Daemon(home, env).start()
        started.append(daemon)
        return daemon

    yield spawn
    for daemon in started:
        daemon.stop(kill=True)


def _onboard(daemon: Daemon, memory: int, channel: str = "nunet-test") -> None:
    daemon.cli("onboard", "-m", str(memory), "-c", "4000", "-a", TEST_ADDRESS, "-n", channel)


def _peers(daemon: Daemon) -> dict[str, Any]:
    return {p["peer_id"]: p for p in daemon.cli("peer", "list")["peers"]}


def test_providers_are_listed_chat_flows_and_dead_nodes_leave(
    network: Callable[..., Daemon],
) -> None:
    consumer = network("consumer", 1)
    boot = consumer.addrs()[0]
    providers = [network(f"p{i}", 10 + i, bootstrap=boot) for i in range(3)]
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


def test_chat_requests_and_channels_do_not_mix(network: Callable[..., Daemon]) -> None:
    consumer = network("consumer", 2)
    boot = consumer.addrs()[0]
    same = network("same", 20, bootstrap=boot)
    other = network("other", 21, bootstrap=boot, channel="nunet-team")
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


def test_chat_errors_are_clear(network: Callable[..., Daemon]) -> None:
    node = network("solo", 3)
    garbled = run_cli("chat", "send", "12D3KooW-not-a-peer", "hi", home=node.home)
    assert garbled.returncode == 1 and "not a libp2p peer id" in garbled.stderr
    itself = run_cli("chat", "send", node.peer_id, "hi", home=node.home)
    assert itself.returncode == 1 and "own peer id" in itself.stderr
    peer = "12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5"
    big = run_cli("chat", "send", peer, "x" * 5000, home=node.home)
    assert big.returncode == 1 and "4 KiB" in big.stderr
    refused = run_cli("chat", "send", peer, "hi", "--no-queue", home=node.home)
    assert refused.returncode == 1 and "not sent" in refused.stderr
