"""A paid job's money, on both sides: lock, check, receipt, claim, refund.

The steps, and where the job protocol calls them:

- consumer, between the provider's quote and the confirm: the oracle registers the terms
  (``request-service``) and signs them; the consumer locks the amount at the escrow script
  with an inline datum naming both parties, the oracle's key, the job and a deadline, and sends
  the signed terms and the lock's tx id in ``Confirm``;
- provider, on ``Confirm``: it checks the oracle's signature on the terms, that the oracle is
  the one it trusts and that the chain holds exactly that lock, before it runs anything;
- provider, while the job runs: a signed "still running" report to the oracle at the start
  and every ``[payments] liveness_interval_s`` (``report_liveness``): the oracle's own
  evidence that the provider did not vanish, so it never takes the consumer's word alone;
- provider, when the job ends: a receipt of the outcome and the metering, signed with its peer
  key, travels in the last ``Update``; the consumer checks it against what it saw, countersigns
  it and sends it back (``Countersign``);
- then whoever the oracle's rules pay asks it for the release signature and spends the lock:
  the provider claims, the consumer takes a refund. Without a decision (oracle down, a peer
  that never countersigns) the consumer can take the lock back after the deadline;
- consumer, when its provider vanished mid-job (silent past the grace, jobs/consumer.py): its
  own receipt says "interrupted, the provider's fault" and asks the oracle for the refund at
  once, which the oracle grants only once the provider's liveness reports stopped (past the
  oracle's grace) or never came, and never after the provider reported the job's end.

Every step is written to the store before it is acted on. A claim or refund transaction is
kept (CBOR) before it is submitted, so after a restart the same transaction is sent again or
found spent, and one that can never land is replaced by a fresh one from the same decision
(settle.py): a claim is never lost and never made twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec
import trio

from engine import api
from engine.context import NodeContext
from engine.domain.charges import charge_units
from engine.errors import EngineError
from engine.payments.records import EscrowRecord
from engine.ports import WalletPort
from oracle_client import billing
from oracle_client.ntx import ntx_of, units_of

if TYPE_CHECKING:
    from oracle_client.client import OracleClient

__all__ = ["EscrowRecord", "Escrows"]  # EscrowRecord: the row's type, as before

log = logging.getLogger("nunet.payments.escrow")
T = TypeVar("T")

LOCK_WAIT_S = 60.0  # how long a provider waits for the consumer's lock to show on chain
LOCK_POLL_S = 1.0
SETTLE_SOON_S = 2.0  # ... or this often while a consumer waits to see the provider's claim
SETTLE_BACKOFF_S = 1.0  # a failing escrow is tried again after 1, 2, 4 ... s
SETTLE_BACKOFF_MAX_S = 30.0
DECIDABLE_SLACK_S = 0.5  # after the time the oracle named: its clock and ours differ a little
Role = Literal["consumer", "provider"]


def fault_of(state: str, exit_code: int | None, started: bool) -> str:
    """Whose fault a job's end was, as both peers can work out from what they both saw."""
    if state == "completed":
        return "none"
    if state in ("cancelled",):
        return "consumer"
    if state in ("oom", "timeout") or (state == "failed" and exit_code is not None and started):
        return "consumer"  # the job's own code or its declared limits ended it
    return "provider"  # could not start it, or stopped it (restart without a checkpoint)


class Escrows:
    """Implements ``EscrowPort`` for the jobs; ``wallet``: this node's wallet and chain."""

    def __init__(self, ctx: NodeContext, *, wallet: WalletPort) -> None:
        self.ctx = ctx
        self.wallet = wallet
        self._locks: dict[str, trio.Lock] = {}
        # One lock tx built and sent at a time: concurrent submits would pick the same wallet
        # outputs, and all but one would be refused by the chain.
        self._spending = trio.Lock()
        self._oracle_key: str | None = None
        self._wake = trio.Event()

    # --- configuration -------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self.ctx.payments_enabled

    def payment_address(self) -> str:
        return self.wallet.wallet().address

    def oracle(self) -> OracleClient:
        from oracle_client.client import OracleClient

        return OracleClient(self.ctx.settings.payments.oracle_url, timeout=10.0, retries=2)

    async def oracle_key(self) -> str:
        """The key of the oracle this node trusts: the one at its configured URL."""
        if self._oracle_key is None:
            async with self.oracle() as oracle:
                info = await _oracle_call(oracle.info)
            self._oracle_key = info.oracle_key
        return self._oracle_key

    async def blocking(self, fn: Callable[[], T]) -> T:
        """pycardano and Blockfrost block on HTTP: off the trio thread."""
        return await trio.to_thread.run_sync(fn)

    def _lock_for(self, job_id: str) -> trio.Lock:
        return self._locks.setdefault(job_id, trio.Lock())

    # --- the book --------------------------------------------------------------------------

    def get(self, job_id: str) -> EscrowRecord | None:
        raw = self.ctx.store.get_escrow(job_id)
        return None if raw is None else msgspec.json.decode(raw, type=EscrowRecord)

    def save(self, record: EscrowRecord, **changes: Any) -> EscrowRecord:
        info = msgspec.structs.replace(record.info, updated_at=time.time(), **changes)
        record = msgspec.structs.replace(record, info=info)
        self.ctx.store.save_escrow(info.job_id, info.state, msgspec.json.encode(record))
        self.ctx.emit(api.EscrowChanged(at=info.updated_at, escrow=info))
        return record

    def awaiting_receipt(self, job_id: str) -> bool:
        record = self.get(job_id)
        return record is not None and record.info.state == "locked"

    def keep(self, record: EscrowRecord, **evidence: str) -> EscrowRecord:
        record = msgspec.structs.replace(record, **evidence)
        return self.save(record)

    def listing(self) -> api.EscrowList:
        escrows = tuple(
            msgspec.json.decode(raw, type=EscrowRecord).info
            for raw in self.ctx.store.list_escrows()
        )

        def total(role: str, states: tuple[str, ...], part: str) -> float:
            # A settled split: its paid or refunded part (the whole amount for rows settled
            # before issue 12, which have neither).
            return ntx_of(
                sum(
                    e.settled()[0 if part == "paid" else 1]
                    for e in escrows
                    if e.role == role and e.state in states
                )
            )

        settled = ("claimed", "paid_out", "refunded")
        return api.EscrowList(
            escrows=escrows,
            earned_ntx=total("provider", settled, "paid"),
            spent_ntx=total("consumer", settled, "paid"),
            locked_ntx=ntx_of(sum(e.amount for e in escrows if e.state in api.ESCROW_OPEN_STATES)),
            refunded_ntx=total("consumer", settled, "refunded"),
        )

    # --- consumer: lock before confirming --------------------------------------------------

    async def lock(
        self,
        job_id: str,
        provider_peer: str,
        provider_address: str,
        total_ntx: float,
        expected_minutes: float,
        slots: int = 1,
    ) -> tuple[str, str]:
        """Register the terms with the oracle and lock the amount: (signed terms, lock tx id)."""
        from oracle_client.models import ProviderOffer, ServiceRequest, sign_service_request

        wallet = self.wallet.wallet()
        amount = units_of(total_ntx)
        margin = self.ctx.settings.payments.deadline_margin_s
        deadline_ms = int((time.time() + expected_minutes * 120 + margin) * 1000)
        if not provider_address:
            raise EngineError("payment", "the provider quoted no payment address: it has no wallet")
        try:
            request = ServiceRequest(
                job_id=job_id,
                network=wallet.network,
                consumer_peer_id=self.ctx.identity.peer_id,
                consumer_address=wallet.address,
                budget=amount,
                deadline=deadline_ms,
                offers=[
                    ProviderOffer(
                        peer_id=provider_peer,
                        address=provider_address,
                        price=amount,
                        slots=max(1, min(slots, 1024)),
                    )
                ],
                signature="00" * 64,
            )
            request = sign_service_request(request, bytes(self.ctx.identity.signing_key))
        except (ValueError, msgspec.ValidationError) as exc:
            # A provider's address of the other network (addr1 on a test channel...).
            raise EngineError("payment", f"cannot pay this provider: {exc}") from None
        async with self.oracle() as oracle:
            quote = await _oracle_call(lambda: oracle.request_service(request))
        if quote.oracle_key != await self.oracle_key():
            raise EngineError("payment", "the oracle answered with a key it does not advertise")
        if quote.provider_peer_id != provider_peer or quote.estimated_price != amount:
            raise EngineError("payment", "the oracle registered other terms than the quote's")
        record = EscrowRecord(
            info=api.EscrowInfo(
                job_id=job_id,
                role="consumer",
                state="locking",
                amount=amount,
                ntx=ntx_of(amount),
                deadline_ms=quote.deadline,
                consumer_pkh=quote.consumer_pkh,
                provider_pkh=quote.provider_pkh,
                oracle_key=quote.oracle_key,
                created_at=time.time(),
            ),
            consumer_peer=self.ctx.identity.peer_id,
            provider_peer=provider_peer,
            quote=msgspec.json.encode(quote).decode(),
        )
        record = self.save(record)
        tx_id = await self._submit_lock(record)
        return record.quote, tx_id

    async def _submit_lock(self, record: EscrowRecord) -> str:
        from pycardano import Address

        from oracle_client.escrow import transactions as txs
        from oracle_client.escrow.contract.datum import EscrowDatum, staking_of

        payments = self.wallet
        context = await payments.chain_context()
        key = await payments.payment_signing_key()
        info = record.info
        address = Address.from_primitive(payments.wallet().address)
        datum = EscrowDatum(
            consumer=bytes.fromhex(info.consumer_pkh),
            # The wallet's own base address: a split pays the consumer's share there.
            consumer_stake=staking_of(address),
            provider=bytes.fromhex(info.provider_pkh),
            oracle_key=bytes.fromhex(info.oracle_key),
            job_id=info.job_id.encode(),
            amount=info.amount,
            deadline=info.deadline_ms,
        )
        unit = await self.ntx_unit()

        def build_and_submit() -> str:
            tx = txs.lock(context, signing_key=key, address=address, datum=datum, ntx=unit)
            return txs.submit(context, tx)

        try:
            async with self._spending:
                tx_id = await self.blocking(build_and_submit)
        except txs.TxError as exc:
            self.save(record, state="void", error=f"lock failed: {exc}")
            raise EngineError("payment", f"could not lock {_units(info.amount)}: {exc}") from None
        self.save(record, state="locked", lock_tx=tx_id, error="")
        log.info("job %s: locked %s in escrow (tx %s)", info.job_id, _units(info.amount), tx_id)
        return tx_id

    async def ntx_unit(self) -> str:
        from engine.payments import chain

        unit = await self.blocking(lambda: chain.ntx_unit(self.ctx.settings.payments))
        if unit is None:
            raise EngineError("config", "the NTX token is not known: set [payments] ntx_policy_id")
        return unit.unit

    # --- provider: check the lock before running ---------------------------------------------

    async def verify_lock(
        self, job_id: str, consumer_peer: str, total_ntx: float, terms: str, lock_tx: str
    ) -> str:
        """Why the chain does not hold the lock these terms promise ("": it does)."""
        try:
            return await self._verify_lock(job_id, consumer_peer, total_ntx, terms, lock_tx)
        except EngineError as exc:  # no wallet, oracle or chain here: say so to the consumer
            return f"the provider cannot check the escrow now: {exc.message}"

    async def _verify_lock(
        self, job_id: str, consumer_peer: str, total_ntx: float, terms: str, lock_tx: str
    ) -> str:
        from oracle_client.models import ServiceQuote

        if not terms or not lock_tx:
            return "this provider runs paid jobs only: lock the quoted NTX in escrow first"
        try:
            quote = msgspec.json.decode(terms.encode(), type=ServiceQuote)
            quote.verify()
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
            return f"the escrow terms are not valid: {exc}"
        wallet = self.wallet.wallet()
        problems = [
            (quote.oracle_key != await self.oracle_key(), "the terms are signed by another oracle"),
            (quote.job_id != job_id, "the terms are for another job"),
            (quote.provider_peer_id != self.ctx.identity.peer_id, "the terms name another peer"),
            (quote.provider_pkh != wallet.payment_key_hash, "the terms pay another wallet"),
            (quote.consumer_peer_id != consumer_peer, "the terms name another consumer"),
            (quote.estimated_price != units_of(total_ntx), "the terms differ from the quote"),
            (quote.deadline < (time.time() + 60) * 1000, "the escrow's deadline is too close"),
        ]
        for bad, reason in problems:
            if bad:
                return reason
        found = await self._wait_for_lock(quote, lock_tx)
        if not found:
            return f"no matching escrow lock on the chain (tx {lock_tx[:16]}...)"
        record = EscrowRecord(
            info=api.EscrowInfo(
                job_id=job_id,
                role="provider",
                state="verified",
                amount=quote.estimated_price,
                ntx=ntx_of(quote.estimated_price),
                deadline_ms=quote.deadline,
                consumer_pkh=quote.consumer_pkh,
                provider_pkh=quote.provider_pkh,
                oracle_key=quote.oracle_key,
                lock_tx=lock_tx,
                created_at=time.time(),
            ),
            consumer_peer=consumer_peer,
            provider_peer=self.ctx.identity.peer_id,
            quote=terms,
        )
        self.save(record)
        return ""

    async def _wait_for_lock(self, quote: Any, lock_tx: str) -> bool:
        from oracle_client.escrow import transactions as txs

        context = await self.wallet.chain_context()
        unit = txs.NtxUnit.parse(await self.ntx_unit())

        def matching() -> bool:
            for escrow in txs.find_escrows(context, quote.job_id):
                datum = escrow.datum
                if (
                    escrow.utxo.input.transaction_id.payload.hex() == lock_tx
                    and datum.consumer.hex() == quote.consumer_pkh
                    and datum.provider.hex() == quote.provider_pkh
                    and datum.oracle_key.hex() == quote.oracle_key
                    and datum.amount == quote.estimated_price
                    and datum.deadline == quote.deadline
                    and unit.held_alone(escrow.utxo.output.amount, datum.amount)
                ):
                    return True
            return False

        with trio.move_on_after(LOCK_WAIT_S):
            while True:
                try:
                    if await self.blocking(matching):
                        return True
                except Exception as exc:  # the backend away for a moment: look again
                    log.info("looking for the lock of job %s: %s", quote.job_id, exc)
                await trio.sleep(LOCK_POLL_S)
        return False

    # --- receipts ----------------------------------------------------------------------------

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

    def lock_of(self, job_id: str) -> tuple[str, str]:
        """Consumer: (signed terms, lock tx) of a job's lock, as its Confirm carries them
        (("", "") when it has none)."""
        record = self.get(job_id)
        if record is None or record.info.role != "consumer":
            return "", ""
        return record.quote, record.info.lock_tx

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
                f"({_units(offer.charge)}): the provider's receipt bills "
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
            if watched_ms + COUNTER_SLACK_MS < bound_ms:
                bound_ms = watched_ms + COUNTER_SLACK_MS
                why = f"this node watched the job run {watched_ms / 1000:.1f} s"
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

    def kept_receipt(self, job_id: str) -> str:
        """The job's receipt as kept now (the one both signed, once they have)."""
        record = self.get(job_id)
        return record.receipt if record is not None else ""

    # --- provider: liveness while a paid job runs --------------------------------------------

    async def report_liveness(self, job_id: str) -> None:
        """Provider: tell the oracle every interval that we are running this paid job, until
        cancelled (the run ended). A failure is logged and tried again next interval: never
        raised, so it can never end the run."""
        from oracle_client.models import sign_liveness

        try:
            record = self.get(job_id)
        except Exception:  # a store that cannot be read: the run goes on, without reports
            log.exception("job %s: no liveness reports (its escrow cannot be read)", job_id)
            return
        if not self.enabled or record is None or record.info.role != "provider":
            return
        interval = self.ctx.settings.payments.liveness_interval_s
        failures = 0
        while True:
            try:
                report = sign_liveness(
                    job_id,
                    self.ctx.identity.peer_id,
                    int(time.time() * 1000),
                    bytes(self.ctx.identity.signing_key),
                )
                async with self.oracle() as oracle:
                    await _oracle_call(partial(oracle.report_liveness, report))
                failures = 0
            except Exception as exc:
                failures += 1
                text = exc.message if isinstance(exc, EngineError) else str(exc)
                if failures == 1 or failures % 20 == 0:  # not a line every interval for hours
                    log.warning("job %s: liveness to the oracle failed: %s", job_id, text)
            await trio.sleep(interval)

    # --- settling ---------------------------------------------------------------------------

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Settle what is open: after a restart, after the oracle came back, at the deadline.

        Each escrow that fails (the chain or the oracle unreachable, a tx refused, anything
        else) is retried on its own exponential backoff; no failure leaves this loop, so none
        can cancel the node's other services."""
        task_status.started()
        failures: dict[str, tuple[int, float]] = {}  # job id -> (failures in a row, retry at)
        # Open escrows are retried this often (the oracle down, a tx refused, a deadline on
        # the chain's clock); a receipt or a command wakes the loop sooner.
        every = self.ctx.settings.payments.settle_interval_s
        while True:
            soon = False
            now = trio.current_time()
            due = now + every
            # "undecided" too: a consumer's lock the oracle would not release comes back
            # after its deadline without anyone asking.
            for raw in self.ctx.store.list_escrows((*api.ESCROW_OPEN_STATES, "undecided")):
                record = msgspec.json.decode(raw, type=EscrowRecord)
                job_id = record.info.job_id
                count, retry_at = failures.get(job_id, (0, 0.0))
                if retry_at > now:
                    due = min(due, retry_at)
                    continue
                try:
                    info = await self.settle(job_id, automatic=True)
                except Exception as exc:
                    delay = min(SETTLE_BACKOFF_MAX_S, SETTLE_BACKOFF_S * 2**count)
                    failures[job_id] = (count + 1, trio.current_time() + delay)
                    due = min(due, trio.current_time() + delay)
                    if isinstance(exc, EngineError):
                        log.info("escrow of job %s: %s (again in %g s)", job_id, exc.message, delay)
                    elif count == 0:  # a bug, not the weather: its traceback once
                        log.exception("escrow of job %s: settling failed", job_id)
                    continue
                failures.pop(job_id, None)
                if info.state == "receipt" and info.decidable_at:
                    # The oracle said when it can decide (a vanished provider's grace): ask
                    # then, not a settle interval later.
                    left = info.decidable_at - time.time()
                    due = min(due, trio.current_time() + max(0.0, left) + DECIDABLE_SLACK_S)
                # The provider claims within seconds of the decision, and a submitted tx lands
                # within a block or two: look again soon.
                soon = soon or (
                    (info.state == "receipt" and info.reward_type == "withdraw")
                    or info.state in ("claiming", "refunding")
                )
            wait = SETTLE_SOON_S if soon else due - trio.current_time()
            with trio.move_on_after(max(0.0, min(wait, every))):
                await self._wake.wait()
            self._wake = trio.Event()

    async def settle(self, job_id: str, *, automatic: bool = False) -> api.EscrowInfo:
        """Move one escrow as far as it can go now; the reward commands and the loop call it."""
        from engine.payments import settle

        async with self._lock_for(job_id):
            record = self.get(job_id)
            if record is None:
                raise EngineError("not_found", f"no escrow for job {job_id}; `reward list`")
            record = await settle.advance(self, record, automatic=automatic)
            return record.info


# What a receipt may bill over the time this node watched the job run (both ends on this
# node's clock, issue 20 §7): more than that (or than the provider's Updates told) and the
# consumer offers to sign for what it watched (or was told). The start's Update may reach us
# later than the end's on a slow link, so an honest provider may get an offer; it signs one
# within its own [payments] counter_tolerance_s (and COUNTER_TOLERANCE_SHARE) of its
# receipt. A flat second, not a share: a short job's bill does not grow with it.
COUNTER_SLACK_MS = 1000
COUNTER_TOLERANCE_SHARE = 0.02


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


def _units(units: int) -> str:
    from oracle_client.ntx import format_ntx

    return format_ntx(units)


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
    spans = job.run_spans_ms(time.time())
    subtasks = billing.runs(spans)
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


async def _oracle_call(call: Callable[[], Any]) -> Any:
    """The oracle's errors as engine errors a user can act on."""
    from oracle_client.client import OracleError, OracleUnavailable

    try:
        return await call()
    except OracleUnavailable as exc:
        raise EngineError("oracle_unavailable", str(exc)) from None
    except OracleError as exc:
        raise EngineError("oracle", str(exc)) from None
