"""The account: what came into the wallet, what each job consumed, what each spec earned.

Built from the node's own records, never from a second bookkeeping: the escrow rows
(``RewardList``: locked, metered, paid, refunded, the lock and settlement tx hashes), the
jobs (``ListJobs``: which spec, how much machine time) and the wallet's balance on the
chain (``WalletBalance``). The account screen (``a``), ``nunet-tui account`` and its
``--json`` all show this one object, so their figures are the same to the base unit.

Recharges: NTX that arrived in the wallet from outside the escrows (a faucet, an exchange,
another wallet), one record per transaction as the chain backend lists the wallet's history
(``WalletRecharges``: tx hash, time, amount, senders); escrow refunds and splits coming back
are not recharges (they are "refunded"). Where the history cannot be read, the sum is worked
out from what the records do hold: every NTX that left the wallet went into a lock, and every
NTX that came back from an escrow is a refund or a provider's pay, so ``recharged = balance +
locked ever - refunded - earned`` (fees are paid in ADA, never NTX), marked as derived.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import msgspec

from engine.api import Balance, EscrowInfo, JobInfo, RechargeList
from nunet_tui.viewmodels.money import escrow_figures, job_figures, settlement

# A consumer's lock that never reached the chain took nothing from the wallet.
NOT_LOCKED = ("locking", "void")


@dataclass(frozen=True)
class Consumption:
    """One job this node bought, as its escrow and its record say."""

    job_id: str
    name: str
    spec: str
    state: str  # the escrow's state
    outcome: str  # how the job ended ("" while it runs)
    machine_ms: int | None
    locked_units: int
    metered_units: int | None
    paid_units: int | None
    refunded_units: int | None
    lock_tx: str
    settle_tx: str
    at: float


@dataclass(frozen=True)
class Earning:
    """One job this node ran for pay (provider side)."""

    job_id: str
    spec: str
    day: str  # UTC date it settled (or last changed)
    state: str
    machine_ms: int | None
    locked_units: int
    metered_units: int | None
    paid_units: int | None
    settle_tx: str


@dataclass(frozen=True)
class SpecDay:
    day: str
    spec: str
    jobs: int
    machine_ms: int | None  # None: no job record says how long they ran
    paid_units: int


@dataclass(frozen=True)
class RechargeRow:
    """One transfer that brought NTX into the wallet."""

    tx_hash: str
    at: float
    amount_units: int
    kind: str  # "recharge"
    from_addresses: tuple[str, ...]  # empty: created by the local ledger's faucet


@dataclass(frozen=True)
class Account:
    balance_units: int | None  # None: not read (no wallet, no chain backend, unknown token)
    balance_note: str  # why not, in one line
    # The sum of ``recharges`` when the chain's history was read; else derived from the
    # balance and the escrows (``recharges_read`` False, ``recharges_note`` says why).
    recharged_units: int | None
    consumption: tuple[Consumption, ...]
    earnings: tuple[Earning, ...]
    per_spec_day: tuple[SpecDay, ...]
    locked_units: int  # consumer: still held by open locks
    paid_units: int  # consumer: paid to providers
    refunded_units: int  # consumer: came back
    earned_units: int  # provider: paid to this node
    recharges: tuple[RechargeRow, ...] = ()  # newest first
    recharges_read: bool = False  # the records come from the chain's history
    recharges_complete: bool = True  # False: older transactions than those read exist
    recharges_note: str = ""  # why the history was not read, in one line

    def to_json(self) -> dict[str, object]:
        """The ``account --json`` object: every figure in base units, keys saying the kind."""
        # JSON's own types all the way down (tuples become lists, as --json prints them).
        data: dict[str, object] = msgspec.json.decode(msgspec.json.encode(asdict(self)))
        return data


def day_of(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(at)) if at else ""


def _spec_of(job: JobInfo | None) -> str:
    if job is None:
        return ""
    return job.resource_spec or f"{job.spec.tier} tier"


def build(
    jobs: Iterable[JobInfo],
    escrows: Iterable[EscrowInfo],
    balance: Balance | None = None,
    balance_note: str = "",
    recharges: RechargeList | None = None,
    recharges_note: str = "",
) -> Account:
    by_id: dict[tuple[str, str], JobInfo] = {(j.role, j.job_id): j for j in jobs}
    consumption: list[Consumption] = []
    earnings: list[Earning] = []
    locked_ever = locked_open = paid_out = refunded_in = earned = 0
    for escrow in sorted(escrows, key=lambda e: (-(e.updated_at or e.created_at), e.job_id)):
        job = by_id.get((escrow.role, escrow.job_id))
        figures = job_figures(job, escrow) if job is not None else escrow_figures(escrow)
        paid, refunded = settlement(escrow)
        if escrow.role == "consumer":
            if escrow.state not in NOT_LOCKED:
                locked_ever += escrow.amount
            if paid is None:
                if escrow.state not in NOT_LOCKED:
                    locked_open += escrow.amount
            else:
                paid_out += paid
                refunded_in += refunded or 0
            consumption.append(
                Consumption(
                    job_id=escrow.job_id,
                    name=(job.spec.name if job is not None else "") or "",
                    spec=_spec_of(job),
                    state=escrow.state,
                    outcome=escrow.outcome or (job.state if job is not None else ""),
                    machine_ms=figures.machine_ms,
                    locked_units=escrow.amount,
                    metered_units=figures.metered,
                    paid_units=paid,
                    refunded_units=refunded,
                    lock_tx=escrow.lock_tx,
                    settle_tx=figures.settle_tx,
                    at=escrow.updated_at or escrow.created_at,
                )
            )
        else:
            earned += paid or 0
            earnings.append(
                Earning(
                    job_id=escrow.job_id,
                    spec=_spec_of(job),
                    day=day_of(escrow.updated_at or escrow.created_at),
                    state=escrow.state,
                    machine_ms=figures.machine_ms,
                    locked_units=escrow.amount,
                    metered_units=figures.metered,
                    paid_units=paid,
                    settle_tx=figures.settle_tx,
                )
            )
    units = balance.ntx_units if balance is not None else None
    rows: tuple[RechargeRow, ...] = ()
    if recharges is not None:
        rows = tuple(
            RechargeRow(
                tx_hash=r.tx_hash,
                at=r.at,
                amount_units=r.amount_units,
                kind=r.kind,
                from_addresses=r.from_addresses,
            )
            for r in recharges.recharges
        )
        recharged: int | None = recharges.recharged_units
    else:
        recharged = None if units is None else units + locked_ever - refunded_in - earned
    return Account(
        balance_units=units,
        balance_note=balance_note,
        recharged_units=recharged,
        consumption=tuple(consumption),
        earnings=tuple(earnings),
        per_spec_day=per_spec_day(earnings),
        locked_units=locked_open,
        paid_units=paid_out,
        refunded_units=refunded_in,
        earned_units=earned,
        recharges=rows,
        recharges_read=recharges is not None,
        recharges_complete=recharges.complete if recharges is not None else True,
        recharges_note=recharges_note,
    )


def per_spec_day(earnings: Iterable[Earning]) -> tuple[SpecDay, ...]:
    """What each spec earned each day (jobs settled with pay), newest day first."""
    sums: dict[tuple[str, str], list[int | None]] = {}
    for e in earnings:
        if not e.paid_units:
            continue
        row = sums.setdefault((e.day, e.spec), [0, None, 0])
        row[0] = (row[0] or 0) + 1
        if e.machine_ms is not None:
            row[1] = (row[1] or 0) + e.machine_ms
        row[2] = (row[2] or 0) + e.paid_units
    ordered = sorted(sums.items(), key=lambda item: (-_ordinal(item[0][0]), item[0][1]))
    return tuple(
        SpecDay(day=day, spec=spec, jobs=n or 0, machine_ms=ms, paid_units=paid or 0)
        for (day, spec), (n, ms, paid) in ordered
    )


def metered_today(jobs: Iterable[JobInfo], now: float) -> list[tuple[str, int]]:
    """(spec, metered base units) of the provider's jobs that ended today (UTC), most first:
    what the dashboard says this machine earned today, before the settlements land."""
    today = day_of(now)
    sums: dict[str, int] = {}
    for job in jobs:
        if job.role != "provider" or job.finished_at is None or day_of(job.finished_at) != today:
            continue
        metered = job_figures(job).metered
        if metered:
            sums[_spec_of(job)] = sums.get(_spec_of(job), 0) + metered
    return sorted(sums.items(), key=lambda item: (-item[1], item[0]))


def _ordinal(day: str) -> int:
    return int(day.replace("-", "")) if day else 0
