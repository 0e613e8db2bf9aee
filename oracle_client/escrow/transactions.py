"""Escrow transactions: lock NTX, split it (distribute), claim it (provider), refund it (consumer).

Each builder works against any pycardano ChainContext (BlockFrostChainContext on the local
ledger, preprod or mainnet), returns the signed Transaction, and leaves submitting to
`submit(context, tx)`. Errors say what is missing and by how much: `InsufficientFunds`,
`EscrowNotFound`, `OracleSignatureInvalid`, `DeadlineNotReached`, `SubmitRejected`.

    tx = lock(ctx, signing_key=sk, address=addr, datum=datum, ntx=ntx_unit)
    submit(ctx, tx)
    tx = claim(ctx, signing_key=provider_sk, address=provider_addr, job_id="job-1",
               oracle_signature=sig)   # sig: the oracle's, over oracle_message(..., lock ref)
    tx = refund(ctx, signing_key=consumer_sk, address=consumer_addr, job_id="job-1")
    tx = distribute(ctx, signing_key=sk, address=addr, job_id="job-1", oracle_signature=sig,
                    provider_amount=n, provider_address=p)  # the consumer's: the datum's

Script redeemers without `ex_units` are priced by `context.evaluate_tx` (the ledger runs the
script); passing `ex_units` skips that, which is how tests get a doomed transaction as far as
the ledger's own submit checks.

Why one file of some 670 lines: the four builders spend one validator's outputs and share
how: finding the escrows (``find_escrows``, ``_candidates``), checking the oracle's signature
(``_signed_for``, ``_oracle_signed``), paying the fee (``_require_fee_funds``,
``_add_fee_input``) and building (``_build``); apart, each would carry a copy of that.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey
from pycardano import (
    Address,
    Asset,
    AssetName,
    ChainContext,
    ExecutionUnits,
    MultiAsset,
    PaymentSigningKey,
    PlutusData,
    RawPlutusData,
    Redeemer,
    ScriptHash,
    Transaction,
    TransactionBuilder,
    TransactionInput,
    TransactionOutput,
    UTxO,
    Value,
    VerificationKeyHash,
    min_lovelace_post_alonzo,
)
from pycardano.exception import (
    PyCardanoException,
    TransactionFailedException,
    UTxOSelectionException,
)
from pycardano.serialization import RawCBOR
from pycardano.utils import max_tx_fee

from oracle_client.cardano.plutus import MAINNET, PREPROD, PREVIEW, SlotConfig
from oracle_client.escrow.contract import (
    Claim,
    Distribute,
    EscrowDatum,
    Refund,
    consumer_address,
    distribute_message,
    escrow_address,
    escrow_script,
    format_ntx,
    oracle_message,
    staking_of,
)

# The builder logs its whole state at WARNING on any error; our exceptions carry the reason.
logging.getLogger("PyCardano").setLevel(logging.ERROR)

NTX_ASSET_NAME = b"NTX"
DEFAULT_TTL_S = 600  # a signed tx that has not landed in 10 minutes is dead, not pending
# What a lock needs beyond the escrow output's min ADA: fee (~0.2 ADA) plus the min ADA of a
# change output that carries the remaining NTX (~1.2 ADA).
LOCK_ADA_MARGIN = 2_000_000
_MAGIC_SLOT_CONFIGS = {764824073: MAINNET, 1: PREPROD, 2: PREVIEW}


class TxError(Exception):
    """An escrow transaction cannot be built; str() says why."""


class InsufficientFunds(TxError):
    def __init__(
        self,
        message: str,
        *,
        needed_lovelace: int = 0,
        has_lovelace: int = 0,
        needed_ntx: int = 0,
        has_ntx: int = 0,
    ) -> None:
        super().__init__(message)
        self.needed_lovelace = needed_lovelace
        self.has_lovelace = has_lovelace
        self.needed_ntx = needed_ntx
        self.has_ntx = has_ntx


class EscrowNotFound(TxError):
    pass


class OracleSignatureInvalid(TxError):
    pass


class DeadlineNotReached(TxError):
    pass


class SubmitRejected(TxError):
    """The chain (or local ledger) refused the transaction; the message is its reason."""


@dataclass(frozen=True)
class NtxUnit:
    """The NTX token: policy id and asset name (the local ledger serves its own)."""

    policy_id: bytes
    asset_name: bytes = NTX_ASSET_NAME

    @classmethod
    def parse(cls, unit: str | NtxUnit) -> NtxUnit:
        """From Blockfrost's unit string: policy id hex + asset name hex."""
        if isinstance(unit, NtxUnit):
            return unit
        try:
            raw = bytes.fromhex(unit)
        except ValueError as exc:
            raise ValueError(f"not an asset unit (hex): {unit!r}") from exc
        if not 28 < len(raw) <= 28 + 32:
            raise ValueError(f"an asset unit is a 28-byte policy id and a name, got {unit!r}")
        return cls(raw[:28], raw[28:])

    @property
    def unit(self) -> str:
        return self.policy_id.hex() + self.asset_name.hex()

    def multi_asset(self, amount: int) -> MultiAsset:
        return MultiAsset({ScriptHash(self.policy_id): Asset({AssetName(self.asset_name): amount})})

    def amount_in(self, value: Value) -> int:
        assets = value.multi_asset.get(ScriptHash(self.policy_id))
        if not assets:
            return 0
        return int(assets.get(AssetName(self.asset_name), 0))

    def held_alone(self, value: Value, amount: int) -> bool:
        """Whether ``value`` holds exactly ``amount`` of this token and no other token (its
        ADA aside): the only lock the split can spend (distribute_uplc.py, check 5: "a lock
        holds ADA and one token"). A lock with one unit of anything else beside the NTX
        passed "at least the amount", then no Distribute could spend it and the job was free
        (issue 20 §5)."""
        tokens = [(policy, name) for policy, names in value.multi_asset.items() for name in names]
        return len(tokens) == 1 and self.amount_in(value) == amount


@dataclass(frozen=True)
class Escrow:
    """An escrow output on chain and its decoded datum."""

    utxo: UTxO
    datum: EscrowDatum

    @property
    def ref(self) -> str:
        return f"{self.utxo.input.transaction_id.payload.hex()}#{self.utxo.input.index}"


# -- helpers ---------------------------------------------------------------------------------


def _key_hash(signing_key: PaymentSigningKey) -> VerificationKeyHash:
    return signing_key.to_verification_key().hash()


def _check_owner(signing_key: PaymentSigningKey, address: Address) -> bytes:
    """The signing key must be the address's payment key: it pays, signs and receives."""
    pkh = _key_hash(signing_key)
    if address.payment_part != pkh:
        raise TxError(f"the signing key (key hash {pkh.payload.hex()}) does not own {address}")
    return bytes(pkh.payload)


def slot_config_for(context: ChainContext) -> SlotConfig:
    """Slot <-> POSIX time for the context's network: the known public networks by magic,
    otherwise (the local ledger) slot 0 at the genesis system start."""
    genesis = context.genesis_param
    known = _MAGIC_SLOT_CONFIGS.get(int(genesis.network_magic))
    if known is not None:
        return known
    return SlotConfig(
        zero_time_ms=int(genesis.system_start) * 1000,
        zero_slot=0,
        slot_length_ms=int(Decimal(str(genesis.slot_length)) * 1000),
    )


def _balance(utxos: Sequence[UTxO], ntx: NtxUnit | None) -> tuple[int, int]:
    """(lovelace, NTX base units) held by key-locked UTxOs."""
    lovelace = sum(int(u.output.amount.coin) for u in utxos)
    tokens = sum(ntx.amount_in(u.output.amount) for u in utxos) if ntx else 0
    return lovelace, tokens


def _ada(lovelace: int) -> str:
    return f"{Decimal(lovelace) / 1_000_000:f} ADA"


def decode_escrow_datum(datum: object) -> EscrowDatum | None:
    """The EscrowDatum of an output's inline datum, or None for anything else."""
    try:
        if isinstance(datum, EscrowDatum):
            return datum
        if isinstance(datum, RawCBOR):
            found = EscrowDatum.from_cbor(datum.cbor)
        elif isinstance(datum, RawPlutusData | PlutusData):
            found = EscrowDatum.from_cbor(datum.to_cbor())
        else:
            return None
        found.validate()
        return found
    except Exception:  # foreign outputs at the script address: not an escrow of ours
        return None


def find_escrows(
    context: ChainContext, job_id: str | bytes, *, script_address: Address | None = None
) -> list[Escrow]:
    """Every output at the escrow address whose inline datum names `job_id`."""
    job = job_id.encode("utf-8") if isinstance(job_id, str) else bytes(job_id)
    where = script_address or escrow_address(context.network)
    found = []
    for utxo in context.utxos(where):
        datum = decode_escrow_datum(utxo.output.datum)
        if datum is not None and datum.job_id == job:
            found.append(Escrow(utxo, datum))
    return found


def _candidates(
    context: ChainContext,
    job_id: str | bytes,
    party: bytes,
    role: str,
    escrow_utxo: UTxO | None,
    script_address: Address | None,
    ntx: NtxUnit | None,
) -> list[Escrow]:
    """The escrow outputs of `job_id` that name `party` as `role` (and hold their NTX)."""
    if escrow_utxo is not None:
        datum = decode_escrow_datum(escrow_utxo.output.datum)
        if datum is None:
            raise EscrowNotFound("the given UTxO carries no escrow datum")
        candidates = [Escrow(escrow_utxo, datum)]
    else:
        candidates = find_escrows(context, job_id, script_address=script_address)
    if not candidates:
        where = script_address or escrow_address(context.network)
        raise EscrowNotFound(f"no escrow UTxO for job {job_id!r} at {where}")
    mine = [e for e in candidates if getattr(e.datum, role) == party]
    if not mine:
        raise EscrowNotFound(
            f"the escrow of job {job_id!r} names another {role} than key hash {party.hex()}"
        )
    if ntx is not None:
        # An output whose datum promises more NTX than it holds is not the real lock.
        funded = [e for e in mine if ntx.amount_in(e.utxo.output.amount) >= e.datum.amount]
        if not funded:
            raise EscrowNotFound(f"the escrow of job {job_id!r} holds less NTX than its datum says")
        mine = funded
    return mine


def _signed_for(
    candidates: list[Escrow], kind: str, beneficiary: bytes, signature: bytes
) -> Escrow:
    """The one candidate the oracle's signature releases: it names a single output, so among
    several locks with the same terms only that one can be spent with it."""
    for escrow in candidates:
        if _oracle_signed(escrow, kind, beneficiary, signature):
            return escrow
    datum = candidates[0].datum
    refs = ", ".join(e.ref for e in candidates)
    raise OracleSignatureInvalid(
        f"the oracle signature does not verify for a {kind} of {format_ntx(datum.amount)}"
        f" of job {datum.job_id.decode(errors='replace')!r} from escrow output {refs}"
        " under the escrow's oracle key"
    )


def _oracle_signed(escrow: Escrow, kind: str, beneficiary: bytes, signature: bytes) -> bool:
    datum = escrow.datum
    message = oracle_message(
        kind,  # type: ignore[arg-type]
        datum.job_id,
        beneficiary,
        datum.amount,
        escrow.utxo.input,
    )
    try:
        VerifyKey(datum.oracle_key).verify(message, signature)
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True


def _require_fee_funds(context: ChainContext, address: Address, role: str) -> None:
    """Script spends need a key-locked collateral UTxO (>2 ADA, pycardano's rule) besides fees."""
    lovelace, _ = _balance(context.utxos(address), None)
    collateral = max_tx_fee(context) * context.protocol_param.collateral_percent // 100
    need = collateral + 1_000_000
    if lovelace < need:
        raise InsufficientFunds(
            f"the {role} needs about {_ada(need)} at {address} for collateral and fees;"
            f" it has {_ada(lovelace)}",
            needed_lovelace=need,
            has_lovelace=lovelace,
        )


def _add_fee_input(builder: TransactionBuilder, context: ChainContext, address: Address) -> None:
    """Spend the wallet's largest UTxO outright: pycardano selects wallet inputs only to cover
    outputs, so a script spend whose fee (the ~5 kB script in the witness set) eats into the
    lock's own min ADA would leave a change output too small for the NTX it carries."""
    utxos = context.utxos(address)
    if utxos:
        builder.add_input(max(utxos, key=lambda u: int(u.output.amount.coin)))
    builder.add_input_address(address)


def _build(
    builder: TransactionBuilder, signing_key: PaymentSigningKey, address: Address, what: str
) -> Transaction:
    try:
        return builder.build_and_sign([signing_key], change_address=address)
    except UTxOSelectionException as exc:
        raise InsufficientFunds(f"{what}: {address} cannot cover it: {exc}") from exc
    except TransactionFailedException as exc:
        # Raised by context.evaluate_tx: the script refused the transaction.
        raise TxError(f"{what}: script evaluation failed: {exc}") from exc
    except (PyCardanoException, ValueError) as exc:
        if "collateral" in str(exc).lower():
            # pycardano's words ("Minimum collateral amount N is greater than total provided
            # collateral inputs {...}") do not say what to do: the wallet lacks plain ADA.
            raise InsufficientFunds(
                f"{what}: {address} has too little plain ADA for the collateral a script "
                f"transaction pledges (it is not spent): send it a few ADA ({exc})"
            ) from exc
        raise TxError(f"{what}: {exc}") from exc


# -- the three transactions ------------------------------------------------------------------


def lock(
    context: ChainContext,
    *,
    signing_key: PaymentSigningKey,
    address: Address,
    datum: EscrowDatum,
    ntx: NtxUnit | str,
    script_address: Address | None = None,
    ttl_s: int = DEFAULT_TTL_S,
) -> Transaction:
    """Lock `datum.amount` NTX (plus the output's min ADA) at the escrow with an inline datum.
    The datum names the paying address whole: its payment key (`consumer`) and its staking
    part (`consumer_stake`, `staking_of(address)`), where a split returns the consumer's
    share and the lock's ADA."""
    datum.validate()
    unit = NtxUnit.parse(ntx)
    payer = _check_owner(signing_key, address)
    if datum.consumer != payer:
        # Only the datum's consumer can ever take a refund: a lock paid by another key would
        # leave the payer no way back.
        raise TxError(
            f"the datum's consumer ({datum.consumer.hex()}) is not the paying key ({payer.hex()})"
        )
    try:
        own_stake = staking_of(address)
    except ValueError as exc:
        raise TxError(str(exc)) from None
    if datum.consumer_stake != own_stake:
        # A split pays the consumer's share to the datum's address: another staking part
        # would send it where this wallet, which reads its own address, never looks.
        raise TxError(
            f"the datum's consumer staking part is not {address}'s: a split would pay the "
            "consumer's share to another address than the paying one"
        )
    where = script_address or escrow_address(context.network)
    out = TransactionOutput(where, Value(0, unit.multi_asset(datum.amount)), datum=datum)
    out.amount.coin = min_lovelace_post_alonzo(out, context)
    lovelace, tokens = _balance(context.utxos(address), unit)
    need_ada = int(out.amount.coin) + LOCK_ADA_MARGIN
    if tokens < datum.amount or lovelace < need_ada:
        raise InsufficientFunds(
            f"locking {format_ntx(datum.amount)} needs {format_ntx(datum.amount)} and about"
            f" {_ada(need_ada)}; {address} has {format_ntx(tokens)} and {_ada(lovelace)}",
            needed_lovelace=need_ada,
            has_lovelace=lovelace,
            needed_ntx=datum.amount,
            has_ntx=tokens,
        )
    builder = TransactionBuilder(context)
    builder.add_input_address(address)
    builder.add_output(out)
    builder.ttl = context.last_block_slot + ttl_s
    return _build(builder, signing_key, address, "lock")


def claim(
    context: ChainContext,
    *,
    signing_key: PaymentSigningKey,
    address: Address,
    job_id: str | bytes,
    oracle_signature: bytes,
    escrow_utxo: UTxO | None = None,
    ntx: NtxUnit | str | None = None,
    script_address: Address | None = None,
    ex_units: ExecutionUnits | None = None,
    verify_locally: bool = True,
    script_utxo: UTxO | None = None,
    ttl_s: int = DEFAULT_TTL_S,
) -> Transaction:
    """The provider takes the escrow of `job_id` with the oracle's "withdraw" signature.

    The signature names one escrow output (oracle_message): without `escrow_utxo`, the lock of
    `job_id` it releases is found among those at the script address. Everything in the escrow
    output (NTX and its ADA) goes to `address`, the provider's.
    `script_utxo`: an output carrying the escrow script as a reference script; without it the
    script travels in the witness set (~2.2 kB, ~0.1 ADA more fee).
    """
    provider = _check_owner(signing_key, address)
    unit = NtxUnit.parse(ntx) if ntx is not None else None
    mine = _candidates(context, job_id, provider, "provider", escrow_utxo, script_address, unit)
    if verify_locally:
        escrow = _signed_for(mine, "withdraw", provider, oracle_signature)
    else:
        escrow = mine[0]
    _require_fee_funds(context, address, "provider")
    slot = context.last_block_slot
    builder = TransactionBuilder(context)
    builder.add_script_input(
        escrow.utxo,
        script=script_utxo or escrow_script(),
        redeemer=Redeemer(Claim(oracle_signature), ex_units),
    )
    _add_fee_input(builder, context, address)
    builder.required_signers = [VerificationKeyHash(provider)]
    builder.validity_start = slot
    builder.ttl = slot + ttl_s
    return _build(builder, signing_key, address, "claim")


def refund(
    context: ChainContext,
    *,
    signing_key: PaymentSigningKey,
    address: Address,
    job_id: str | bytes,
    oracle_signature: bytes = b"",
    escrow_utxo: UTxO | None = None,
    ntx: NtxUnit | str | None = None,
    script_address: Address | None = None,
    ex_units: ExecutionUnits | None = None,
    valid_from_slot: int | None = None,
    check_deadline: bool = True,
    verify_locally: bool = True,
    slot_config: SlotConfig | None = None,
    script_utxo: UTxO | None = None,
    ttl_s: int = DEFAULT_TTL_S,
) -> Transaction:
    """The consumer takes the escrow of `job_id` back.

    With the oracle's "refund" signature at any time (for the one output it names, found as in
    `claim`); without one (b"") only after the datum's
    deadline: the validity interval then starts at the first slot after the deadline, and
    `DeadlineNotReached` is raised while that slot is in the future (unless `check_deadline`
    is False, which lets the ledger be the one that refuses).
    """
    consumer = _check_owner(signing_key, address)
    unit = NtxUnit.parse(ntx) if ntx is not None else None
    mine = _candidates(context, job_id, consumer, "consumer", escrow_utxo, script_address, unit)
    escrow = mine[0]
    slot = context.last_block_slot
    start = slot
    if oracle_signature:
        if verify_locally:
            escrow = _signed_for(mine, "refund", consumer, oracle_signature)
    else:
        slots = slot_config or slot_config_for(context)
        # The validator wants the interval's lower bound strictly after the deadline.
        start = slots.posix_ms_to_slot(escrow.datum.deadline) + 1
        if check_deadline and start > slot:
            raise DeadlineNotReached(
                f"the escrow of job {job_id!r} can be refunded without the oracle from slot"
                f" {start}, in {(start - slot) * slots.slot_length_ms // 1000} s"
                f" (the chain is at slot {slot})"
            )
    if valid_from_slot is not None:
        start = valid_from_slot
    _require_fee_funds(context, address, "consumer")
    builder = TransactionBuilder(context)
    builder.add_script_input(
        escrow.utxo,
        script=script_utxo or escrow_script(),
        redeemer=Redeemer(Refund(oracle_signature), ex_units),
    )
    _add_fee_input(builder, context, address)
    builder.required_signers = [VerificationKeyHash(consumer)]
    builder.validity_start = start
    builder.ttl = max(start, slot) + ttl_s
    return _build(builder, signing_key, address, "refund")


def distribute(
    context: ChainContext,
    *,
    signing_key: PaymentSigningKey,
    address: Address,
    job_id: str | bytes,
    oracle_signature: bytes,
    provider_amount: int,
    provider_address: Address,
    escrow_utxo: UTxO | None = None,
    ntx: NtxUnit | str | None = None,
    script_address: Address | None = None,
    ex_units: ExecutionUnits | None = None,
    verify_locally: bool = True,
    script_utxo: UTxO | None = None,
    ttl_s: int = DEFAULT_TTL_S,
) -> Transaction:
    """Split the escrow of `job_id` in one tx with the oracle's "distribute" signature:
    `provider_amount` NTX to `provider_address`, the rest of the lock's NTX and all its ADA to
    the consumer's full address as the lock's datum names it (`consumer_address`: payment key
    and staking part, never the caller's choice). Either party signs and pays the fee (and the
    min ADA of the provider's output); the validator checks the consumer's output (address,
    the lock's ADA, its share) and what the provider's payment key receives, so neither can
    shift a share. `provider_amount` 0 or the whole lock are splits like any other."""
    me = _check_owner(signing_key, address)
    provider = bytes(provider_address.payment_part.payload)
    # The provider submits with its own address; anyone else signing must be the consumer
    # the datum names (a stranger's split is refused by the script: "neither party signed").
    role = "provider" if me == provider else "consumer"
    unit = NtxUnit.parse(ntx) if ntx is not None else None
    mine = _candidates(context, job_id, me, role, escrow_utxo, script_address, unit)
    mine = [e for e in mine if e.datum.provider == provider]
    if not mine:
        raise EscrowNotFound(
            f"no escrow of job {job_id!r} between key hash {me.hex()} and the provider "
            f"{provider.hex()}"
        )
    if verify_locally:
        signed = [e for e in mine if _distribute_signed(e, provider_amount, oracle_signature)]
        if not signed:
            raise OracleSignatureInvalid(
                f"the oracle signature does not verify for a split of {provider_amount} base "
                f"units to the provider of job {job_id!r} from {', '.join(e.ref for e in mine)}"
            )
        mine = signed
    escrow = mine[0]
    if not 0 <= provider_amount <= escrow.datum.amount:
        raise TxError(
            f"the provider's share {provider_amount} is not within the lock's "
            f"{escrow.datum.amount} base units"
        )
    unit = unit or _lock_token(escrow)
    locked = escrow.utxo.output.amount
    consumer_ntx = unit.amount_in(locked) - provider_amount
    back = (
        Value(int(locked.coin), unit.multi_asset(consumer_ntx))
        if consumer_ntx
        else Value(int(locked.coin))
    )
    # The layout the script checks: the consumer's output first, the provider's second.
    outputs = [TransactionOutput(consumer_address(escrow.datum, context.network), back)]
    if provider_amount:
        outputs.append(
            TransactionOutput(provider_address, Value(0, unit.multi_asset(provider_amount)))
        )
    for out in outputs:
        # The consumer's output already holds the lock's ADA, above its own min ADA (the
        # lock's output, with its inline datum, needed more); a top-up only ever adds.
        out.amount.coin = max(int(out.amount.coin), min_lovelace_post_alonzo(out, context))
    _require_fee_funds(context, address, role)
    slot = context.last_block_slot
    builder = TransactionBuilder(context)
    builder.add_script_input(
        escrow.utxo,
        script=script_utxo or escrow_script(),
        redeemer=Redeemer(Distribute(oracle_signature, provider_amount), ex_units),
    )
    _add_fee_input(builder, context, address)
    for out in outputs:
        builder.add_output(out)
    builder.required_signers = [VerificationKeyHash(me)]
    builder.validity_start = slot
    builder.ttl = slot + ttl_s
    return _build(builder, signing_key, address, "distribute")


def _distribute_signed(escrow: Escrow, provider_amount: int, signature: bytes) -> bool:
    datum = escrow.datum
    if not 0 <= provider_amount <= datum.amount:
        return False
    message = distribute_message(provider_amount, escrow.utxo.input)
    try:
        VerifyKey(datum.oracle_key).verify(message, signature)
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True


def _lock_token(escrow: Escrow) -> NtxUnit:
    """The one token an escrow output holds beside ADA (what the validator splits)."""
    found = [
        NtxUnit(bytes(policy.payload), bytes(name.payload))
        for policy, assets in escrow.utxo.output.amount.multi_asset.items()
        for name in assets
    ]
    if len(found) != 1:
        raise EscrowNotFound(f"the escrow {escrow.ref} holds {len(found)} kinds of token, not one")
    return found[0]


def locked_output(
    tx: Transaction, context: ChainContext, *, script_address: Address | None = None
) -> TransactionInput:
    """The escrow output a `lock` tx made, as the input a claim or refund spends (the output
    the oracle's signature must name)."""
    where = script_address or escrow_address(context.network)
    for index, output in enumerate(tx.transaction_body.outputs):
        if output.address == where and decode_escrow_datum(output.datum) is not None:
            return TransactionInput(tx.id, index)
    raise EscrowNotFound(f"tx {tx.id} makes no escrow output at {where}")


def submit(context: ChainContext, tx: Transaction) -> str:
    """Submit through `context.submit_tx`; the tx hash, or SubmitRejected with the reason."""
    try:
        context.submit_tx(tx)
    except TransactionFailedException as exc:
        raise SubmitRejected(str(exc)) from exc
    return str(tx.id)


__all__ = [
    "DeadlineNotReached",
    "Escrow",
    "EscrowNotFound",
    "InsufficientFunds",
    "NtxUnit",
    "OracleSignatureInvalid",
    "SubmitRejected",
    "TxError",
    "claim",
    "decode_escrow_datum",
    "distribute",
    "find_escrows",
    "lock",
    "locked_output",
    "refund",
    "slot_config_for",
    "submit",
]
