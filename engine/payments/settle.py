"""Settling one escrow: the state machine behind `reward claim`, `reward refund` and the loop.

| side     | state     | what moves it on                                                    |
|----------|-----------|---------------------------------------------------------------------|
| consumer | locking   | the lock is found on chain (locked), or never got there (nothing spent) |
| consumer | locked    | the provider vanished mid-job: a receipt of ours says so (receipt); |
|          |           | the deadline passed without a decision: refund without the oracle   |
| both     | receipt   | the oracle's decision: the provider claims or the consumer refunds  |
| provider | verified  | with our receipt: reported to the oracle, which answers its decision |
| provider | claiming  | the lock is spent (claimed); else the kept claim tx is sent again,  |
|          |           | or rebuilt from the same decision once it can never land            |
| consumer | refunding | the same for the refund tx (refunded)                               |
| consumer | receipt   | the provider spent the lock (paid_out)                              |
| consumer | undecided | the oracle would not decide: refund without it after the deadline   |

The chain is the judge of "done": a lock that is no longer at the script address was spent,
and the kept tx says by whom. A submitted tx is "done" only once the chain shows the lock
spent; until then it stays kept and is sent again (a dropped tx that is still valid is the
same tx). A kept tx that can never land any more (its validity upper bound passed on the
chain's clock, or one of its wallet inputs was spent elsewhere) is replaced by a fresh one
built and signed from the same oracle decision; the new tx is kept, in the same write that
drops the old one, before it is sent. Since the old one can no longer land, the kept tx is
always the one that spent the lock, and a restart between keeping and sending sends the new
one once. Network trouble (the chain backend or the oracle unreachable, timeouts, 5xx) is an
``EngineError`` like any refusal: the loop (escrow.py ``serve``) retries that escrow with
exponential backoff, and no failure of one escrow leaves the loop.

Why one file of some 700 lines: it is one state machine, each function a state's move; its
moves call each other across the table above (a claim that never lands is rebuilt from the
same decision, a refund goes through the same spend), and split they would be read apart.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import msgspec

from engine import api
from engine.context import NodeContext
from engine.errors import EngineError
from engine.payments.records import EscrowRecord
from engine.ports import WalletPort
from oracle_client.ntx import format_ntx

if TYPE_CHECKING:
    from oracle_client.client import OracleClient

log = logging.getLogger("nunet.payments.settle")
TX_HASH = re.compile(r"[0-9a-f]{64}")
T = TypeVar("T")


class SettleBook(Protocol):
    """What settling needs of the escrow book (payments/escrow.py ``Escrows`` is the one)."""

    ctx: NodeContext
    wallet: WalletPort

    def get(self, job_id: str) -> EscrowRecord | None: ...

    def save(self, record: EscrowRecord, **changes: Any) -> EscrowRecord: ...

    def oracle(self) -> OracleClient: ...

    async def blocking(self, fn: Callable[[], T]) -> T: ...

    async def ntx_unit(self) -> str: ...


async def advance(escrows: SettleBook, record: EscrowRecord, *, automatic: bool) -> EscrowRecord:
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
        # Our receipt went out but no countersignature came back: it goes to the oracle as
        # our report (it then never takes the consumer's word that we vanished), and the
        # answer is the decision once the consumer asked with its copy.
        return await _decide(escrows, record, automatic=automatic)
    if not automatic and state == "verified":
        raise EngineError(
            "not_ready",
            f"job {record.info.job_id} has no receipt signed by both peers yet: "
            "it is running, or its consumer has not countersigned",
        )
    return record


async def _lock_utxo(escrows: SettleBook, record: EscrowRecord) -> Any:
    """The job's lock if it is still at the script address, else None (it was spent)."""
    from oracle_client.escrow import transactions as txs

    context = await escrows.wallet.chain_context()
    info = record.info

    def find() -> Any:
        for escrow in txs.find_escrows(context, info.job_id):
            if escrow.utxo.input.transaction_id.payload.hex() == info.lock_tx:
                return escrow.utxo
        return None

    return await _chain(escrows, find, "reading the escrow lock")


async def _spent_by(escrows: SettleBook, record: EscrowRecord) -> str:
    """The tx that spent the job's lock (the provider's split): the consumer's book names it
    as the provider's does. The chain backend's word (Blockfrost's ``consumed_by_tx`` of the
    lock tx's escrow output), kept only if it is a tx hash; "" when the backend does not say
    or cannot be reached (the escrow is settled either way: only its record is poorer)."""
    from oracle_client.escrow.contract import escrow_address

    context = await escrows.wallet.chain_context()
    api_client = getattr(context, "api", None)  # Blockfrost's client; absent in other contexts
    if api_client is None or not record.info.lock_tx:
        return ""
    script = str(escrow_address(context.network))

    def read() -> object:
        for output in api_client.transaction_utxos(record.info.lock_tx).outputs:
            if getattr(output, "address", None) == script:
                return getattr(output, "consumed_by_tx", None)
        return None

    try:
        spent = await _chain(escrows, read, "reading which tx spent the lock")
    except Exception as exc:  # a poorer record, never a failed settle
        log.info("job %s: which tx spent the lock is unknown: %s", record.info.job_id, exc)
        return ""
    return spent if isinstance(spent, str) and TX_HASH.fullmatch(spent) else ""


async def _chain(escrows: SettleBook, call: Callable[[], T], what: str) -> T:
    """A blocking chain call whose network failures come back as one retryable line."""
    from oracle_client.escrow import transactions as txs

    try:
        return await escrows.blocking(call)
    except EngineError:
        raise
    except Exception as exc:
        if unreachable(exc):
            raise EngineError(
                "chain", f"{what}: the chain backend is unreachable ({_plain(exc)}); retrying"
            ) from None
        if isinstance(exc, txs.TxError):
            raise
        raise EngineError("chain", f"{what}: the chain backend failed: {_plain(exc)}") from None


def unreachable(exc: BaseException) -> bool:
    """Whether a failure is the network's (connection, timeout, 5xx), anywhere in its causes:
    pycardano wraps Blockfrost's ApiError, which wraps the HTTP reply."""
    import httpx
    import requests
    from blockfrost import ApiError

    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen or len(seen) > 16:
            continue
        seen.add(id(current))
        if isinstance(
            current,
            requests.ConnectionError
            | requests.Timeout
            | httpx.TransportError
            | ConnectionError
            | TimeoutError
            | socket.gaierror,
        ):
            return True
        if isinstance(current, ApiError) and int(getattr(current, "status_code", 0)) >= 500:
            return True
        todo.extend((current.__cause__, current.__context__))
    return False


def _plain(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


async def _locking(escrows: SettleBook, record: EscrowRecord) -> EscrowRecord:
    # Only a crash between keeping the terms and submitting the lock leaves this state.
    if record.info.lock_tx and await _lock_utxo(escrows, record) is not None:
        return escrows.save(record, state="locked")
    return escrows.save(record, state="void", error="the lock never reached the chain")


async def _decide(escrows: SettleBook, record: EscrowRecord, *, automatic: bool) -> EscrowRecord:
    from oracle_client.client import OracleUnavailable, ReceiptRejected, Undecidable
    from oracle_client.escrow.receipt import Receipt
    from oracle_client.models import RewardGrant, RewardPending, RewardRequest

    info = record.info
    if info.role == "consumer" and await _lock_utxo(escrows, record) is None:
        # The provider spent the lock, with the split the oracle signed; when the provider
        # was quicker than our own request, the split the receipt we both signed makes
        # (rules.split: what the oracle signs for it, and the provider spends only a split
        # that pays it something).
        grant = _kept_grant(record)
        kind, (paid, refunded) = (
            (grant.reward_type, grant.shares) if grant is not None else _receipt_split(record)
        )
        # What the chain says it paid, when the backend says (issue 20 §6); else the split.
        spent = await _spent_how(escrows, record, owed=refunded, split=kind == "distribute")
        if spent is not None and spent.short:
            return _not_paid_back(escrows, record, spent)
        if spent is not None:
            paid, refunded = spent.provider, spent.consumer
        return escrows.save(
            record,
            state="paid_out" if paid > 0 else "refunded",
            reward_type=kind,
            paid_units=paid,
            refunded_units=refunded,
            settle_tx=spent.tx if spent is not None else "",
            error="",
        )
    # A receipt both peers signed asks for the decision; the provider's own receipt is its
    # report (the oracle then never takes the consumer's word that it vanished) and asks for
    # news; the consumer's alone says the provider vanished mid-job.
    receipt = msgspec.json.decode(record.receipt.encode(), type=Receipt) if record.receipt else None
    alone = receipt is not None and not (receipt.consumer_signature and receipt.provider_signature)
    try:
        try:
            async with escrows.oracle() as oracle:
                # Naming our lock tx: the oracle signs for that one output only.
                request = RewardRequest(
                    job_id=info.job_id, receipt=receipt, lock_tx=info.lock_tx or None
                )
                answer = await oracle.request_reward(request)
        finally:
            # The countersignature may have come in while we waited on the oracle (it does
            # not wait for this lock): what is saved below goes onto the row as it is now.
            record = escrows.get(info.job_id) or record
    except Undecidable as exc:
        return escrows.save(record, state="undecided", error=str(exc))
    except ReceiptRejected as exc:
        if info.role == "consumer" and alone:
            # The oracle would not take our word that the provider vanished (it reported
            # the job): the deadline refund remains.
            return escrows.save(record, state="undecided", error=str(exc))
        escrows.save(record, error=f"the oracle refused: {exc}")
        raise EngineError("oracle", f"the oracle refused: {exc}") from None
    except OracleUnavailable as exc:
        escrows.save(record, error=str(exc))
        raise EngineError("oracle_unavailable", str(exc)) from None
    except Exception as exc:
        escrows.save(record, error=f"the oracle refused: {exc}")
        raise EngineError("oracle", f"the oracle refused: {exc}") from None
    if isinstance(answer, RewardPending):
        # When the oracle can decide, where it says (issue 22): the views say when, and the
        # loop asks again then.
        decidable_at = (
            time.time() + answer.retry_after_s if answer.retry_after_s is not None else 0.0
        )
        return escrows.save(record, error=answer.reason, decidable_at=decidable_at)
    assert isinstance(answer, RewardGrant)
    record = escrows.save(
        msgspec.structs.replace(record, grant=msgspec.json.encode(answer).decode()),
        reward_type=answer.reward_type,
        error="",
        decidable_at=0.0,
    )
    if not _ours(info.role, answer):
        paid, refunded = answer.shares
        record = escrows.save(record, paid_units=paid, refunded_units=refunded)
        if info.role == "provider":
            record = escrows.save(record, state="refunded")
            if not automatic:
                raise _settled_the_other_way(record)
            return record
        # Consumer: the provider submits the split; one that has not, a grace after the
        # decision, would strand our share for ever: then we submit the same split.
        waited_s = time.time() - answer.decided_at / 1000
        grace_s = escrows.ctx.settings.payments.split_grace_s
        if answer.reward_type != "distribute" or waited_s < grace_s:
            return record  # the loop sees the lock spent
        log.info(
            "job %s: the provider has not submitted the decided split in %.0f s: "
            "submitting it ourselves",
            info.job_id,
            waited_s,
        )
    return await _spend(escrows, record, answer)


def _receipt_split(record: EscrowRecord) -> tuple[str, tuple[int, int]]:
    """The provider's claim as the receipt both peers signed prices it; a row without one
    (settled before issue 12): the whole lock."""
    from oracle_client.escrow.receipt import Receipt

    try:
        receipt = msgspec.json.decode(record.receipt.encode(), type=Receipt)
    except (msgspec.DecodeError, msgspec.ValidationError):
        receipt = None
    if receipt is None or not (receipt.consumer_signature and receipt.provider_signature):
        return "withdraw", (record.info.amount, 0)
    return "distribute", (receipt.charge, receipt.amount - receipt.charge)


def _ours(role: str, grant: Any) -> bool:
    """Whether this side submits the tx the grant releases: the provider when it gets
    something, the consumer when it gets everything back."""
    provider_share, _ = grant.shares
    return provider_share > 0 if role == "provider" else provider_share == 0


def _kept_grant(record: EscrowRecord) -> Any:
    """The oracle decision a kept tx was built from (None: a refund after the deadline)."""
    from oracle_client.models import RewardGrant

    return msgspec.json.decode(record.grant.encode(), type=RewardGrant) if record.grant else None


async def _spend(escrows: SettleBook, record: EscrowRecord, grant: Any) -> EscrowRecord:
    """Build the claim (provider) or refund (consumer), keep it, submit it."""
    from pycardano import Address

    from oracle_client.escrow import transactions as txs

    payments = escrows.wallet
    context = await payments.chain_context()
    key = await payments.payment_signing_key()
    address = Address.from_primitive(payments.wallet().address)
    utxo = await _lock_utxo(escrows, record)
    if utxo is None:  # spent already (the other party sent the split): say what it paid
        return await _done(escrows, record, "confirmed")
    signature = bytes.fromhex(grant.signature) if grant is not None else b""
    job_id = record.info.job_id

    def build() -> Any:
        if grant is not None and grant.reward_type == "distribute":
            # The consumer's share goes where the lock's datum says (its full address at
            # lock time), whoever submits: the builder reads it from there.
            provider = address if record.info.role == "provider" else grant.provider_address
            if not provider:
                raise txs.TxError("the oracle's split names no address for the provider")
            return txs.distribute(
                context,
                signing_key=key,
                address=address,
                job_id=job_id,
                oracle_signature=signature,
                provider_amount=grant.provider_amount,
                provider_address=_address(provider),
                escrow_utxo=utxo,
            )
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
        tx = await _chain(escrows, build, f"building the {_kind(record)} tx")
    except txs.DeadlineNotReached as exc:
        raise EngineError("not_ready", str(exc)) from None
    except txs.TxError as exc:
        escrows.save(record, error=str(exc))
        raise EngineError("payment", str(exc)) from None
    busy = "claiming" if record.info.role == "provider" else "refunding"
    paid, refunded = grant.shares if grant is not None else (0, record.info.amount)
    # One write keeps the new tx and drops the one it replaces: before anything is sent.
    record = escrows.save(
        msgspec.structs.replace(record, tx_cbor=tx.to_cbor_hex()),
        state=busy,
        claim_tx=str(tx.id),
        settle_tx=str(tx.id),
        paid_units=paid,
        refunded_units=refunded,
    )
    return await _resubmit(escrows, record, fresh=True)


async def _resubmit(
    escrows: SettleBook, record: EscrowRecord, *, fresh: bool = False
) -> EscrowRecord:
    """Send the kept tx (again), or replace it once it can never land; done once the chain
    shows the lock spent."""
    from pycardano import Transaction

    from oracle_client.escrow import transactions as txs

    done = "claimed" if record.info.role == "provider" else "refunded"
    lock = await _lock_utxo(escrows, record)
    if lock is None:
        return await _done(escrows, record, "confirmed")
    context = await escrows.wallet.chain_context()
    tx = Transaction.from_cbor(record.tx_cbor)
    if not fresh:
        dead = await _never_lands(escrows, record, tx, lock)
        if dead:
            # Looked at again after the verdict: a lock still there now was not spent by the
            # old tx, and it never will be.
            if await _lock_utxo(escrows, record) is None:
                return await _done(escrows, record, "confirmed")
            log.info(
                "job %s: the kept %s tx %s %s: rebuilding it from the same oracle decision",
                record.info.job_id,
                _kind(record),
                tx.id,
                dead,
            )
            return await _spend(escrows, record, _kept_grant(record))
    try:
        await _chain(escrows, lambda: txs.submit(context, tx), f"submitting the {_kind(record)} tx")
    except txs.TxError as exc:
        if await _lock_utxo(escrows, record) is None:  # spent meanwhile: by our tx
            return await _done(escrows, record, "confirmed")
        escrows.save(record, error=f"the chain refused the {done[:-2]} tx: {exc}")
        raise EngineError("payment", f"the chain refused the transaction: {exc}") from None
    except EngineError as exc:
        escrows.save(record, error=exc.message)
        raise
    if await _lock_utxo(escrows, record) is None:
        amount = format_ntx(record.info.amount)
        log.info("job %s: %s %s (tx %s)", record.info.job_id, done, amount, tx.id)
        return await _done(escrows, record, "submitted")
    # Accepted but not on chain yet (a mempool): the lock's absence will say it landed.
    record = escrows.save(record, error=f"the {_kind(record)} tx {tx.id} is waiting for a block")
    await _report(escrows, record, "submitted")
    return record


async def _never_lands(escrows: SettleBook, record: EscrowRecord, tx: Any, lock: Any) -> str:
    """Why a kept tx can never be on chain ("" while it still can): its validity upper bound
    passed on the chain's clock, or a wallet input of it was spent by another tx."""
    context = await escrows.wallet.chain_context()
    address = escrows.wallet.wallet().address
    body = tx.transaction_body

    def verdict() -> str:
        tip = int(context.last_block_slot)
        if body.ttl is not None and tip >= int(body.ttl):
            return f"expired (valid until slot {body.ttl}, the chain is at slot {tip})"
        ours = {(u.input.transaction_id.payload, u.input.index) for u in context.utxos(address)}
        mine = (lock.input.transaction_id.payload, lock.input.index)
        for tx_input in body.inputs:
            ref = (tx_input.transaction_id.payload, tx_input.index)
            if ref != mine and ref not in ours:
                return "was dropped (one of its inputs was spent by another tx)"
        return ""

    return await _chain(escrows, verdict, f"checking the kept {_kind(record)} tx")


async def _done(escrows: SettleBook, record: EscrowRecord, status: str) -> EscrowRecord:
    """The lock is gone: the book says what spent it, read from the chain (issue 20 §6).
    "The lock is gone" is not "our tx landed": the consumer may have refunded it at the
    deadline while our claim never reached the chain, or submitted the split itself."""
    done = "claimed" if record.info.role == "provider" else "refunded"
    info = record.info
    owed = info.refunded_units if info.refunded_units is not None else info.amount
    spent = await _spent_how(escrows, record, owed=owed, split=info.reward_type == "distribute")
    if spent is None:  # the backend does not say: our kept tx's figures, as before
        record = escrows.save(record, state=done, error="")
        await _report(escrows, record, status)
        return record
    if spent.short:
        return _not_paid_back(escrows, record, spent)
    ours = spent.tx == record.info.claim_tx
    if record.info.role == "provider":
        state = "claimed" if spent.provider > 0 else "refunded"
    else:
        state = "refunded" if spent.provider == 0 else "paid_out"
    error = ""
    if not ours:
        error = (
            f"the lock was spent by tx {spent.tx}, not by ours"
            + (f" ({record.info.claim_tx})" if record.info.claim_tx else "")
            + f": it paid the provider {spent.provider} and the consumer {spent.consumer} "
            "base units"
        )
        log.warning("job %s: %s", record.info.job_id, error)
    record = escrows.save(
        record,
        state=state,
        settle_tx=spent.tx,
        paid_units=spent.provider,
        refunded_units=spent.consumer,
        error=error,
    )
    if ours:
        await _report(escrows, record, status)
    return record


@dataclass(frozen=True)
class _Spent:
    """The tx that spent a lock and the NTX base units it paid each side. On the consumer's
    side, `consumer` is what reached its full address (the one its wallet reads), and `short`
    says how that falls short of what it is owed ("" when it does not)."""

    tx: str
    provider: int
    consumer: int
    short: str = ""


def _not_paid_back(escrows: SettleBook, record: EscrowRecord, spent: _Spent) -> EscrowRecord:
    """The lock is spent but the consumer's own output is not on chain as the split owes it:
    the book does not say refunded or paid; it says what is missing, and the loop reads the
    chain again (a backend still indexing the tx catches up)."""
    error = f"the lock was spent by tx {spent.tx}, but {spent.short}"
    log.warning("job %s: %s", record.info.job_id, error)
    return escrows.save(record, settle_tx=spent.tx, error=error)


async def _spent_how(
    escrows: SettleBook, record: EscrowRecord, *, owed: int = 0, split: bool = False
) -> _Spent | None:
    """Which tx spent the job's lock and what it paid the provider's and the consumer's
    payment keys, from the chain; None when the backend does not say. The consumer checks
    its own full address (payment key and staking part, what its wallet reads): `owed` NTX
    base units net and, for a `split`, one output that also carries the lock's lovelace
    back (issue 20 §5: the script checks output 0; the book checks it landed)."""
    from pycardano import Address

    tx = await _spent_by(escrows, record)
    if not tx:
        return None
    context = await escrows.wallet.chain_context()
    api_client = context.api
    unit = await escrows.ntx_unit()
    info = record.info
    mine = escrows.wallet.wallet().address if info.role == "consumer" else ""

    def read() -> _Spent:
        # Net of what each key put in: the submitter's own NTX may pass through as change.
        net = {info.provider_pkh: 0, info.consumer_pkh: 0}
        at_mine = 0
        utxos = api_client.transaction_utxos(tx)
        for side, sign in ((utxos.outputs, 1), (utxos.inputs, -1)):
            for utxo in side:
                if getattr(utxo, "collateral", False) or getattr(utxo, "reference", False):
                    continue  # read or pledged, not spent (a valid tx keeps its collateral)
                if utxo.address == mine:
                    at_mine += sign * _quantity(utxo, unit)
                try:
                    pkh = Address.from_primitive(utxo.address).payment_part.payload.hex()
                except Exception:  # a Byron address: neither party's key
                    continue
                if pkh in net:
                    net[pkh] += sign * _quantity(utxo, unit)
        if not mine:
            return _Spent(tx, max(0, net[info.provider_pkh]), max(0, net[info.consumer_pkh]))
        short = ""
        if at_mine < owed:
            short = (
                f"this wallet's address received {max(0, at_mine)} of the {owed} base units owed"
            )
        elif split:
            locked = [
                _quantity(u, "lovelace")
                for u in utxos.inputs
                if u.tx_hash == info.lock_tx and _is_escrow(u.address, context.network)
            ]
            ada = max(locked, default=0)
            back = [
                u
                for u in utxos.outputs
                if u.address == mine
                and _quantity(u, unit) >= owed
                and _quantity(u, "lovelace") >= ada
            ]
            if not back:
                short = (
                    f"no output of it pays this wallet's address the lock's {ada} lovelace "
                    f"with its {owed} base units"
                )
        return _Spent(tx, max(0, net[info.provider_pkh]), max(0, at_mine), short)

    try:
        return await _chain(escrows, read, "reading what the spending tx paid")
    except Exception as exc:  # a poorer record, never a failed settle
        log.info("job %s: what spent the lock is unknown: %s", info.job_id, exc)
        return None


def _quantity(utxo: Any, unit: str) -> int:
    """How much of `unit` ("lovelace" or an asset's unit) a Blockfrost UTxO entry holds."""
    return sum(int(a.quantity) for a in utxo.amount if a.unit == unit)


def _is_escrow(address: str, network: Any) -> bool:
    from oracle_client.escrow.contract import escrow_address

    return address == str(escrow_address(network))


def _kind(record: EscrowRecord) -> str:
    if record.info.reward_type == "distribute":
        return "distribute"
    return "claim" if record.info.role == "provider" else "refund"


def _address(text: Any) -> Any:
    from pycardano import Address

    return text if isinstance(text, Address) else Address.from_primitive(text)


async def _report(escrows: SettleBook, record: EscrowRecord, status: str) -> None:
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
    escrows: SettleBook, record: EscrowRecord, *, automatic: bool
) -> EscrowRecord:
    info = record.info
    job = escrows.ctx.store.get_job(info.job_id)
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
    if info.role == "provider" and info.reward_type == "distribute":
        return EngineError(
            "no_reward",
            f"job {info.job_id}'s receipt charges nothing for its machine time: the whole lock "
            "goes back to the consumer, there is nothing to claim",
        )
    if info.role == "provider":
        return EngineError(
            "no_reward",
            f"job {info.job_id} ended {info.outcome or 'without completing'} by this provider's "
            "fault: the oracle released its escrow to the consumer, there is nothing to claim",
        )
    if info.reward_type == "distribute" and info.paid_units is not None:
        return EngineError(
            "no_refund",
            f"job {info.job_id}'s escrow was split by its provider's transaction: "
            f"{info.paid_units} base units for the machine time, {info.refunded_units} back to "
            "this wallet in the same transaction; there is nothing else to refund",
        )
    return EngineError(
        "no_refund",
        f"job {info.job_id}'s escrow was paid to its provider (the job ended "
        f"{info.outcome or 'as agreed'}): there is nothing to refund",
    )
