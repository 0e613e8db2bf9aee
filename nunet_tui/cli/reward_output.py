"""``nunet-tui reward …``: the escrow of paid jobs, like NuNet's reward commands.

``list`` shows every escrow on both sides with totals; ``claim JOB`` (provider) and
``refund JOB`` (consumer) settle one now instead of waiting for the engine's own retry loop.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from engine import api
from engine.client import EngineClient
from engine.domain.safe_text import safe
from nunet_tui.viewmodels.money import escrow_figures, escrow_totals
from nunet_tui.viewmodels.refund import refund_now
from oracle_client.ntx import format_ntx

# Settling waits for the oracle (with retries) and the chain: well past the default timeout.
SETTLE_TIMEOUT_S = 120.0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    reward = sub.add_parser("reward", help="NTX held in escrow for paid jobs: list, claim, refund")
    reward_sub = reward.add_subparsers(
        dest="reward_command", metavar="REWARD_COMMAND", required=True
    )
    reward_sub.add_parser("list", parents=[common], help="escrows of paid jobs, both roles")
    reward_sub.add_parser(
        "claim", parents=[common], help="provider: claim a finished job's NTX"
    ).add_argument("job_id")
    reward_sub.add_parser(
        "refund", parents=[common], help="consumer: take a job's locked NTX back"
    ).add_argument("job_id")


RUNNERS: dict[str, Any] = {
    "reward list": lambda a, c: _list(a, c),
    "reward claim": lambda a, c: _settle(c, api.RewardClaim(job_id=a.job_id)),
    "reward refund": lambda a, c: _refund(a, c),
}


def _refund(args: argparse.Namespace, client: EngineClient) -> api.EscrowInfo:
    """The lock back now; one line on stderr and exit 1 when it cannot come back yet, saying
    when and why as the job view does (viewmodels/refund.py)."""
    from engine.errors import EngineError

    info: api.EscrowInfo = _settle(client, api.RewardRefund(job_id=args.job_id))
    if info.role != "consumer" or info.state in ("refunded", "refunding", "paid_out"):
        return info
    status = refund_now(info, time.time())
    if status is not None and not status.ready:
        why = status.text
    elif status is not None:  # just asked: the oracle gave no time (an older oracle)
        why = f"the oracle has not decided yet: {safe(info.error) or info.state}"
    else:
        why = safe(info.error) or f"its escrow is {info.state}"
    raise EngineError("not_ready", f"job {info.job_id} is not refunded yet: {why}")


def _settle(client: EngineClient, command: api.Command) -> Any:
    return client.call_blocking(command, timeout=SETTLE_TIMEOUT_S)


def _list(args: argparse.Namespace, client: EngineClient) -> Any:
    """The escrows; as text, with what each spec earned each day (the jobs name the spec)."""
    listing: api.EscrowList = client.call_blocking(api.RewardList())
    if getattr(args, "json", False):
        return listing
    from nunet_tui.cli.output import show
    from nunet_tui.viewmodels.account import build
    from nunet_tui.viewmodels.money import machine_time

    jobs: api.JobList = client.call_blocking(api.ListJobs())
    lines = [_escrows_text(listing)]
    days = build(jobs.jobs, listing.escrows).per_spec_day
    if days:
        lines.append("earned per spec per day (UTC)")
        lines += [
            f"  {d.day}  {d.spec}  {d.jobs} job(s)  {machine_time(d.machine_ms)}  "
            f"{format_ntx(d.paid_units, 'paid')}"
            for d in days
        ]
    show("\n".join(lines))
    return None


def _escrows_text(result: api.EscrowList) -> str:
    if not result.escrows:
        return "no paid jobs yet"
    lines = [_row(escrow) for escrow in result.escrows]
    sums = escrow_totals(result.escrows)
    lines.append(
        f"earned {format_ntx(sums.earned, 'paid')} · spent {format_ntx(sums.spent, 'paid')} · "
        f"{format_ntx(sums.locked + sums.awaiting, 'locked')} · "
        f"{format_ntx(sums.refunded, 'refunded')}"
    )
    return "\n".join(lines)


def _escrow_text(result: api.EscrowInfo) -> str:
    lines = [_row(result)]
    if result.lock_tx:
        lines.append(f"  lock tx   {result.lock_tx}")
    if result.claim_tx:
        verb = "claim tx " if result.role == "provider" else "refund tx"
        lines.append(f"  {verb} {result.claim_tx}")
    deadline = time.strftime("%Y-%m-%d %H:%M", time.localtime(result.deadline_ms / 1000))
    lines.append(f"  deadline  {deadline}")
    if (refund := refund_now(result, time.time())) is not None:
        lines.append(f"  refund    {refund.short}")
    if result.error:
        lines.append(f"  last problem: {result.error}")
    return "\n".join(lines)


def _row(escrow: api.EscrowInfo) -> str:
    figures = escrow_figures(escrow)
    money = format_ntx(escrow.amount, "locked")
    if figures.paid is not None:
        money += f", {format_ntx(figures.paid, 'paid')}"
        money += f", {format_ntx(figures.refunded or 0, 'refunded')}"
    return f"{escrow.job_id}  {escrow.role:<8}  {escrow.state:<9}  {money}" + (
        f"  {escrow.outcome}" if escrow.outcome else ""
    )


# The escrow results this module formats (formatters.py merges every output module's TEXT).
TEXT: dict[type, Callable[[Any], str]] = {
    api.EscrowList: _escrows_text,
    api.EscrowInfo: _escrow_text,
}
