"""The figures of a paid job (nunet_tui/viewmodels/money.py): one place works them out for
every screen and CLI line, from the escrow record first, then the job's billing fields."""

from __future__ import annotations

import msgspec

from engine.api import EscrowInfo, JobInfo
from engine.domain.spec import JobSpec
from nunet_tui.viewmodels.money import (
    cancel_split,
    escrow_figures,
    escrow_totals,
    job_figures,
    machine_time,
    summary,
)

T0 = 1_750_000_000.0
PRICE = 2_400_000  # 2.4 NTX per machine-hour


def job(**fields: object) -> JobInfo:
    base = JobInfo(
        job_id="j1",
        role="consumer",
        state="completed",
        provider="12D3KooWprov",
        consumer="12D3KooWcons",
        spec=JobSpec(
            script_url="https://example.org/x.py",
            framework="pytorch",
            expected_minutes=30,
            max_minutes=60,
        ),
        resource_spec="gpu-large",
        price_units_hour=PRICE,
        min_charge_units=10_000,
        estimate_units=1_200_000,
        lock_units=2_400_000,
        started_at=T0,
        finished_at=T0 + 15 * 60,
    )
    return msgspec.structs.replace(base, **fields)


def escrow(state: str, **fields: object) -> EscrowInfo:
    return EscrowInfo(
        job_id="j1",
        role="consumer",
        state=state,  # type: ignore[arg-type]
        amount=2_400_000,
        deadline_ms=0,
        consumer_pkh="aa" * 28,
        provider_pkh="bb" * 28,
        oracle_key="cc" * 32,
        lock_tx="11" * 32,
        claim_tx="22" * 32 if state in ("paid_out", "claimed", "refunded") else "",
        **fields,  # type: ignore[arg-type]
    )


def test_a_job_meters_its_machine_time_at_its_price() -> None:
    figures = job_figures(job())
    # 15 minutes at 2.4 NTX/h: 0.6 NTX, above the minimum charge, under the lock.
    assert (figures.estimate, figures.locked, figures.metered) == (1_200_000, 2_400_000, 600_000)
    assert figures.machine_ms == 15 * 60 * 1000 and machine_time(figures.machine_ms) == (
        "15 min 00 s"
    )
    assert figures.paid is None  # nothing settled without an escrow record
    assert summary(figures) == (
        "1.2 NTX estimate · 2.4 NTX locked · 0.6 NTX metered · machine time 15 min 00 s"
    )
    # Never more than the lock, never less than the minimum charge.
    assert job_figures(job(finished_at=T0 + 5 * 3600)).metered == 2_400_000
    assert job_figures(job(finished_at=T0 + 1)).metered == 10_000


def test_an_escrow_record_wins_and_an_old_one_settled_all_or_nothing() -> None:
    old = escrow("paid_out")
    assert (escrow_figures(old).paid, escrow_figures(old).refunded) == (2_400_000, 0)
    back = escrow("refunded")
    assert (escrow_figures(back).paid, escrow_figures(back).refunded) == (0, 2_400_000)
    assert escrow_figures(escrow("locked")).paid is None


def test_cancel_pays_the_time_used_so_far_and_refunds_the_rest() -> None:
    running = job(state="running", finished_at=None)
    assert cancel_split(running, None, now=T0 + 30 * 60) == (1_200_000, 1_200_000)
    assert cancel_split(job(state="accepted", started_at=None, finished_at=None), None, T0) == (
        0,
        2_400_000,
    )
    assert cancel_split(job(price_units_hour=None), None, T0) is None  # not a metered job


def test_totals_count_a_split_on_both_sides() -> None:
    sums = escrow_totals([escrow("paid_out"), escrow("refunded"), escrow("locked")])
    assert (sums.spent, sums.refunded, sums.locked, sums.locked_jobs) == (
        2_400_000,
        2_400_000,
        2_400_000,
        1,
    )
