"""Gossip and DHT streams with a message trickled a byte at a time, or nothing at all
(issue 21 §1): the victim resets them at its deadlines, and keeps serving.

Before the fix one byte every 3 s kept a ``/meshsub`` stream (and ``/ipfs/kad``) open for
ever; only our own ``/nunet/*`` protocols had deadlines. Now a message, once begun, must be
whole within ``MESSAGE_S`` and a DHT stream's next request must begin within ``KAD_IDLE_S``
(engine/network/libp2p_guards.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from engine.network.libp2p_guards import KAD_IDLE_S, MESSAGE_S
from tests.adversarial.hostile import HostilePeer
from tests.daemon_harness import Daemon

MESHSUB = "/meshsub/1.1.0"
KAD = "/ipfs/kad/1.0.0"
TRICKLE_S = 3.0
MARGIN_S = 10.0


def test_trickled_gossip_and_idle_dht_streams_are_cut_at_their_deadlines(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    victim = daemons("victim", 82)
    peer = hostile(seed=b"\x53" * 32, bootstrap=victim.addrs())
    peer.wait_connected(victim.peer_id)
    ended: dict[str, float] = {}

    def idle_dht() -> None:
        stream = peer.open(victim.peer_id, KAD)
        began = time.monotonic()
        if stream.read(timeout=KAD_IDLE_S + MARGIN_S) == b"":  # closed or reset by the victim
            ended["kad"] = time.monotonic() - began

    reader = threading.Thread(target=idle_dht, daemon=True)
    reader.start()
    gossip = peer.open(victim.peer_id, MESHSUB)
    began = time.monotonic()
    gossip.write(b"\x80\x08")  # a message of 1,024 bytes begins...
    while time.monotonic() - began < MESSAGE_S + MARGIN_S:
        time.sleep(TRICKLE_S)
        try:
            gossip.write(b"x")  # ...one byte at a time
        except Exception:  # reset by the victim
            ended["meshsub"] = time.monotonic() - began
            break
    reader.join(KAD_IDLE_S + MARGIN_S + 5)
    assert "meshsub" in ended, "the trickled gossip stream was never cut"
    assert ended["meshsub"] < MESSAGE_S + MARGIN_S
    assert "kad" in ended and ended["kad"] < KAD_IDLE_S + MARGIN_S, ended
    # The victim still answers.
    assert victim.cli("network", "status")["online"]
