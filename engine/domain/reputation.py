"""A provider's record with us, from evidence this node holds (issue 27 §2): how the jobs it
ran for us ended, and how long their escrows took to settle, counted from our own job records
and our escrow book (which follows the chain), never from anything the provider says about
itself.

- completed: the job ended "completed";
- failed by the job's own code: "failed" with an exit code, "oom", "timeout" (the job's own
  doing or its spec's limits: not held against the provider);
- the provider's fault: "interrupted" (it shut down with no checkpoint to resume from), or an
  escrow refunded because the provider vanished mid-job;
- jobs that never started (refused, cancelled before running, or failed before a start) count
  for neither side.

The score is (completed + 1) / (completed + the provider's faults + 2): a provider with no
history with us has none (None, "no history": a new identity starts there, so a provider
cannot shed a bad record by taking a new key and be better off than a stranger), and a record
moves the score only as far as its size warrants. Self-dealing (paying yourself through a fresh
consumer) cannot reach this node's book at all: only jobs this node paid for count.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

OWN_FAILURES = ("failed", "oom", "timeout")


class Reputation(msgspec.Struct, frozen=True, kw_only=True):
    jobs: int = 0  # jobs it ran for us that started
    completed: int = 0
    failed_own: int = 0  # ended by the job's own code or limits
    provider_faults: int = 0
    settle_s: float | None = None  # median seconds from a paid job's end to its settlement
    score: float | None = None  # None: no history with us

    @property
    def basis(self) -> str:
        if self.score is None:
            return "no history with us"
        parts = [f"{self.completed} completed"]
        if self.provider_faults:
            parts.append(f"{self.provider_faults} its fault")
        if self.failed_own:
            parts.append(f"{self.failed_own} failed by the job")
        settle = f", settled in {self.settle_s:.0f} s" if self.settle_s is not None else ""
        return f"{', '.join(parts)} of {self.jobs} jobs{settle}"


def reputations(jobs: Iterable[Any], escrows: Mapping[str, Any]) -> dict[str, Reputation]:
    """Each provider's record from our consumer ``jobs`` (api.JobInfo) and our escrows by job
    id (api.EscrowInfo)."""
    counts: dict[str, dict[str, int]] = {}
    settles: dict[str, list[float]] = {}
    for job in jobs:
        if job.role != "consumer" or not job.provider:
            continue
        escrow = escrows.get(job.job_id)
        vanished = escrow is not None and escrow.refund_alone == "provider_vanished"
        started = job.started_at is not None or job.state == "completed"
        if not started and not vanished:
            continue
        row = counts.setdefault(job.provider, {"jobs": 0, "completed": 0, "own": 0, "fault": 0})
        row["jobs"] += 1
        if job.state == "completed":
            row["completed"] += 1
        elif vanished or job.state == "interrupted":
            row["fault"] += 1
        elif job.state in OWN_FAILURES and (job.state != "failed" or job.exit_code is not None):
            row["own"] += 1
        if escrow is not None and escrow.settle_tx and job.finished_at:
            settles.setdefault(job.provider, []).append(
                max(0.0, escrow.updated_at - job.finished_at)
            )
    out = {}
    for provider, row in counts.items():
        settle = settles.get(provider)
        out[provider] = Reputation(
            jobs=row["jobs"],
            completed=row["completed"],
            failed_own=row["own"],
            provider_faults=row["fault"],
            settle_s=statistics.median(settle) if settle else None,
            score=(row["completed"] + 1) / (row["completed"] + row["fault"] + 2),
        )
    return out
