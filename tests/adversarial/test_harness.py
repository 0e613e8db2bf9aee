"""The hostile peer itself: it reaches a real daemon, is seen as a provider, and what it
sends is what the test wrote (so the attacks in this suite really reach the victim)."""

from __future__ import annotations

from collections.abc import Callable

from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, open_job, seal_job
from tests.daemon_harness import Daemon, wait_for


def test_a_hostile_provider_is_listed_and_its_raw_job_messages_are_answered(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    victim = daemons("victim", 11)
    addr = victim.addrs()[0]
    peer = hostile(seed=b"\x42" * 32, bootstrap=[addr], provider=True)
    peer.wait_connected(victim.peer_id)

    def listed() -> bool:
        peers = victim.cli("peer", "list")["peers"]
        return any(p["peer_id"] == peer.peer_id for p in peers)

    wait_for(listed, "the victim never listed the hostile provider")
    # A follow for a job that does not exist: an honest Refusal comes back, signed by the
    # victim, in answer to a message our own encoder could have produced.
    frames = peer.request(
        victim.peer_id,
        JOB_PROTOCOL,
        [seal_job(peer.identity, {"t": "follow", "v": 1, "job_id": "0123456789ab"})],
    )
    assert [open_job(f)["t"] for f in frames] == ["refusal"]
