"""A paid job with steps (issue 25 §1), end to end: 2 steps x 2 replicas on one provider,
real daemons, the local ledger and the oracle. The receipt bills one subtask per step and
one replica per replica that ran, each its own span; the settled amount is the price times
their summed machine time (oracle_client/billing.py), and both books and the chain agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import api
from oracle_client import billing
from tests.daemon_harness import daemons
from tests.daemons.test_jobs_e2e import scripts
from tests.daemons.test_payments_e2e import (
    Market,
    _address,
    _paid_pair,
    _settled_split,
    _subtasks,
    market,
)

__all__ = ["daemons", "market", "scripts"]

REPLICA = """
import os, time
print("replica", os.environ["REPLICA_INDEX"], "of", os.environ["REPLICAS"], flush=True)
time.sleep(1.5)
"""


@pytest.mark.timeout(300)
def test_two_steps_of_two_replicas_bill_each_replica(
    market: Market, scripts: str, tmp_path: Path
) -> None:
    (tmp_path / "www" / "replica.py").write_text(REPLICA)
    provider, consumer = _paid_pair(market)
    before = market.ntx(_address(consumer))
    job = consumer.cli(
        "job", "submit", "--url", f"{scripts}/replica.py", "--framework", "scikit-learn",
        "--expected-minutes", "0.2", "--step", "first x 2", "--step", "second x 2",
    )  # fmt: skip
    job_id = job["job_id"]
    # The lock covers both replicas of a step at once: price x maximum time x 2.
    assert job["lock_units"] == 2 * billing.metered(6_000_000, 12_000)
    ours, theirs, receipt = _settled_split(market, provider, consumer, job_id, before)
    subtasks = _subtasks(receipt["subtasks"])
    assert [len(subtask.replicas) for subtask in subtasks] == [2, 2]
    # Each step's replicas ran at once, and the second step after the first.
    first, second = subtasks
    assert min(r.started_at for r in second.replicas) >= max(r.ended_at for r in first.replicas)
    machine_ms = billing.machine_time_ms(subtasks)
    assert machine_ms >= 4 * 1_500  # four replicas of 1.5 s each, at least
    assert receipt["charge"] == min(
        ours["amount"], billing.metered(receipt["price_units_hour"], machine_ms)
    )
    assert ours["paid_units"] == theirs["paid_units"] == receipt["charge"]
    # Both sides' records show each step and replica, done, with the same spans.
    for daemon in (provider, consumer):
        shown = daemon.cli("job", "show", job_id)
        assert shown["state"] == "completed"
        assert [s["name"] for s in shown["steps"]] == ["first", "second"]
        assert all(r["state"] == "done" for s in shown["steps"] for r in s["replicas"])
    logs = consumer.call(api.GetJobLogs(job_id=job_id))
    assert "[second#2] replica 1 of 2" in [line.text for line in logs.lines]
