"""Refund now (issue 22 §1), against the real local ledger and the reference oracle: a paid
job whose provider vanished has its lock asked back at once; the oracle answers "not yet"
with when it can decide (its liveness grace), which `reward refund` and `job show` say; once
the oracle can decide, `reward refund` takes the lock back at once."""

from __future__ import annotations

import time

import pytest

from oracle_client.oracle_server.rules import LIVENESS_GRACE_S
from tests.conftest import run_cli
from tests.daemon_harness import daemons, wait_for
from tests.daemons.test_jobs_e2e import scripts
from tests.daemons.test_payments_e2e import (
    PROCESS_JOBS_NO_CHECKPOINTS,
    Market,
    _address,
    _escrow,
    _paid_pair,
    _submit,
    market,
)

__all__ = ["daemons", "market", "scripts"]


@pytest.mark.timeout(180)
def test_a_vanished_providers_refund_says_when_then_comes_back_at_once(
    market: Market, scripts: str
) -> None:
    """Two daemons and a paid job: about 30 s on a busy machine (the provider's silence is
    1 s of grace after 3 missed heartbeats of 1 s)."""
    provider, consumer = _paid_pair(
        market,
        provider_jobs=PROCESS_JOBS_NO_CHECKPOINTS,
        consumer_env={
            "NUNET_JOBS_PROVIDER_GRACE_S": "1",
            # Only the refund asked here may settle it: the loop would ask at the oracle's
            # time by itself (escrow.py serve), and every settle interval.
            "NUNET_PAYMENTS_SETTLE_INTERVAL_S": "3600",
        },
    )
    before = market.ntx(_address(consumer))
    job_id = _submit(consumer, f"{scripts}/slow.py")["job_id"]
    wait_for(lambda: provider.cli("job", "show", job_id)["state"] == "running", "never ran", 60)
    # Its "still running" report reached the oracle: it will not take our word at once.
    wait_for(lambda: market.oracle.store.last_alive(job_id), "no liveness report", 30)
    provider.stop(kill=True)

    wait_for(
        lambda: _escrow(consumer, job_id).get("decidable_at", 0) > 0,
        "the consumer never asked the oracle for its refund",
        60,
    )
    escrow = _escrow(consumer, job_id)
    assert (escrow["state"], escrow["refund_alone"]) == ("receipt", "provider_vanished")
    assert consumer.cli("job", "show", job_id)["state"] == "interrupted"
    assert 0 < escrow["decidable_at"] - time.time() <= LIVENESS_GRACE_S

    early = run_cli("reward", "refund", job_id, home=consumer.home)
    assert early.returncode == 1, early.stdout
    line = early.stderr.strip()
    assert "\n" not in line
    assert f"job {job_id} is not refunded yet: its provider vanished mid-job; the oracle can " \
        "decide in about" in line  # fmt: skip
    assert f"only after {LIVENESS_GRACE_S:g} s of silence" in line
    assert "this node asks again then by itself" in line
    shown = run_cli("job", "show", job_id, home=consumer.home)
    assert "refund    its provider vanished mid-job; the oracle can decide in about" in shown.stdout
    assert market.ntx(_address(consumer)) < before  # still locked

    # The oracle's grace runs out (its clock moved, not the test waiting it out): asked now,
    # the lock comes back at once.
    market.oracle.clock = lambda: time.time() + LIVENESS_GRACE_S + 5
    refunded = consumer.cli("reward", "refund", job_id)
    assert refunded["state"] == "refunded" and refunded["settle_tx"]
    assert refunded["decidable_at"] == 0
    assert market.ntx(_address(consumer)) == before
