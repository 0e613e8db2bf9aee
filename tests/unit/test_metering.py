"""The meter's wall time: from start to exit, less the time a checkpoint held the job frozen
(issue 20 §3: a job frozen by a hung checkpoint was billed for it)."""

from __future__ import annotations

from engine.jobs.metering import Meter


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
