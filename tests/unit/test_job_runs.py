"""A job's runs: each its own span, a run the provider died in ending at the checkpoint the
next one resumes from (engine/jobs/runs.py), and what the receipt bills of them."""

from __future__ import annotations

import msgspec

from engine import api
from engine.jobs import runs
from engine.jobs.spec import JobSpec
from engine.payments.escrow import billing_fields
from oracle_client.billing import machine_time_ms

T0 = 1_800_000_000.0


def _job(**fields: object) -> api.JobInfo:
    base = api.JobInfo(
        job_id="0123456789ab",
        role="provider",
        state="running",
        provider="p",
        consumer="c",
        spec=JobSpec(framework="scikit-learn"),
        price_units_hour=3_600_000,  # one base unit per ms
    )
    return msgspec.structs.replace(base, **fields)


def test_a_resumed_job_bills_its_runs_not_the_downtime_nor_the_redone_work() -> None:
    first = runs.started((), T0)
    job = _job(started_at=T0, runs=first)
    # Died at T0 + 30 s (the last checkpoint at T0 + 20 s); back and resumed at T0 + 50 s.
    resumed = runs.started(runs.resuming(job, T0 + 20), T0 + 50)
    assert resumed == (
        api.RunSpan(started_at=T0, ended_at=T0 + 20),
        api.RunSpan(started_at=T0 + 50),
    )
    ended = _job(
        state="completed", started_at=T0, finished_at=T0 + 60, runs=runs.ended(resumed, T0 + 60)
    )
    fields = billing_fields(ended, 10**9)
    assert machine_time_ms(fields["subtasks"]) == 30_000  # 20 s + 10 s, not 60 s
    assert len(fields["subtasks"][0].replicas) == 2
    assert fields["charge"] == 30_000


def test_a_checkpoint_older_than_the_run_gives_that_run_nothing() -> None:
    job = _job(
        started_at=T0,
        runs=(api.RunSpan(started_at=T0, ended_at=T0 + 20), api.RunSpan(started_at=T0 + 50)),
    )
    # The second run died before its first checkpoint: it resumes from T0 + 20 again.
    assert runs.resuming(job, T0 + 20)[-1] == api.RunSpan(started_at=T0 + 50, ended_at=T0 + 50)


def test_a_record_from_before_runs_were_kept_is_one_run() -> None:
    old = _job(state="completed", started_at=T0, finished_at=T0 + 12)
    assert old.run_spans() == (api.RunSpan(started_at=T0, ended_at=T0 + 12),)
    assert machine_time_ms(billing_fields(old, 10**9)["subtasks"]) == 12_000
    assert _job().run_spans() == ()  # never started: nothing billed
