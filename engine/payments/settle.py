"""Settling one escrow: the state machine behind `reward claim`, `reward refund` and the loop.

| side     | state     | what moves it on                                                    |
|----------|-----------|---------------------------------------------------------------------|
| consumer | locking   | the lock is found on chain (locked), or never got there (nothing spent) |
| consumer | locked    | the deadline passed without a decision: refund without the oracle   |
| both     | receipt   | the oracle's decision: the provider claims or the consumer refunds  |
| provider | claiming  | the kept claim tx is on chain (claimed), else it is sent again      |
| consumer | refunding | the kept refund tx is on chain (refunded), else it is sent again    |
| consumer | receipt   | the provider spent the lock (paid_out)                              |

The chain is the judge of "done": a lock that is no longer at the script address was spent,
and the kept tx says by whom. A kept tx is submitted again only while the lock is still there,
so a restart never makes a second claim.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import msgspec

from engine import api
from engine.errors import EngineError

if TYPE_CHECKING:
    from engine.payments.escrow import EscrowRecord, Escrows

log = logging.getLogger("nunet.payments.settle")


async def advance(escrows: Escrows, record: EscrowRecord, *, automatic: bool) -> EscrowRecord:
    state, role = record.info.state, record.info.role
    if not automatic and (role, state) in (("provider", "refunded"), ("consumer", "paid_out")):
        raise _settled_the_other_way(record)
    if state in ("claiming", "refunding"):
        return await _resubmit(escrows, record)
    if state == "locking":
        return await _locking(escrows, record)
    if state == "receipt":
        return await _decide(escrows, record, automatic=automatic)
    if role == "consumer" and state in ("locked", "undecided"):
        return await _deadline_refund(escrows, record, automatic=automatic)
    if role == "provider" and state == "verified" and record.receipt:
        # Our receipt went out but no countersignature came back: the consumer may have
        # asked the oracle with its own copy, and a decision is the same for both sides.
        return await _decide(escrows, record, automatic=automatic)
    if not automatic and state == "verified":
        raise EngineError(
            "not_ready",
            f"job {record.info.job_id} has no receipt signed by both peers yet: "
            "it is running, or its consumer has not countersigned",
        )
    return record


async def _lock_utxo(escrows: Escrows, record: EscrowRecord) -> Any:
    """The job's lock if it is still at the script address, else None (it was spent)."""
    from oracle_client import transactions as txs

    context = await escrows.node.payments().chain_context()
    info = record.info

    def find() -> Any:
        for escrow in txs.find_escrows(context, info.job_id):
            if escrow.utxo.input.transaction_id.payload.hex() == info.lock_tx:
                return escrow.utxo
        return None

    try:
        return await escrows.blocking(find)
    except Exception as exc:
        raise EngineError("chain", f"cannot read the chain: {exc}") from None


async def _locking(escrows: Escrows, record: EscrowRecord) -> EscrowRecord:
    # Only a crash between keeping the terms and submitting the lock leaves this state.
    if record.info.lock_tx and await _lock_utxo(escrows, record) is not None:
        return escrows.save(record, state="locked")
    return escrows.save(record, state="void", error="the lock never reached the chain")


async def _decide(escrows: Escrows, record: EscrowRecord, *, automatic: bool) -> EscrowRecord:
    from oracle_client.client import OracleUnavailable, Undecidable
    from oracle_client.models import RewardGrant, RewardPending, RewardRequest
    from oracle_client.receipt import Receipt

    info = record.info
    if info.role == "consumer" and await _lock_utxo(escrows, record) is None:
        return escrows.save(record, state="paid_out", reward_type="withdraw", error="")
    # Only a receipt both peers signed may ask for a decision; one signature asks for news.
    receipt = (
        msgspec.json.decode(record.receipt.encode(), type=Receipt)
        if info.state == "receipt"
        else None
    )
    try:
        async with escrows.oracle() as oracle:
            # Naming our lock tx: the oracle signs for that one output only.
            request = RewardRequest(
                job_id=info.job_id, receipt=receipt, lock_tx=info.lock_tx or None
            )
            answer = await oracle.request_reward(request)
    except Undecidable as exc:
        return escrows.save(record, state="undecided", error=str(exc))
    except OracleUnavailable as exc:
        escrows.save(record, error=str(exc))
        raise EngineError("oracle_unavailable", str(exc)) from None
    except Exception as exc:
        escrows.save(record, error=f"the oracle refused: {exc}")
        raise EngineError("oracle", f"the oracle refused: {exc}") from None
    if isinstance(answer, RewardPending):
        return escrows.save(record, error=answer.reason)
    assert isinstance(answer, RewardGrant)
    record = escrows.keep(record, grant=msgspec.json.encode(answer).decode())
    record = escrows.save(record, reward_type=answer.reward_type, error="")
    ours = "withdraw" if info.role == "provider" else "refund"
    if answer.reward_type != ours:
        if info.role == "provider":
            record = escrows.save(record, state="refunded")
            if not automatic:
                raise _settled_the_other_way(record)
        return record  # consumer: the provider claims; the loop sees the lock spent
    return await _spend(escrows, record, answer)


async def _spend(escrows: Escrows, record: EscrowRecord, grant: Any) -> EscrowRecord:
    """Build the claim (provider) or refund (consumer), keep it, submit it."""
    from pycardano import Address

    from oracle_client import transactions as txs

    payments = escrows.node.payments()
    context = await payments.chain_context()
    key = await payments.payment_signing_key()
    address = Address.from_primitive(payments.wallet().address)
    utxo = await _lock_utxo(escrows, record)
    if utxo is None:
        raise EngineError("chain", f"the escrow of job {record.info.job_id} is no longer there")
    signature = bytes.fromhex(grant.signature) if grant is not None else b""
    job_id = record.info.job_id

    def build() -> Any:
        if record.info.role == "provider":
            return txs.claim(
                context,
                signing_key=key,
                address=address,
                job_id=job_id,
                oracle_signature=signature,
                escrow_utxo=utxo,
            )
        return txs.refund(
            context,
            signing_key=key,
            address=address,
            job_id=job_id,
            oracle_signature=signature,
            escrow_utxo=utxo,
        )

    try:
        tx = await escrows.blocking(build)
    except txs.DeadlineNotReached as exc:
        raise EngineError("not_ready", str(exc)) from None
    except txs.TxError as exc:
        escrows.save(record, error=str(exc))
        raise EngineError("payment", str(exc)) from None
    busy = "claiming" if record.info.role == "provider" else "refunding"
    record = escrows.keep(record, tx_cbor=tx.to_cbor_hex())
    record = escrows.save(record, state=busy, claim_tx=str(tx.id))
    return await _resubmit(escrows, record)


async def _resubmit(escrows: Escrows, record: EscrowRecord) -> EscrowRecord:
    from pycardano import Transaction

    from oracle_client import transactions as txs

    done = "claimed" if record.info.role == "provider" else "refunded"
    if await _lock_utxo(escrows, record) is None:
        record = escrows.save(record, state=done, error="")
        await _report(escrows, record, "confirmed")
        return record
    context = await escrows.node.payments().chain_context()
    tx = Transaction.from_cbor(record.tx_cbor)
    try:
        await escrows.blocking(lambda: txs.submit(context, tx))
    except txs.TxError as exc:
        if await _lock_utxo(escrows, record) is None:  # spent meanwhile: by our tx
            return escrows.save(record, state=done, error="")
        escrows.save(record, error=f"the chain refused the {done[:-2]} tx: {exc}")
        raise EngineError("payment", f"the chain refused the transaction: {exc}") from None
    log.info("job %s: %s %s NTX (tx %s)", record.info.job_id, done, record.info.ntx, tx.id)
    record = escrows.save(record, state=done, error="")
    await _report(escrows, record, "submitted")
    return record


async def _report(escrows: Escrows, record: EscrowRecord, status: str) -> None:
    """Tell the oracle; its acknowledgement is a courtesy, never a condition."""
    from oracle_client.models import StatusReport

    if not record.info.claim_tx or not record.info.reward_type:
        return
    try:
        async with escrows.oracle() as oracle:
            await oracle.send_status(
                StatusReport(
                    job_id=record.info.job_id,
                    tx_hash=record.info.claim_tx,
                    reward_type=record.info.reward_type,
                    status=status,  # type: ignore[arg-type]
                )
            )
    except Exception as exc:
        log.info("job %s: the oracle did not take the tx status: %s", record.info.job_id, exc)


async def _deadline_refund(
    escrows: Escrows, record: EscrowRecord, *, automatic: bool
) -> EscrowRecord:
    info = record.info
    job = escrows.node.store.get_job(info.job_id)
    if await _lock_utxo(escrows, record) is None:
        return escrows.save(record, state="paid_out", error="")
    # The chain's clock decides (transactions.refund checks the slot): the wall clock only
    # spares the loop from asking the chain long before the deadline.
    if automatic and info.deadline_ms / 1000 - time.time() > 300:
        return record
    try:
        return await _spend(escrows, record, None)
    except EngineError as exc:
        if exc.code != "not_ready" or automatic:
            if automatic:
                return escrows.get(info.job_id) or record
            raise
        running = job is not None and job.state not in api.TERMINAL_STATES
        why = "the job is still running; " if running else ""
        raise EngineError(
            "not_ready",
            f"{why}{exc.message}; or ask again once both peers signed the receipt",
        ) from None


def _settled_the_other_way(record: EscrowRecord) -> EngineError:
    info = record.info
    if info.role == "provider":
        return EngineError(
            "no_reward",
            f"job {info.job_id} ended {info.outcome or 'without completing'} by this provider's "
            "fault: the oracle released its escrow to the consumer, there is nothing to claim",
        )
    return EngineError(
        "no_refund",
        f"job {info.job_id}'s escrow was paid to its provider (the job ended "
        f"{info.outcome or 'as agreed'}): there is nothing to refund",
    )
