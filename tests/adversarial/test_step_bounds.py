"""A hostile provider lies about a job's steps (issue 25 §1) to a real consumer daemon: more
steps or replicas than an Update may carry, a reason too long, and steps the spec never asked
for (which would bill replicas nobody wanted). The over-bound Updates are refused whole at
decode (the follow reconnects), the foreign steps are dropped from an Update that is
otherwise applied, and the consumer keeps the honest steps only."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from engine.domain.spec import FRAMEWORKS
from engine.jobs import protocol as p
from tests.adversarial.hostile import (
    HostilePeer,
    provider_advert,
    read_job_message,
    send_job_message,
)
from tests.daemon_harness import Daemon, wait_for

T0 = time.time()
RUNNING = {"state": "running", "started_at": T0 - 5}
HONEST = [{"name": "first", "replicas": [RUNNING, {"state": "waiting"}]}]


def _update(job_id: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"t": "update", "v": 1, "job_id": job_id, "state": "running",
            "started_at": T0 - 5, "steps": steps}  # fmt: skip


class LyingProvider:
    """Quotes, accepts; each Follow gets one of its lies, the last one honest and open."""

    def __init__(self, peer: HostilePeer) -> None:
        self.peer = peer
        self.follows = 0
        peer.serve(p.JOB_PROTOCOL, self.handle)

    async def handle(self, stream: Any) -> None:
        message = await read_job_message(stream)
        if message is None:
            return
        job_id, kind, me = message["job_id"], message["t"], self.peer.identity
        if kind == "offer":
            quote = p.Quote(
                job_id=job_id,
                provider=self.peer.peer_id,
                price_ntx_hour=1.0,
                total_ntx=0.05,
                expires_at=time.time() + 60,
                executor="process",
            )
            await p.send(stream, me, quote)
        elif kind == "confirm":
            await p.send(stream, me, p.Accepted(job_id=job_id))
        elif kind == "follow":
            self.follows += 1
            attack = self.follows
            if attack == 1:  # more steps than any spec may have
                many = [{"name": f"s{i}", "replicas": [RUNNING]} for i in range(500)]
                await send_job_message(stream, me, _update(job_id, many))
            elif attack == 2:  # more replicas than a step may have, a huge reason
                wide = [{"name": "first", "replicas": [RUNNING] * 1000}]
                await send_job_message(stream, me, _update(job_id, wide))
                long = [{"name": "first", "replicas": [{**RUNNING, "reason": "x" * 100_000}]}]
                await send_job_message(stream, me, _update(job_id, long))
            elif attack == 3:  # within bounds, but not the spec's: 3 replicas of "first"
                foreign = [{"name": "first", "replicas": [RUNNING] * 3}]
                await send_job_message(stream, me, _update(job_id, foreign))
                await send_job_message(stream, me, _update(job_id, HONEST))
                await trio.sleep(60)  # a running job: the follow stays open
            else:
                await trio.sleep(60)
        await stream.close()


def test_a_provider_s_steps_are_bounded_and_must_be_the_spec_s(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    consumer = daemons("consumer", 84)
    peer = hostile(seed=b"\x84" * 32, bootstrap=[consumer.addrs()[0]])
    peer.set_advert(msgspec.structs.replace(provider_advert(peer), frameworks=FRAMEWORKS))
    attacker = LyingProvider(peer)
    peer.wait_connected(consumer.peer_id)
    wait_for(
        lambda: peer.listed_with_free_memory(consumer),
        "the consumer never listed the hostile provider with free memory",
        30,
    )
    job = consumer.cli(
        "job", "submit", "--url", "https://example.org/x.py", "--framework", "scikit-learn",
        "--expected-minutes", "1", "--peer", peer.peer_id, "--step", "first x 2",
    )  # fmt: skip
    job_id = job["job_id"]

    def steps() -> list[Any]:
        return list(consumer.cli("job", "show", job_id).get("steps") or [])

    wait_for(lambda: steps() != [], "the honest steps never arrived", 60)
    assert attacker.follows >= 3
    shown = steps()
    assert [s["name"] for s in shown] == ["first"]
    assert [r["state"] for r in shown[0]["replicas"]] == ["running", "waiting"]
    log = consumer.home.log_file.read_text(errors="replace")
    assert "bad job message" in log
    assert "the provider's steps are not the spec's: ignored" in log
    assert consumer.cli("peer", "self")["peer_id"] == consumer.peer_id  # still serving
