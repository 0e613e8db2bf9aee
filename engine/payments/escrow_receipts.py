"""Escrows, third layer: the receipt both peers sign (the provider's, the consumer's
countersignature, each checked against the job and its metering), and a refund asked on
this node's word alone (a provider that never ran the job, or vanished).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Literal

import msgspec

from engine import api
from engine.domain.charges import charge_units
from engine.errors import EngineError
from engine.payments.escrow_lock import EscrowLocks
from engine.payments.records import EscrowRecord
from oracle_client import billing
from oracle_client.ntx import format_ntx

log = logging.getLogger("nunet.payments.escrow")

# What a receipt may bill over the time this node watched the job run (both ends on this
# node's clock, issue 20 §7): more than that (or than the provider's Updates told) and the
# consumer offers to sign for what it watched (or was told). The start's Update may reach us
# later than the end's on a slow link, so an honest provider may get an offer; it signs one
# within its own [payments] counter_tolerance_s (and COUNTER_TOLERANCE_SHARE) of its
# receipt. A flat second, not a share: a short job's bill does not grow with it.
COUNTER_SLACK_MS = 1000


COUNTER_TOLERANCE_SHARE = 0.02


def fault_of(state: str, exit_code: int | None, started: bool) -> str:
    """Whose fault a job's end was, as both peers can work out from what they both saw."""
    if state == "completed":
        return "none"
    if state in ("cancelled",):
        return "consumer"
    if state in ("oom", "timeout") or (state == "failed" and exit_code is not None and started):
        return "consumer"  # the job's own code or its declared limits ended it
    return "provider"  # could not start it, or stopped it (restart without a checkpoint)


def _offer(receipt: Any, machine_ms: int) -> Any:
    """``receipt`` billing at most ``machine_ms`` (unsigned), its charge made anew."""
    subtasks = billing.shortened(receipt.subtasks, machine_ms)
    charge = billing.charge(
        receipt.price_units_hour,
        billing.machine_time_ms(subtasks),
        min_charge=receipt.min_charge,
        cap=receipt.amount,
        started=receipt.started,
    )
    return msgspec.structs.replace(receipt.unsigned(), subtasks=subtasks, charge=charge)


def billing_fields(job: api.JobInfo, amount: int) -> dict[str, Any]:
    """The receipt's billing fields for ``job`` (issue 12): its spec's price and minimum
    charge, one subtask with each run a replica (to its end, or now), and the charge.
    A job quoted before specs existed (no price) is charged the whole lock, as before."""
    if job.price_units_hour is None:
        price, min_charge = 0, amount
    else:
        price, min_charge = job.price_units_hour, job.min_charge_units
    # Each run its own replica (engine/jobs/runs.py): the downtime between a crash and a
    # resume, and the work redone after the checkpoint, are in none of them.
    # A job with steps: one subtask per step, each of its replicas that started one replica.
    groups = job.subtask_spans_ms(time.time())
    spans = [span for group in groups for span in group]
    subtasks = billing.runs(spans) if not job.steps else billing.grouped(groups)
    # The one charge every figure of the job shows (engine/domain/charges.py, issue 20 §9).
    charge = charge_units(job, billing.machine_time_ms(subtasks), cap=amount)
    if charge is None or not spans:  # no price: the whole lock; never started: nothing
        charge = billing.charge(price, 0, min_charge=min_charge, cap=amount, started=bool(spans))
    return {
        "spec": (job.resource_spec or "")[:64],
        "price_units_hour": price,
        "min_charge": min_charge,
        "subtasks": subtasks,
        "charge": charge,
    }


def _metering(job: api.JobInfo) -> Any:
    from oracle_client.escrow import receipt as rc

    metering = job.metering
    return rc.Metering(
        wall_s=metering.wall_s if metering else 0.0,
        cpu_s=metering.cpu_s if metering else 0.0,
        gpu_s=metering.gpu_s if metering else 0.0,
        max_memory_mb=metering.peak_ram_mb if metering else 0.0,
    )


class EscrowReceipts(EscrowLocks):
    """Receipts: made, countersigned, checked, kept."""

    def provider_receipt(self, job: api.JobInfo) -> str:
        """The provider's signed receipt for a finished paid job ("" for an unpaid one)."""
        from oracle_client.escrow import receipt as rc

        record = self.get(job.job_id)
        if record is None or record.info.role != "provider":
            return ""
        if record.receipt:
            return record.receipt
        started = job.started_at is not None
        receipt = rc.Receipt(
            job_id=job.job_id,
            consumer_peer_id=record.consumer_peer,
            provider_peer_id=record.provider_peer,
            consumer_pkh=record.info.consumer_pkh,
            provider_pkh=record.info.provider_pkh,
            amount=record.info.amount,
            outcome=job.state,  # type: ignore[arg-type]
            fault=fault_of(job.state, job.exit_code, started),  # type: ignore[arg-type]
            started=started,
            metering=_metering(job),
            finished_at=int((job.finished_at or time.time()) * 1000),
            **billing_fields(job, record.info.amount),
        )
        signed = rc.sign(receipt, bytes(self.ctx.identity.signing_key))
        text = msgspec.json.encode(signed).decode()
        self.save(
            msgspec.structs.replace(record, receipt=text),
            outcome=job.state,
            metered_units=signed.charge,
        )
        self._wake.set()  # reported to the oracle at once: it then knows the provider stayed
        return text

    def provider_vanished(self, job: api.JobInfo) -> bool:
        """Consumer: the provider went silent mid-job and the grace passed. Our own receipt
        says so (interrupted, the provider's fault), and the refund is asked for at once; the
        oracle grants it only once the provider's liveness reports stopped past its grace (or
        never came), and never after the provider reported the job; "pending" until then, and
        the settle loop asks again. False: nothing to do (unpaid, or a receipt is already
        under way)."""
        return self._refund_alone(
            job,
            "the provider vanished mid-job: asking the oracle for the refund",
            "provider_vanished",
        )

    def never_ran(self, job: api.JobInfo) -> bool:
        """Consumer: the provider's final answer to our Confirm was a refusal (or our release):
        it will never run the job, so its lock comes back now, not at the deadline (issue 20
        §1). The same lone receipt as a vanished provider's: the oracle refunds it because
        that provider never reported the job, and would not if it had."""
        return self._refund_alone(
            job, "the provider refused the job: asking the oracle for the refund now", "never_ran"
        )

    def _refund_alone(
        self, job: api.JobInfo, why: str, kind: Literal["never_ran", "provider_vanished"]
    ) -> bool:
        from oracle_client.escrow import receipt as rc

        record = self.get(job.job_id)
        if record is None or record.info.role != "consumer" or record.info.state != "locked":
            return False
        if record.receipt:
            return False
        receipt = rc.Receipt(
            job_id=job.job_id,
            consumer_peer_id=record.consumer_peer,
            provider_peer_id=record.provider_peer,
            consumer_pkh=record.info.consumer_pkh,
            provider_pkh=record.info.provider_pkh,
            amount=record.info.amount,
            outcome="interrupted",
            fault="provider",
            started=job.started_at is not None,
            metering=_metering(job),
            finished_at=int(time.time() * 1000),
        )
        signed = rc.sign(receipt, bytes(self.ctx.identity.signing_key))
        text = msgspec.json.encode(signed).decode()
        self.save(
            msgspec.structs.replace(record, receipt=text),
            state="receipt",
            outcome="interrupted",
            error=why,
            refund_alone=kind,
        )
        log.info("job %s (provider %s): %s", job.job_id, job.provider, why)
        self._wake.set()
        return True

    async def countersign(self, job: api.JobInfo, text: str) -> str:
        """Consumer: check the provider's receipt against what we saw; our signature added.
        A receipt billing more machine time than this node watched the job run (plus
        COUNTER_SLACK_S) is not signed: our offer is, the same receipt billing what we
        watched (``billing.shortened``), for the provider to sign in turn (issue 20 §7)."""
        from oracle_client.escrow import receipt as rc

        record = self.get(job.job_id)
        if record is None or record.info.role != "consumer":
            raise EngineError("payment", f"job {job.job_id} has no escrow of ours")
        if record.receipt:
            return record.receipt
        try:
            receipt, bound_ms, why = self._checked_receipt(job, record, text)
        except EngineError as exc:
            # The one line a user reads in `reward list` and the escrow views; the lock then
            # comes back at the deadline (the oracle never decides on the provider's word).
            why = " ".join(exc.message.split())[:300]
            self.save(record, error=f"not countersigning the provider's receipt: {why}")
            raise
        key = bytes(self.ctx.identity.signing_key)
        if receipt.machine_ms > bound_ms:
            offer = _offer(receipt, bound_ms)
            self.save(
                record,
                error=f"offered to sign for {offer.machine_ms / 1000:.1f} s of machine time "
                f"({format_ntx(offer.charge)}): the provider's receipt bills "
                f"{receipt.machine_ms / 1000:.1f} s, {why}; waiting for the provider's "
                "signature",
            )
            return msgspec.json.encode(rc.sign(offer, key)).decode()
        signed = rc.sign(receipt, key)
        text = msgspec.json.encode(signed).decode()
        record = self.keep(record, receipt=text)
        self.save(record, state="receipt", outcome=job.state, metered_units=signed.charge, error="")
        self._wake.set()
        return text

    def offer_signed(self, job: api.JobInfo, text: str) -> str:
        """Consumer: the provider signed our offer (its answer ``Countersigned``); "" when
        kept (the receipt both signed, as any other), else why not."""
        from oracle_client.escrow import receipt as rc

        record = self.get(job.job_id)
        if record is None or record.info.role != "consumer":
            return f"job {job.job_id} has no escrow of ours"
        if record.receipt:
            return ""
        try:
            receipt = msgspec.json.decode(text.encode(), type=rc.Receipt)
            rc.verify(receipt)  # our own signature included: it is an offer this node made
        except (msgspec.DecodeError, msgspec.ValidationError, rc.ReceiptError) as exc:
            return f"the signed offer is not valid: {exc}"
        if receipt.job_id != job.job_id:
            return "the signed offer is another job's"
        record = self.keep(record, receipt=text)
        self.save(
            record, state="receipt", outcome=job.state, metered_units=receipt.charge, error=""
        )
        self._wake.set()
        return ""

    def receipt_refused(self, job_id: str, reason: str) -> None:
        """Consumer: the provider refused our countersignature or our offer: said on the
        escrow (its lock comes back at the deadline unless a receipt is agreed before)."""
        record = self.get(job_id)
        if record is not None and not record.receipt:
            why = " ".join(reason.split())[:300]
            self.save(record, error=f"the provider refused our receipt: {why}")

    def _checked_receipt(
        self, job: api.JobInfo, record: EscrowRecord, text: str
    ) -> tuple[Any, int, str]:
        """The provider's receipt if it is this job's as this node knows it, else why not
        (EngineError); with it the most machine time this node signs for, and why."""
        from oracle_client.escrow import receipt as rc

        try:
            receipt = msgspec.json.decode(text.encode(), type=rc.Receipt)
            rc.verify_signature(receipt, "provider")
        except (msgspec.DecodeError, msgspec.ValidationError, rc.ReceiptError) as exc:
            raise EngineError("payment", f"the provider's receipt is not valid: {exc}") from None
        started = job.started_at is not None
        expected = {
            "job_id": job.job_id,
            "consumer_peer_id": record.consumer_peer,
            "provider_peer_id": record.provider_peer,
            "consumer_pkh": record.info.consumer_pkh,
            "provider_pkh": record.info.provider_pkh,
            "amount": record.info.amount,
            "outcome": job.state,
            "fault": fault_of(job.state, job.exit_code, started),
            "started": started,
        }
        ours = billing_fields(job, record.info.amount)
        for name in ("price_units_hour", "min_charge"):
            expected[name] = ours[name]
        for name, value in expected.items():
            if getattr(receipt, name) != value:
                raise EngineError(
                    "payment",
                    f"the provider's receipt says {name} = {getattr(receipt, name)!r}; "
                    f"this node's record says {value!r}",
                )
        # What this node will sign for: the machine time the provider's Updates told, and
        # where this node watched the job start and end (consumer.py), no more than that on
        # its own clock (the Updates' times are the provider's own word).
        told_ms = billing.machine_time_ms(ours["subtasks"])
        bound_ms, why = told_ms, f"its updates told {told_ms / 1000:.1f} s"
        if job.seen_started_at is not None and job.seen_finished_at is not None:
            watched_ms = max(0, int((job.seen_finished_at - job.seen_started_at) * 1000))
            # Replicas of a step run at once: each may bill the whole watched time.
            replicas = job.spec.most_replicas()
            if watched_ms * replicas + COUNTER_SLACK_MS < bound_ms:
                bound_ms = watched_ms * replicas + COUNTER_SLACK_MS
                why = f"this node watched the job run {watched_ms / 1000:.1f} s"
                why += f" (x {replicas} replicas)" if replicas > 1 else ""
        return receipt, bound_ms, why

    def accept_countersigned(self, job_id: str, consumer_peer: str, text: str) -> str:
        """Provider: the consumer's countersignature, or its offer (our receipt billing less
        machine time, signed by the consumer alone), which we sign when it is at most
        ``[payments] counter_tolerance_s`` (and 2 %) below ours; "" when accepted, else why
        not. What was agreed is then ``kept_receipt``."""
        from oracle_client.escrow import receipt as rc

        record = self.get(job_id)
        if record is None or record.info.role != "provider" or not record.receipt:
            return "no receipt of this job to countersign"
        if record.consumer_peer != consumer_peer:
            return "this job belongs to another consumer"
        if record.info.state != "verified":
            return ""  # already countersigned: a repeat
        try:
            receipt = msgspec.json.decode(text.encode(), type=rc.Receipt)
            rc.verify_signature(receipt, "consumer")
        except (msgspec.DecodeError, msgspec.ValidationError, rc.ReceiptError) as exc:
            return f"the receipt is not valid: {exc}"
        ours = msgspec.json.decode(record.receipt.encode(), type=rc.Receipt)
        if receipt.unsigned() != ours.unsigned():
            reason = self._offer_problem(ours, receipt)
            if reason:
                return reason
            receipt = rc.sign(
                msgspec.structs.replace(receipt, provider_signature=""),
                bytes(self.ctx.identity.signing_key),
            )
        try:
            rc.verify(receipt)
        except rc.ReceiptError as exc:
            return f"the receipt is not valid: {exc}"
        record = self.keep(record, receipt=msgspec.json.encode(receipt).decode())
        self.save(record, state="receipt", metered_units=receipt.charge)
        self._wake.set()
        return ""

    def _offer_problem(self, ours: Any, offer: Any) -> str:
        """Why we do not sign the consumer's offer ("": we do)."""
        same = msgspec.structs.replace(offer.unsigned(), subtasks=ours.subtasks, charge=ours.charge)
        if same != ours.unsigned():
            return "the countersigned receipt differs from the one we signed"
        if billing.shortened(ours.subtasks, offer.machine_ms) != offer.subtasks:
            return "the offer does not bill our runs, shortened from their ends"
        tolerance_s = self.ctx.settings.payments.counter_tolerance_s
        floor = ours.machine_ms - int(
            tolerance_s * 1000 + COUNTER_TOLERANCE_SHARE * ours.machine_ms
        )
        if offer.machine_ms < floor:
            return (
                f"the consumer offers {offer.machine_ms / 1000:.1f} s of the "
                f"{ours.machine_ms / 1000:.1f} s of machine time billed: more than "
                f"{tolerance_s:g} s and {COUNTER_TOLERANCE_SHARE:.0%} below "
                "(payments.counter_tolerance_s)"
            )
        return ""
