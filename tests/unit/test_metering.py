"""The meter's wall time: from start to exit, less the time a checkpoint held the job frozen
(issue 20 §3: a job frozen by a hung checkpoint was billed for it)."""

from __future__ import annotations

import msgspec

from engine import api
from engine.domain.charges import metered_units
from engine.domain.spec import JobSpec
from engine.jobs.metering import Meter
from engine.notices import NoticeFilter
from engine.payments.escrow_receipts import billing_fields
from nunet_tui.viewmodels.money import job_figures


def test_frozen_time_is_not_wall_time() -> None:
    meter = Meter(mhz_per_core=2000)
    meter.start(now=100.0)
    meter.freeze(now=110.0)
    assert meter.usage(now=115.0).wall_s == 10.0  # frozen now: the clock stands still
    meter.thaw(now=130.0)
    meter.freeze(now=140.0)
    meter.thaw(now=141.0)
    meter.stop(now=150.0)
    assert meter.usage().wall_s == 50.0 - 20.0 - 1.0


def test_a_job_that_ends_frozen_is_billed_up_to_its_freeze() -> None:
    """Killed at its time limit while paused: the frozen end is not billed, and a late
    thaw (the checkpoint's resume, after the stop) changes nothing."""
    meter = Meter(mhz_per_core=2000)
    meter.start(now=0.0)
    meter.freeze(now=30.0)
    meter.stop(now=90.0)
    meter.thaw(now=95.0)
    meter.freeze(now=96.0)  # after the end: nothing to freeze
    assert meter.usage(now=200.0).wall_s == 30.0


def test_a_meter_never_frozen_counts_from_start_to_stop() -> None:
    meter = Meter(mhz_per_core=2000, gpus=2)
    meter.start(now=5.0)
    meter.thaw(now=6.0)  # a resume with no pause before it
    meter.stop(now=17.5)
    usage = meter.usage()
    assert (usage.wall_s, usage.gpu_s) == (12.5, 25.0)


# --- the one metered figure (issue 20 §9) ---------------------------------------------------


def _job(**fields: object) -> api.JobInfo:
    base: dict[str, object] = {
        "job_id": "j1",
        "role": "provider",
        "state": "completed",
        "provider": "p",
        "consumer": "c",
        "spec": JobSpec(name="n", framework="scikit-learn"),
        "price_units_hour": 6_000_000,
        "lock_units": 20_000,
        "estimate_units": 20_000,
        "started_at": 1_000.0,
        "finished_at": 1_006.075,
        "updated_at": 1_006.5,
        # The meter's own figure: 6.061 s of sampled wall time (the daemons' run of issue 20
        # §9 said 0.010101 NTX here, its receipt 0.010125 NTX).
        "metering": api.JobMetering(wall_s=6.061, cost_units=10_101),
    }
    base.update(fields)
    return api.JobInfo(**base)  # type: ignore[arg-type]


def test_an_ended_job_is_metered_what_its_receipt_charges() -> None:
    job = _job()
    assert metered_units(job) == 10_125 == billing_fields(job, 20_000)["charge"]
    short = _job(finished_at=1_000.5, min_charge_units=5_000)  # under the minimum charge
    assert metered_units(short) == 5_000 == billing_fields(short, 20_000)["charge"]
    long = _job(finished_at=1_100.0)  # past the lock: capped
    assert metered_units(long) == 20_000 == billing_fields(long, 20_000)["charge"]


def test_figures_of_jobs_from_before_billing() -> None:
    legacy = _job(price_units_hour=None, lock_units=None, estimate_units=None)
    assert metered_units(legacy) == 10_101  # its metering's cost
    # A paid one that completed: its quote (kept as its estimate since schema v6).
    quoted = msgspec.structs.replace(legacy, receipt="{}", estimate_units=250_000)
    assert metered_units(quoted) == 250_000
    never = _job(started_at=None, metering=None)
    assert metered_units(never) is None and billing_fields(never, 20_000)["charge"] == 0


def test_every_view_of_an_ended_job_shows_the_one_figure() -> None:
    job = _job()
    assert job_figures(job).metered == 10_125
    notice = NoticeFilter(since=0).observe(api.JobChanged(at=1_006.5, job=job))
    assert notice is not None and notice.text.endswith("completed · 0.010125 NTX metered")
    assert notice.payload["job"]["metered_units"] == 10_125
    assert "cost_ntx" not in notice.payload["job"]  # every amount in base units (issue 23)
