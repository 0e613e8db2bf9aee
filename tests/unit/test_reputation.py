"""A provider's record with us (engine/domain/reputation.py): counted from our own jobs and
escrows only; the job's own failures are not held against the provider; a new identity has
no score at all."""

from __future__ import annotations

from typing import Any

import msgspec

from engine import api
from engine.domain.reputation import reputations
from engine.domain.spec import JobSpec

SPEC = JobSpec(framework="scikit-learn", script_url="https://example.org/x.py")


def _job(n: int, provider: str, state: str, **extra: Any) -> api.JobInfo:
    fields: dict[str, Any] = {"started_at": 100.0, "finished_at": 200.0, **extra}
    return api.JobInfo(
        job_id=f"{n:012x}", role="consumer", state=state, provider=provider, consumer="me",
        spec=SPEC, created_at=50.0, **fields,
    )  # fmt: skip


def _escrow(job: api.JobInfo, **extra: Any) -> api.EscrowInfo:
    return api.EscrowInfo(
        job_id=job.job_id, role="consumer", state="claimed", amount=10, deadline_ms=0,
        consumer_pkh="c", provider_pkh="p", oracle_key="o", **extra,
    )  # fmt: skip


def test_outcomes_are_counted_for_or_against_the_provider_by_whose_doing_they_were() -> None:
    jobs = [
        _job(1, "good", "completed"),
        _job(2, "good", "completed"),
        _job(3, "good", "failed", exit_code=1),  # the job's own code
        _job(4, "good", "oom"),
        _job(5, "bad", "completed"),
        _job(6, "bad", "interrupted"),  # shut down without a checkpoint: its fault
        _job(7, "bad", "failed", exit_code=None),  # vanished: its escrow says so
        _job(8, "bad", "refused", started_at=None),  # never started: neither side's
        _job(9, "bad", "cancelled", started_at=None),
    ]
    escrows = {
        "000000000001": _escrow(jobs[0], settle_tx="t", updated_at=230.0),
        "000000000007": _escrow(jobs[6], refund_alone="provider_vanished"),
    }
    records = reputations(jobs, escrows)
    good, bad = records["good"], records["bad"]
    assert (good.jobs, good.completed, good.failed_own, good.provider_faults) == (4, 2, 2, 0)
    assert good.score == 3 / 4 and good.settle_s == 30.0
    assert good.basis == "2 completed, 2 failed by the job of 4 jobs, settled in 30 s"
    assert (bad.jobs, bad.completed, bad.provider_faults) == (3, 1, 2)
    assert bad.score == 2 / 5
    assert "unknown" not in records  # a new identity: no record, no score


def test_only_the_jobs_this_node_paid_for_count() -> None:
    # Jobs this node ran for others (provider side) say nothing of anyone's record.
    ran_for_others = msgspec.structs.replace(_job(1, "p", "completed"), role="provider")
    assert reputations([ran_for_others], {}) == {}
