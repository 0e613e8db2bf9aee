"""What the operator is told: the node's events turned into notices, each once.

A ``JobChanged`` whose job reached a final state, an ``EscrowChanged`` that was claimed (a
reward paid to this provider) or refunded (NTX back to this consumer). Pure over the API's
events: the TUI uses ``NoticeFilter`` for its toasts and bell (nunet_tui/app.py), the engine's
notifier (engine/notify.py) for webhooks, commands and the desktop.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

from engine import api
from engine.domain.charges import metered_units
from engine.domain.safe_text import safe
from oracle_client.ntx import ESTIMATE, LOCKED, METERED, PAID, REFUNDED, format_ntx, json_key

SEEN = 4096  # notices remembered for telling each only once
MAX_REASON = 500  # a job's reason comes from its peer: bounded in every notice
NoticeKind = Literal["job_ended", "reward_paid", "refunded"]


@dataclass(frozen=True)
class Notice:
    kind: NoticeKind
    title: str
    text: str  # one line, escaped for a terminal
    payload: dict[str, Any]  # what the webhook and the command get, as JSON
    bad: bool = False  # a job that did not complete


def _job_payload(job: api.JobInfo) -> dict[str, Any]:
    """The job, and its figures in NTX base units, each under its kind's key: the price per
    machine-hour, the estimate, the lock and the metered charge its receipt signs
    (engine/domain/charges.py ``metered_units``)."""
    metering = job.metering
    metered = metered_units(job)
    return {
        "job_id": job.job_id,
        "name": job.spec.name,
        "role": job.role,
        "state": job.state,
        "reason": job.reason[:MAX_REASON],
        "exit_code": job.exit_code,
        "provider": job.provider,
        "consumer": job.consumer,
        "executor": job.executor,
        "price_units_hour": job.price_units_hour,
        json_key(ESTIMATE): job.estimate_units,
        json_key(LOCKED): job.lock_units,
        json_key(METERED): metered,
        "wall_s": metering.wall_s if metering else None,
        "gpu_s": metering.gpu_s if metering else None,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }


def _escrow_payload(escrow: api.EscrowInfo) -> dict[str, Any]:
    """The escrow's figures, each under its kind's key (``locked_units``, ``paid_units``...,
    oracle_client/ntx.py ``json_key``), NTX base units; ``amount_ntx_base_units`` is the lock,
    as before."""
    paid, refunded = escrow.settled()
    return {
        "job_id": escrow.job_id,
        "role": escrow.role,
        "state": escrow.state,
        "amount_ntx_base_units": escrow.amount,
        json_key(LOCKED): escrow.amount,
        json_key(METERED): escrow.metered_units,
        json_key(PAID): paid,
        json_key(REFUNDED): refunded,
        "tx": escrow.settle_tx or escrow.claim_tx,
        "outcome": escrow.outcome,
    }


class NoticeFilter:
    """Which events deserve a notice, each told once.

    A job counts when it reaches a final state; one that ended before ``since`` (a later save
    of an old job: results fetched, a receipt signed) was told by whoever watched then."""

    def __init__(self, since: float | None = None, node_id: str = "") -> None:
        self.since = time.time() if since is None else since
        self.node_id = node_id
        self._seen: OrderedDict[tuple[str, ...], None] = OrderedDict()

    def _first(self, key: tuple[str, ...]) -> bool:
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > SEEN:
            self._seen.popitem(last=False)
        return True

    def observe(self, event: api.Event) -> Notice | None:
        if isinstance(event, api.JobChanged):
            return self._job(event)
        if isinstance(event, api.EscrowChanged):
            return self._escrow(event)
        return None

    def _job(self, event: api.JobChanged) -> Notice | None:
        job = event.job
        if job.state not in api.TERMINAL_STATES:
            return None
        ended = job.finished_at or job.updated_at
        if ended < self.since - 1.0 or not self._first(("job", job.job_id)):
            return None
        label = safe(job.spec.name or job.job_id)[:80]
        side = "you bought" if job.role == "consumer" else "you ran"
        # The job's one metered figure, saying what it is (issue 20 §9: the metering's own
        # float, another figure than the receipt's, unlabelled).
        metered = metered_units(job)
        text = f"{label} ({side}): {job.state}"
        if metered:
            text += f" · {format_ntx(metered, METERED)}"
        if job.reason and job.state != "completed":
            text += f" · {safe(job.reason[:120])}"
        return Notice(
            kind="job_ended",
            title=f"Job {job.state}",
            text=text,
            payload=self._envelope("job_ended", event.at, job=_job_payload(job)),
            bad=job.state != "completed",
        )

    def _escrow(self, event: api.EscrowChanged) -> Notice | None:
        escrow = event.escrow
        paid, refunded = escrow.settled()
        # The settlement's own figure (issue 20 §9: this said the lock), and the lock's.
        if escrow.state == "claimed" and escrow.role == "provider":
            kind: NoticeKind = "reward_paid"
            title, figure = "Reward paid", format_ntx(paid, PAID)
        elif escrow.state == "refunded" and escrow.role == "consumer":
            kind, title, figure = "refunded", "Refund", format_ntx(refunded, REFUNDED)
        else:
            return None
        if not self._first(("escrow", escrow.job_id, escrow.state)):
            return None
        locked = format_ntx(escrow.amount, LOCKED)
        return Notice(
            kind=kind,
            title=title,
            text=f"{figure} (of {locked}) for job {safe(escrow.job_id)[:80]}",
            payload=self._envelope(kind, event.at, escrow=_escrow_payload(escrow)),
        )

    def _envelope(self, kind: str, at: float, **body: Any) -> dict[str, Any]:
        return {"event": kind, "at": at, "node": self.node_id, **body}
