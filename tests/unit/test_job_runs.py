"""A job's runs: each its own span, a run the provider died in ending at the checkpoint the
next one resumes from (engine/jobs/runs.py), and what the receipt bills of them."""

from __future__ import annotations

import msgspec
import pytest

from engine import api
from engine.domain.spec import JobSpec
from engine.jobs import runs
from engine.payments.escrow_receipts import billing_fields
from oracle_client import billing
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


def test_the_time_checkpoints_held_a_run_frozen_is_not_billed() -> None:
    running = runs.frozen(runs.started((), T0), 2.5)  # 2.5 s frozen so far
    job = _job(
        state="completed", started_at=T0, finished_at=T0 + 30, runs=runs.ended(running, T0 + 30)
    )
    (replica,) = billing_fields(job, 10**9)["subtasks"][0].replicas
    assert (replica.ended_at - replica.started_at, replica.paused_ms) == (30_000, 2_500)
    assert replica.machine_ms == 27_500


def test_a_replica_never_paused_encodes_and_signs_as_before() -> None:
    """``paused_ms`` is left out when 0: receipts from before it keep their bytes (and so
    their signatures)."""
    start, end = 1_800_000_000_000, 1_800_000_001_000
    (subtask,) = billing.single_run(start, end)
    assert msgspec.json.encode(subtask) == (
        b'{"replicas":[{"started_at":%d,"ended_at":%d}]}' % (start, end)
    )
    paused = billing.Replica(started_at=start, ended_at=end, paused_ms=300)
    assert msgspec.json.decode(msgspec.json.encode(paused), type=billing.Replica) == paused
    with pytest.raises(msgspec.ValidationError, match="longer than it lasted"):
        msgspec.json.decode(
            b'{"started_at":%d,"ended_at":%d,"paused_ms":1001}' % (start, end),
            type=billing.Replica,
        )
