"""``nunet-tui account``: the consumer's account (recharges, what each job consumed, the
balance) and the provider's earnings per spec per day, from the node's own records.

The figures are nunet_tui/viewmodels/account.py's, the same the account screen (``a``) and
the rewards screen show; ``--json`` gives them in NTX base units, each key naming its kind
(``locked_units``, ``metered_units``, ``paid_units``, ``refunded_units``).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from engine import api
from engine.client import EngineClient
from engine.domain.safe_text import safe
from engine.errors import EngineError
from nunet_tui.cli.output import show, show_json
from nunet_tui.viewmodels.account import Account, build
from nunet_tui.viewmodels.money import amount, machine_time
from oracle_client.ntx import format_ntx


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    sub.add_parser(
        "account",
        parents=[common],
        help="recharges, what each paid job consumed and got back, earnings per spec per day",
    )


def read_account(client: EngineClient) -> Account:
    """The four records the account is made of; a balance or a history that cannot be read
    is a note."""
    jobs: api.JobList = client.call_blocking(api.ListJobs())
    escrows: api.EscrowList = client.call_blocking(api.RewardList())
    balance: api.Balance | None = None
    note = ""
    try:
        balance = client.call_blocking(api.WalletBalance(), timeout=90)
    except EngineError as exc:
        note = exc.message
    if balance is not None and balance.ntx_units is None:
        note = "the NTX token is not known here (set [payments] ntx_policy_id)"
    recharges: api.RechargeList | None = None
    recharges_note = ""
    try:
        recharges = client.call_blocking(api.WalletRecharges(), timeout=90)
    except EngineError as exc:
        recharges_note = exc.message
    return build(jobs.jobs, escrows.escrows, balance, note, recharges, recharges_note)


def _account(args: argparse.Namespace, client: EngineClient) -> None:
    account = read_account(client)
    if getattr(args, "json", False):
        show_json(account.to_json())
    else:
        show(to_text(account))
    return None


RUNNERS: dict[str, Any] = {"account": _account}


def to_text(account: Account) -> str:
    lines: list[str] = []
    if account.balance_units is None:
        lines.append(f"balance    unknown: {account.balance_note or 'not read'}")
    else:
        lines.append(f"balance    {format_ntx(account.balance_units)}")
    lines += recharge_lines(account)
    lines.append(
        f"jobs       {format_ntx(account.paid_units, 'paid')} · "
        f"{format_ntx(account.refunded_units, 'refunded')} · "
        f"{format_ntx(account.locked_units, 'locked')} still"
    )
    if account.consumption:
        lines.append("consumption")
    for c in account.consumption:
        lines.append(
            f"  {c.job_id}  {c.spec or '-'}  {c.state}  machine time {machine_time(c.machine_ms)}"
        )
        lines.append(
            f"    {amount(c.locked_units, 'locked')} · {amount(c.metered_units, 'metered')} · "
            f"{amount(c.paid_units, 'paid')} · {amount(c.refunded_units, 'refunded')}"
        )
        lines.append(f"    lock tx {c.lock_tx or '-'}  settle tx {c.settle_tx or '-'}")
    if account.earnings:
        lines.append(f"earnings   {format_ntx(account.earned_units, 'paid')} to this node")
        for day in account.per_spec_day:
            lines.append(
                f"  {day.day}  {day.spec}  {day.jobs} job(s)  "
                f"{machine_time(day.machine_ms)}  {format_ntx(day.paid_units, 'paid')}"
            )
        for e in account.earnings:
            lines.append(
                f"  {e.job_id}  {e.spec or '-'}  {e.state}  {amount(e.paid_units, 'paid')}"
                f"  settle tx {e.settle_tx or '-'}"
            )
    return "\n".join(lines)


def recharge_lines(account: Account) -> list[str]:
    """The recharges: each transfer from the chain's history, or the derived sum and why."""
    if not account.recharges_read:
        if account.recharged_units is None:
            return []
        return [
            f"recharges  {format_ntx(account.recharged_units)} arrived in all "
            "(derived: balance + locked ever - refunded - earned; the wallet's history was "
            f"not read: {account.recharges_note or 'no chain backend'})"
        ]
    older = "" if account.recharges_complete else " (older transactions not read)"
    lines = [
        f"recharges  {format_ntx(account.recharged_units or 0)} arrived in all, "
        f"{len(account.recharges)} transfer(s){older}"
    ]
    for r in account.recharges:
        lines.append(
            f"  {when(r.at)}  {r.tx_hash}  {format_ntx(r.amount_units, r.kind)}  "
            f"from {sender(r.from_addresses)}"
        )
    return lines


def when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(at)) + " UTC" if at else "-"


def sender(addresses: tuple[str, ...]) -> str:
    """Who sent a recharge: its addresses as the chain shows them, or the ledger's faucet."""
    return ", ".join(safe(a) for a in addresses) if addresses else "the faucet (no inputs)"
