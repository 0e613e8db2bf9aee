"""A paid gang (issue 25 §2): each rank is an ordinary paid job (its own quote, escrow lock,
Confirm, receipt and settlement), on real daemons with the local ledger and the oracle, the
real dockerd and the torch image. Both locks are on the chain before either rank starts; a
rank killed midway fails the gang, the consumer cancels the other, and each lock settles:
its provider paid its own machine time (the receipt's charge), the rest back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from engine import api
from tests.conftest import TEST_ADDRESS
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_payments_e2e import (
    PASSPHRASE,
    PRICES,
    Market,
    _address,
    _escrow,
    _subtasks,
    market,
)
from tests.docker.test_gang_docker import EXAMPLE, JOBS, _ended, _gang, _logs, _submit
from tests.docker_fixture import docker_host, sklearn_image, torch_image
from tests.http_files import serve_files
from tests.overlay_helpers import docker

__all__ = ["daemons", "docker_host", "market", "sklearn_image", "torch_image"]


def _paid_cluster(market: Market, docker_host: str) -> tuple[Daemon, list[Daemon]]:
    consumer = market.spawn("consumer", 91, extra_toml=market.toml(), env=PASSPHRASE)
    providers = [
        market.spawn(
            f"provider{i}",
            92 + i,
            bootstrap=consumer.addrs()[0],
            extra_toml=market.toml() + JOBS.replace("[ml_images]", PRICES + "[ml_images]"),
            env={**PASSPHRASE, "DOCKER_HOST": docker_host},
        )
        for i in range(2)
    ]
    for daemon, ada, ntx in ((consumer, 20, 5), (providers[0], 10, 0), (providers[1], 10, 0)):
        market.ledger.faucet(daemon.cli("wallet", "new")["address"], ada=ada, ntx=ntx)
    for provider in providers:
        provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    ids = {provider.peer_id for provider in providers}
    wait_for(
        lambda: ids <= {p["peer_id"] for p in consumer.cli("peer", "list")["peers"]},
        "the consumer never saw both providers",
        60,
    )
    return consumer, providers


@pytest.mark.timeout(900)
def test_a_paid_gang_locks_every_rank_first_and_settles_each_after_a_kill(
    market: Market, docker_host: str, torch_image: str, tmp_path: Path
) -> None:
    consumer, providers = _paid_cluster(market, docker_host)
    before = market.ntx(_address(consumer))
    with serve_files(tmp_path / "www", {"train.py": (EXAMPLE / "train.py").read_text()}) as base:
        job = _submit(consumer, tmp_path, base, STEPS="600", STEP_PAUSE_S="0.5")
        gang = _gang(consumer, job["job_id"])
        locks = [_escrow(consumer, slot["job_id"]) for slot in gang]
        # Both ranks locked on the chain when `job submit` returned (all before any starts).
        assert all(lock["state"] in ("locked", "receipt") for lock in locks), locks
        assert market.ntx(_address(consumer)) == before - sum(lock["amount"] for lock in locks)
        victim = gang[1]
        wait_for(lambda: "] step 3" in _logs(consumer, victim["job_id"]), "no training", 300)
        [container] = docker(
            docker_host, "ps", "-q", "--filter", f"label=nunet.job={victim['job_id']}.2.1"
        ).split()
        subprocess.run(
            ["docker", "kill", container],
            env={"DOCKER_HOST": docker_host, "PATH": "/usr/bin:/bin:/usr/local/bin"},
            check=True,
            capture_output=True,
        )
        wait_for(lambda: _ended(consumer, job["job_id"]), "the gang never ended", 300)
    gang = _gang(consumer, job["job_id"])
    assert gang[0]["state"] == "cancelled" and gang[1]["state"] in ("failed", "oom"), gang
    by_id = {provider.peer_id: provider for provider in providers}
    for slot in gang:
        provider = by_id[slot["provider"]]
        wait_for(
            lambda s=slot: (
                _escrow(consumer, s["job_id"]).get("state")  # type: ignore[misc]
                not in (None, *api.ESCROW_OPEN_STATES)
            ),
            f"rank {slot['rank']}'s lock never settled",
            180,
        )
        ours = _escrow(consumer, slot["job_id"])
        receipt = json.loads(provider.cli("job", "show", slot["job_id"])["receipt"])
        assert receipt["consumer_signature"] and receipt["provider_signature"]
        # Billed: prepare's replica and its rank's train replica; evaluate never started.
        assert [len(s.replicas) for s in _subtasks(receipt["subtasks"])] == [1, 1], receipt
        # Its provider paid its own machine time (prepare and the train replica ran), the
        # rest of its lock back: one split, both books agree with the receipt.
        assert 0 < receipt["charge"] < ours["amount"], (receipt, ours)
        assert (ours["paid_units"], ours["refunded_units"]) == (
            receipt["charge"],
            ours["amount"] - receipt["charge"],
        ), ours
