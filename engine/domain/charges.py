"""What a job's machine time costs, from its own record: the one place every view, the
receipt and the escrow read a job's metered figure (issue 20 §9).

A job here is anything shaped like ``api.JobInfo`` (``BilledJob``): the domain does not import
the API; the API's JobInfo is one such job.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from oracle_client import billing


class BilledJob(Protocol):
    """What billing reads of a job (``api.JobInfo`` has all of it)."""

    @property
    def state(self) -> Any: ...
    @property
    def price_units_hour(self) -> int | None: ...
    @property
    def min_charge_units(self) -> int: ...
    @property
    def lock_units(self) -> int | None: ...
    @property
    def estimate_units(self) -> int | None: ...
    @property
    def updated_at(self) -> float: ...
    @property
    def receipt(self) -> str: ...
    @property
    def metering(self) -> Any: ...  # JobMetering | None: its ``cost_units`` (older jobs)

    def run_spans_ms(self, now: float) -> list[tuple[int, int, int]]: ...


def machine_ms(job: BilledJob, end: float | None = None) -> int | None:
    """The job's machine time in ms: each of its runs (engine/jobs/runs.py), an open one to
    the job's end (``end`` while it has none; the time now without either); None before it
    started."""
    spans = job.run_spans_ms(time.time() if end is None else end)
    return sum(stop - start - paused for start, stop, paused in spans) if spans else None


def charge_units(job: BilledJob, machine_ms: int, *, cap: int | None = None) -> int | None:
    """``billing.charge`` of the job's own price and minimum charge for ``machine_ms``, at most
    ``cap`` (the escrow's lock; the job's own lock, else its estimate, without one). None for
    a job with no price in base units (quoted before billing) or nothing to cap it by."""
    if job.price_units_hour is None:
        return None
    if cap is None:
        cap = job.lock_units if job.lock_units is not None else job.estimate_units
    if cap is None:
        return None
    return billing.charge(
        job.price_units_hour, machine_ms, min_charge=job.min_charge_units, cap=cap
    )


def metered_units(job: BilledJob) -> int | None:
    """The metered figure of an ended job, base units, from its own record: the charge its
    receipt signs (``charge_units`` over its runs); for a job from before billing,
    what it was charged then (a paid one that completed: its whole quote; else its
    metering's cost). None: nothing was metered (a job that never started: its receipt
    charges 0).

    Every place that shows or adds up a job's metered figure without its escrow reads it
    here (the escrow's ``metered_units``, the signed receipt's charge, where it has one)."""
    ran_ms = machine_ms(job, job.updated_at)
    charge = charge_units(job, ran_ms) if ran_ms is not None else None
    if charge is not None:
        return charge
    if job.receipt and job.state == "completed" and job.estimate_units is not None:
        return job.estimate_units
    return job.metering.cost_units if job.metering is not None else None
