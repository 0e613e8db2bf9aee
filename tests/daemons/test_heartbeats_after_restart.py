"""A provider whose network restarts (onboarding onto another channel, or onto the public
listen address) keeps reaching its peers with heartbeats.

py-libp2p 0.8.1's pubsub kept a peer whose connection closed while another one to it was
open: when the provider came back before the old connection's end was handled, the bootstrap
kept the dead connection's pubsub stream, never sent its subscriptions on the new one, and
the provider never learnt that the bootstrap wanted its heartbeats. It dropped the provider
every few seconds ("missed its heartbeats") and listed it again on each advert
(engine/network/libp2p_guards.py ``GuardedPubsub.handle_dead_peer_queue``)."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.conftest import TEST_ADDRESS
from tests.daemon_harness import Daemon, daemons, wait_for


def _beat(victim: Daemon, peer_id: str) -> float | None:
    for peer in victim.cli("peer", "list")["peers"]:
        if peer["peer_id"] == peer_id and peer["last_heartbeat"] is not None:
            return float(peer["last_heartbeat"])
    return None


def test_heartbeats_keep_coming_after_the_providers_network_restarts(
    daemons: Callable[..., Daemon],
) -> None:
    boot = daemons("boot", 81)
    # Started on another channel: onboarding onto the bootstrap's restarts its network.
    provider = daemons("provider", 82, bootstrap=boot.addrs()[0], channel="elsewhere")
    provider.cli("onboard", "-m", "5000", "-c", "4000", "-a", TEST_ADDRESS, "-n", "nunet-test")
    first = wait_for(lambda: _beat(boot, provider.peer_id), "no heartbeat after the restart", 30)
    # Heartbeats every second: over 8 s the bootstrap must hear several more, and never
    # drop the provider in between.
    seen = {first}
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        beat = _beat(boot, provider.peer_id)
        assert beat is not None, "the bootstrap dropped the provider after its restart"
        seen.add(beat)
        time.sleep(0.5)
    assert len(seen) >= 4, f"only {len(seen)} heartbeats in 8 s after the restart"
    log = boot.home.log_dir / "engine.log"
    assert "missed its heartbeats" not in log.read_text(errors="replace")


__all__ = ["daemons"]
