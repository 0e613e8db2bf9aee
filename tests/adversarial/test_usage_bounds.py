"""A hostile provider floods a real consumer daemon's job with live samples (issue 22 §3):
more than an Update may carry, figures out of bounds, samples from far in the future. Each
bad Update is refused whole at the boundary (the follow reconnects), a future sample is
dropped, and the consumer keeps the honest samples only, its job still running, and still
serves an honest peer."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from engine import api
from engine.domain.spec import FRAMEWORKS
from engine.jobs import live_usage
from engine.jobs import protocol as p
from tests.adversarial.hostile import (
    HostilePeer,
    provider_advert,
    read_job_message,
    send_job_message,
)
from tests.daemon_harness import Daemon, wait_for

T0 = time.time()
HONEST = (
    {"at": T0 - 20, "cpu_cores": 1.0, "ram_mb": 500, "ram_limit_mb": 4096},
    {"at": T0 - 10, "cpu_cores": 1.5, "ram_mb": 600, "ram_limit_mb": 4096},
    {"at": T0 - 5, "cpu_cores": 2.0, "ram_mb": 700, "ram_limit_mb": 4096},
)
FUTURE = {"at": T0 + 100 * live_usage.SKEW_S, "cpu_cores": 99.0, "ram_mb": 1}


def _update(job_id: str, usage: list[dict[str, Any]]) -> dict[str, Any]:
    return {"t": "update", "v": 1, "job_id": job_id, "state": "running",
            "started_at": T0 - 30, "usage": usage}  # fmt: skip


class FloodingProvider:
    """Quotes, accepts; each Follow gets one of its attacks, the last one stays open."""

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
            if attack == 1:  # one honest sample, then more samples than an Update may carry
                await send_job_message(stream, me, _update(job_id, [HONEST[0]]))
                flood = [{"at": T0 - 1000 + i / 10} for i in range(20 * p.MAX_USAGE_SAMPLES)]
                await send_job_message(stream, me, _update(job_id, flood))
            elif attack == 2:  # figures out of bounds
                bad = [{"at": T0 - 8, "cpu_cores": -1.0}, {"at": T0 - 7, "gpu_percent": 1e6}]
                await send_job_message(stream, me, _update(job_id, bad))
            elif attack == 3:  # an honest one with one from the future: that one goes
                await send_job_message(stream, me, _update(job_id, [HONEST[1], FUTURE]))
                await send_job_message(stream, me, _update(job_id, [HONEST[2]]))
                await trio.sleep(60)  # a running job: the follow stays open
            else:
                await trio.sleep(60)
        await stream.close()


def test_a_provider_s_samples_are_bounded_and_checked(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    consumer = daemons("consumer", 83)
    peer = hostile(seed=b"\x83" * 32, bootstrap=[consumer.addrs()[0]])
    peer.set_advert(msgspec.structs.replace(provider_advert(peer), frameworks=FRAMEWORKS))
    attacker = FloodingProvider(peer)
    peer.wait_connected(consumer.peer_id)
    wait_for(
        lambda: peer.listed_with_free_memory(consumer),
        "the consumer never listed the hostile provider with free memory",
        30,
    )
    job = consumer.cli(
        "job", "submit", "--url", "https://example.org/x.py", "--framework", "scikit-learn",
        "--expected-minutes", "1", "--name", "victim", "--peer", peer.peer_id,
    )  # fmt: skip
    job_id = job["job_id"]

    def kept() -> list[float]:
        reply: api.JobUsage = consumer.call(api.GetJobUsage(job_id=job_id))
        return [s.at for s in reply.samples]

    wait_for(lambda: len(kept()) == 3, f"the honest samples never all arrived: {kept()}", 60)
    assert attacker.follows >= 3
    assert kept() == [s["at"] for s in HONEST]  # no flood, no bad figure, nothing from ahead
    shown = consumer.cli("job", "show", job_id)
    assert shown["state"] == "running"
    assert shown["usage"]["at"] == HONEST[2]["at"] and shown["usage"]["cpu_cores"] == 2.0
    log = consumer.home.log_file.read_text(errors="replace")
    assert "bad job message" in log

    # The victim still serves: its peer list still answers and names the peer.
    assert any(x["peer_id"] == peer.peer_id for x in consumer.cli("peer", "list")["peers"])
    assert consumer.cli("peer", "self")["peer_id"] == consumer.peer_id
