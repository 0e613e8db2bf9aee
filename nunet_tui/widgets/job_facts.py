"""The job view's words: its facts, where its money is, what cancelling means, a traceback.

Pure functions of a ``JobInfo`` (and its escrow, and "now"): the job detail screen shows
them, and tests read them without a screen.
"""

from __future__ import annotations

import time

from textual.content import Content

from engine.api import EscrowInfo, JobInfo
from nunet_tui.format import safe, thousands
from nunet_tui.viewmodels.money import (
    cancel_split,
    job_figures,
    machine_time,
    price_text,
    settle_tx,
    summary,
)
from nunet_tui.viewmodels.steps import gang_facts, step_facts
from nunet_tui.widgets import escrow_view
from nunet_tui.widgets.job_log import clean_line
from nunet_tui.widgets.job_state import FAILED_STATES, job_name, runs_as
from oracle_client.ntx import format_ntx

TAIL_LINES = 8  # of a traceback, under the facts


def traceback_tail(lines: list[str], limit: int = TAIL_LINES) -> list[str]:
    """The end of the last Python traceback in ``lines`` (else the last lines)."""
    start = None
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith("Traceback (most recent call last)"):
            start = index
            break
    chosen = lines[start:] if start is not None else lines
    return [clean_line(line) for line in chosen[-limit:]]


def cancel_text(job: JobInfo, escrow: EscrowInfo | None, now: float) -> Content:
    """What cancelling now means, money first: paid for the machine time so far, the rest of
    the lock refunded (a job that never started pays nothing)."""
    head = Content.assemble("The provider stops ", (job_name(job), "bold"), " now. ")
    split = cancel_split(job, escrow, now)
    if split is None:
        return Content.assemble(head, "What it has printed and metered so far is kept.")
    paid, refunded = split
    if job.started_at is None:
        return Content.assemble(
            head,
            "It has not started: nothing is paid, and ",
            (format_ntx(refunded, "refunded"), "bold"),
            " to you.",
        )
    elapsed = max(int(now * 1000) - int(job.started_at * 1000), 0)
    price = price_text(job)
    return Content.assemble(
        head,
        f"For the {machine_time(elapsed)} it ran" + (f" at {price}" if price else "") + ": ",
        (format_ntx(paid, "paid"), "bold $text-warning"),
        " to the provider, ",
        (format_ntx(refunded, "refunded"), "bold $text-success"),
        f" to you (of {format_ntx(paid + refunded, 'locked')}; the provider's signed machine "
        "time decides the last base units). Its output so far is kept.",
    )


def facts(
    job: JobInfo, escrow: EscrowInfo | None = None, now: float | None = None
) -> list[tuple[str, Content | str]]:
    rows: list[tuple[str, Content | str]] = []
    if job.role == "consumer":
        rows.append(("Provider", safe(job.provider) or "not chosen yet"))
    else:
        rows.append(("Consumer", safe(job.consumer)))
    rows.append(("Runs as", runs_as(job)))
    script = job.spec.script_url or (job.spec.git.url if job.spec.git else "")
    rows.append(("Script", safe(script)))
    if price := price_text(job):
        rows.append(("Price", price))
    if money := summary(job_figures(job, escrow, now)):
        rows.append(("NTX", money))
    if escrow is not None:
        rows.append(("Escrow", escrow_fact(escrow)))
        if refund := escrow_view.refund_row(escrow, now or time.time(), "F"):
            rows.append(refund)
    m = job.metering
    if m is not None:
        rows.append(
            (
                "Metering",
                f"{m.wall_s:.1f} s wall · {m.mticks:,.0f} MTicks CPU ({m.cpu_s:.1f} s) · "
                f"{m.ram_mb_s:,.0f} MB·s RAM (peak {m.peak_ram_mb:,.0f} MB)",
            )
        )
    rows += step_facts(job, now or time.time())  # issue 25 §1: each step and its replicas
    rows += gang_facts(job)  # issue 25 §2: a distributed step's rank, and its gang
    if job.state not in FAILED_STATES:
        if job.reason:
            rows.append(("Reason", safe(job.reason)))
        if job.exit_code is not None and job.state != "completed":
            rows.append(("Exit code", str(job.exit_code)))
    if job.results_sha256:
        where = (
            Content.assemble("fetched · ", ("o", "bold $text-accent"), " to unpack and view")
            if job.results_dir
            else Content("on the provider, being fetched")
        )
        rows.append(
            (
                "Results",
                Content.assemble(
                    f"{thousands(job.results_size)} bytes · sha256 {job.results_sha256[:12]}… · ",
                    where,
                ),
            )
        )
    return rows


def escrow_fact(escrow: EscrowInfo) -> Content:
    """``✓ paid · lock 6fee1b3d…b7b6 · settle 91ac…``: where the money is."""
    parts: list[Content | str] = [
        escrow_view.state_text(escrow),
        f" · lock {escrow_view.short_hash(escrow.lock_tx)}",
    ]
    if tx := settle_tx(escrow):
        parts.append(f" · settle {escrow_view.short_hash(tx)}")
    if escrow.error:
        parts.append(Content.styled(f" · {escrow_view.one_line(escrow.error)}", "$text-warning"))
    return Content.assemble(*parts)


__all__ = ["cancel_text", "escrow_fact", "facts", "traceback_tail"]
