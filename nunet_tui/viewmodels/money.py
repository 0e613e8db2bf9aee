"""The figures of a paid job, worked out once: every screen and CLI line reads them here.

A job's money is five figures, each of one kind (oracle_client/ntx.py ``KINDS``): the
``estimate`` (price x expected time), what is ``locked`` in escrow (price x maximum time),
what was ``metered`` (price x machine time, at least the spec's minimum charge, at most the
lock), and, once settled, what was ``paid`` to the provider and ``refunded`` to the consumer.

Where they come from, best first: the escrow record (the provider's signed machine time and
the settlement on the chain: ``metered_units``, ``paid_units``, ``refunded_units``,
``settle_tx``), then the job's own billing fields (``estimate_units``, ``lock_units``, and the
metered charge: engine/domain/charges.py ``metered_units``, the receipt's charge from its start
and end, which the engine's totals and notices read too), then the metering's
``cost_units`` for jobs made before billing.
Escrow records older than billing settled all or nothing: a claim paid the whole lock, a
refund returned it. A settlement counts once the chain shows it (claimed, paid out,
refunded), not while its transaction is on its way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.api import ESCROW_OPEN_STATES, TERMINAL_STATES, EscrowInfo, JobInfo
from engine.domain.charges import charge_units, metered_units
from engine.domain.charges import machine_ms as run_machine_ms
from engine.domain.safe_text import safe
from oracle_client import billing
from oracle_client.ntx import format_ntx, format_rate

OPEN_STATES: tuple[str, ...] = (*ESCROW_OPEN_STATES, "undecided")
# Escrow states after which nothing more moves: the settlement is what the chain did.
SETTLED_STATES = ("claimed", "paid_out", "refunded")


@dataclass(frozen=True)
class Figures:
    """One job's money in base units (None: not known, shown as a dash)."""

    estimate: int | None = None
    locked: int | None = None
    metered: int | None = None
    paid: int | None = None
    refunded: int | None = None
    spec: str = ""
    price_units_hour: int | None = None
    min_charge_units: int = 0
    machine_ms: int | None = None
    lock_tx: str = ""
    settle_tx: str = ""

    @property
    def settled(self) -> bool:
        return self.paid is not None


def machine_ms(job: JobInfo, now: float | None = None) -> int | None:
    """The job's machine time, as its receipt bills it: each run, less its frozen time, to
    the job's end (or ``now`` while it runs); None before it started."""
    end = now if now is not None and job.state not in TERMINAL_STATES else job.updated_at
    return run_machine_ms(job, end)


def metered_charge(job: JobInfo, elapsed_ms: int | None) -> int | None:
    """``billing.charge`` of the job's own price, minimum charge and lock (the cap): the
    engine's ``charge_units``, the one the receipt signs."""
    return None if elapsed_ms is None else charge_units(job, elapsed_ms)


def settlement(escrow: EscrowInfo) -> tuple[int | None, int | None]:
    """(paid to the provider, refunded to the consumer) once the chain settled the escrow
    (``EscrowInfo.settled``: older rows all one way by their state); Nones while it is open:
    a settlement tx on its way, or a split the oracle signed that is not spent yet, is not
    paid yet."""
    if escrow.state not in SETTLED_STATES:
        return None, None
    return escrow.settled()


def settle_tx(escrow: EscrowInfo) -> str:
    """The one transaction that spent the lock (a claim's or refund's before issue 12)."""
    return escrow.settle_tx or escrow.claim_tx


def escrow_figures(escrow: EscrowInfo) -> Figures:
    """What an escrow record alone says (the rewards, wallet and account lists)."""
    paid, refunded = settlement(escrow)
    metered = escrow.metered_units
    if metered is None and paid is not None and escrow.reward_type != "refund":
        metered = paid  # settled before receipts carried a charge: what was paid
    return Figures(
        locked=escrow.amount,
        metered=metered,
        paid=paid,
        refunded=refunded,
        spec="",
        lock_tx=escrow.lock_tx,
        settle_tx=settle_tx(escrow),
    )


def job_figures(
    job: JobInfo, escrow: EscrowInfo | None = None, now: float | None = None
) -> Figures:
    """Every figure of ``job`` (its escrow's, where it has one: those are what the chain did)."""
    elapsed = machine_ms(job, now)
    estimate = job.estimate_units
    locked = job.lock_units
    # An ended job's is what its receipt signs (or, before billing, what it was charged),
    # the figure the engine's totals and notices add up; a running one's, so far.
    ended = job.state in TERMINAL_STATES
    metered = metered_units(job) if ended else metered_charge(job, elapsed)
    if escrow is None:
        return Figures(
            estimate=estimate,
            locked=locked,
            metered=metered,
            spec=job.resource_spec,
            price_units_hour=job.price_units_hour,
            min_charge_units=job.min_charge_units,
            machine_ms=elapsed,
        )
    own = escrow_figures(escrow)
    return Figures(
        estimate=estimate,
        locked=escrow.amount,
        metered=own.metered if own.metered is not None else metered,
        paid=own.paid,
        refunded=own.refunded,
        spec=job.resource_spec or own.spec,
        price_units_hour=job.price_units_hour,
        min_charge_units=job.min_charge_units,
        machine_ms=elapsed,
        lock_tx=own.lock_tx,
        settle_tx=own.settle_tx,
    )


def cancel_split(job: JobInfo, escrow: EscrowInfo | None, now: float) -> tuple[int, int] | None:
    """What cancelling ``job`` now pays the provider and refunds (None: not a metered job).

    A job that never started pays nothing; one that runs pays its machine time so far."""
    lock = escrow.amount if escrow is not None else job.lock_units
    if lock is None or job.price_units_hour is None:
        return None
    if job.started_at is None:
        return 0, lock
    elapsed = max(int(now * 1000) - int(job.started_at * 1000), 0)
    pay = billing.charge(job.price_units_hour, elapsed, min_charge=job.min_charge_units, cap=lock)
    return pay, lock - pay


def amount(units: int | None, what: str | None = None) -> str:
    """``1.5 NTX paid``; a dash when the figure is not known."""
    return "—" if units is None else format_ntx(units, what)


def machine_time(ms: int | None) -> str:
    """``12 min 30 s`` of machine time; ``1 h 02 min``; a dash when unknown."""
    if ms is None:
        return "—"
    seconds = ms // 1000
    if seconds < 60:
        return f"{ms / 1000:.1f} s" if ms < 10_000 else f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def summary(figures: Figures) -> str:
    """``0.5 NTX estimate · 1 NTX locked · 0.25 NTX metered · 0.25 NTX paid · 0.75 NTX
    refunded · machine time 6 min 15 s``: each figure known, saying what it is."""
    parts = [
        format_ntx(units, what)
        for units, what in (
            (figures.estimate, "estimate"),
            (figures.locked, "locked"),
            (figures.metered, "metered"),
            (figures.paid, "paid"),
            (figures.refunded, "refunded"),
        )
        if units is not None
    ]
    if figures.machine_ms is not None and parts:
        parts.append(f"machine time {machine_time(figures.machine_ms)}")
    return " · ".join(parts)


def totals(figures: Iterable[Figures]) -> dict[str, int]:
    """Sums of each kind over ``figures`` (unknown figures count as nothing)."""
    sums = {"estimate": 0, "locked": 0, "metered": 0, "paid": 0, "refunded": 0}
    for f in figures:
        for kind in sums:
            sums[kind] += getattr(f, kind) or 0
    return sums


def is_open(escrow: EscrowInfo) -> bool:
    """Money still held by the script (or on its way out): something may still happen."""
    return escrow.state in OPEN_STATES


@dataclass(frozen=True)
class Totals:
    """The sums the screens show; the engine's ``EscrowList`` has the same rules, but events
    bring one escrow at a time, so the screens add up what they hold."""

    earned: int = 0  # provider: claimed
    awaiting: int = 0  # provider: still open
    spent: int = 0  # consumer: paid out to providers
    locked: int = 0  # consumer: still open
    refunded: int = 0  # consumer: came back
    awaiting_jobs: int = 0
    locked_jobs: int = 0


def escrow_totals(escrows: Iterable[EscrowInfo]) -> Totals:
    """Provider: paid to us (earned) and still open; consumer: paid to providers (spent),
    refunded and still locked. A settlement that split the lock counts on both sides."""
    earned = awaiting = spent = locked = refunded = awaiting_jobs = locked_jobs = 0
    for e in escrows:
        paid, back = settlement(e)
        if paid is None:
            if is_open(e):
                if e.role == "provider":
                    awaiting += e.amount
                    awaiting_jobs += 1
                else:
                    locked += e.amount
                    locked_jobs += 1
            continue
        if e.role == "provider":
            earned += paid
        else:
            spent += paid
            refunded += back or 0
    return Totals(earned, awaiting, spent, locked, refunded, awaiting_jobs, locked_jobs)


def price_text(job: JobInfo) -> str:
    """``2.4 NTX/h · spec gpu-large``; empty when unknown."""
    if job.price_units_hour is None:
        return ""
    text = format_rate(job.price_units_hour)
    return f"{text} · spec {safe(job.resource_spec)}" if job.resource_spec else text
