"""A job's runs on its provider, each its own span of machine time (issue 20 §7).

A job resumed from a checkpoint after a provider restart ran twice: from its start until
the crash, and from the resume to its end. Only the first run's part up to the checkpoint it
resumed from is work the consumer keeps (what came after is done again), and the time the
provider was down is no run at all. The receipt bills each run as one replica, so neither is
paid: a job with 14.2 s of metered wall time used to be billed 52 s.
"""

from __future__ import annotations

from engine import api


def resuming(job: api.JobInfo, checkpoint_at: float) -> tuple[api.RunSpan, ...]:
    """Its runs as a new one resumes from a checkpoint taken at ``checkpoint_at``: a run
    that was open when the provider died ends at that checkpoint."""
    return ended(job.run_spans(), checkpoint_at)


def started(runs: tuple[api.RunSpan, ...], at: float) -> tuple[api.RunSpan, ...]:
    return (*ended(runs, at), api.RunSpan(started_at=at))


def ended(runs: tuple[api.RunSpan, ...], at: float) -> tuple[api.RunSpan, ...]:
    """``runs`` with an open last run closed at ``at`` (never before it started)."""
    if not runs or runs[-1].ended_at is not None:
        return runs
    last = runs[-1]
    closed = api.RunSpan(
        started_at=last.started_at, ended_at=max(at, last.started_at), frozen_s=last.frozen_s
    )
    return (*runs[:-1], closed)


def frozen(runs: tuple[api.RunSpan, ...], frozen_s: float) -> tuple[api.RunSpan, ...]:
    """``runs`` with the open last run's frozen time (its meter's, so far) set."""
    if not runs or runs[-1].ended_at is not None:
        return runs
    return (*runs[:-1], api.RunSpan(started_at=runs[-1].started_at, frozen_s=frozen_s))
