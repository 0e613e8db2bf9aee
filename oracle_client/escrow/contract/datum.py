"""The escrow's datum, redeemers and the oracle's release message (docs/payments.md).

These classes are the off-chain twins of the ones in escrow_validator.py (and, for
Distribute and DistributeMessage, of the fields distribute_uplc.py reads and builds): same
constructor ids, same field order. `oracle_message` builds the exact bytes the validator builds with
`serialise_data`, so a signature made here verifies on-chain (tests/unit/test_escrow_contract.py
checks both the bytes and the signature path).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal, Union

from pycardano import (
    Address,
    Network,
    PlutusData,
    PointerAddress,
    ScriptHash,
    TransactionId,
    TransactionInput,
    VerificationKeyHash,
)

# Must equal ORACLE_DOMAIN in escrow_validator.py: it keeps any other message the oracle key
# signs (service quotes...) from ever verifying as a release of money. v2: the message names
# the escrow output it releases.
ORACLE_DOMAIN = b"nunet-ntx-escrow/v2"
OracleKind = Literal["withdraw", "refund"]
ORACLE_KINDS: tuple[OracleKind, ...] = ("withdraw", "refund")

PKH_BYTES = 28
TX_ID_BYTES = 32
MAX_OUTPUT_INDEX = 0xFFFF  # Conway's CDDL: an output index is a uint .size 2
ORACLE_KEY_BYTES = 32
SIGNATURE_BYTES = 64
# Plutus serialises byte strings of up to 64 bytes in one piece, uplc 1.3 (our local
# evaluator) already chunks a 64-byte one: below 64 both agree on the message bytes.
JOB_ID_MAX_BYTES = 63

NTX_DECIMALS = 6
NTX_UNIT = 10**NTX_DECIMALS


# The consumer's staking part, as Plutus V3's Address carries it (`Maybe StakingCredential`):
# the validator compares the split's first output's address with
# Address(PubKeyCredential(consumer), consumer_stake) as Data, so these are exactly the
# ledger's shapes (oracle_client/cardano/plutus/context.py `address_data` builds the same).
# `typing.Union`, not `|`: pycardano decodes a field typed with `|` as nothing at all.


@dataclass
class PubKeyCredential(PlutusData):
    CONSTR_ID = 0
    hash: bytes


@dataclass
class ScriptCredential(PlutusData):
    CONSTR_ID = 1
    hash: bytes


@dataclass
class StakingHash(PlutusData):
    CONSTR_ID = 0
    credential: Union[PubKeyCredential, ScriptCredential]  # noqa: UP007


@dataclass
class SomeStakingCredential(PlutusData):
    """Just a staking credential: a base address's stake key (or script)."""

    CONSTR_ID = 0
    staking: StakingHash


@dataclass
class NoStakingCredential(PlutusData):
    """Nothing: an enterprise address."""

    CONSTR_ID = 1


ConsumerStake = Union[SomeStakingCredential, NoStakingCredential]  # noqa: UP007


def staking_of(address: Address) -> ConsumerStake:
    """The staking part of `address` as the datum keeps it. A pointer address is refused:
    Conway no longer counts its stake, and the escrow keeps a key or script hash only."""
    part = address.staking_part
    if part is None:
        return NoStakingCredential()
    if isinstance(part, PointerAddress):
        raise ValueError(f"{address} is a pointer address: lock from a base or enterprise address")
    credential: PubKeyCredential | ScriptCredential
    if isinstance(part, ScriptHash):
        credential = ScriptCredential(bytes(part.payload))
    else:
        credential = PubKeyCredential(bytes(part.payload))
    return SomeStakingCredential(StakingHash(credential))


def consumer_address(datum: EscrowDatum, network: Network) -> Address:
    """The consumer's full address (payment key and staking part) as the lock's datum names
    it: where a split sends the consumer's share and the lock's ADA (docs/payments.md)."""
    stake = datum.consumer_stake
    payment = VerificationKeyHash(datum.consumer)
    if isinstance(stake, NoStakingCredential):
        return Address(payment, network=network)
    credential = stake.staking.credential
    staking: VerificationKeyHash | ScriptHash
    if isinstance(credential, ScriptCredential):
        staking = ScriptHash(credential.hash)
    else:
        staking = VerificationKeyHash(credential.hash)
    return Address(payment, staking, network=network)


@dataclass
class EscrowDatum(PlutusData):
    """The inline datum of an escrow output (constr 0). `consumer_stake`: the staking part of
    the consumer's address at lock time; a split pays the consumer's share to
    (consumer, consumer_stake) exactly, the address the consumer's wallet reads."""

    CONSTR_ID = 0
    consumer: bytes
    consumer_stake: ConsumerStake
    provider: bytes
    oracle_key: bytes
    job_id: bytes
    amount: int
    deadline: int

    def validate(self) -> None:
        """Raise ValueError for a datum the validator could never release as intended.
        pycardano also calls this whenever it serialises the datum, so a bad one can't be
        locked; decoding does not call it, so call it on datums read from the chain."""
        super().validate()
        _check_len("consumer", self.consumer, PKH_BYTES)
        _check_stake(self.consumer_stake)
        _check_len("provider", self.provider, PKH_BYTES)
        _check_len("oracle_key", self.oracle_key, ORACLE_KEY_BYTES)
        _check_job_id(self.job_id)
        if self.amount <= 0:
            raise ValueError(f"amount must be positive, got {self.amount}")
        if self.deadline <= 0:
            raise ValueError(f"deadline must be POSIX milliseconds, got {self.deadline}")


@dataclass
class Claim(PlutusData):
    """Provider takes the escrow: `signature` is the oracle's over the withdraw message."""

    CONSTR_ID = 0
    signature: bytes


@dataclass
class Refund(PlutusData):
    """Consumer takes it back: oracle's refund signature, or b"" once the deadline passed."""

    CONSTR_ID = 1
    signature: bytes = b""


@dataclass
class Distribute(PlutusData):
    """Split the escrow (issue 12): `provider_amount` NTX to the provider, the rest of the
    datum's amount to the consumer, in one tx. `signature` is the oracle's over
    `distribute_message(provider_amount, escrow)`, the share and the output spent; either
    party may submit, since the validator checks what each one receives: the consumer at
    its full address (the datum's key and staking part) with the lock's ADA, the provider
    at its payment key."""

    CONSTR_ID = 2
    signature: bytes
    provider_amount: int


@dataclass
class EscrowRef(PlutusData):
    """One escrow output: the lock's transaction id and output index, encoded as Plutus V3's
    TxOutRef (constr 0 [tx id bytes, index]), which is what the validator finds as its own
    spent output in the ScriptContext."""

    CONSTR_ID = 0
    tx_id: bytes
    index: int

    def validate(self) -> None:
        super().validate()
        _check_len("escrow tx id", self.tx_id, TX_ID_BYTES)
        if not 0 <= self.index <= MAX_OUTPUT_INDEX:
            raise ValueError(f"escrow output index must be 0..{MAX_OUTPUT_INDEX}, got {self.index}")

    @classmethod
    def parse(cls, ref: EscrowRef | TransactionInput | str) -> EscrowRef:
        """From "txhash#index" (the API's UtxoRef) or a pycardano TransactionInput."""
        if isinstance(ref, EscrowRef):
            found = ref
        elif isinstance(ref, TransactionInput):
            found = cls(bytes(ref.transaction_id.payload), int(ref.index))
        else:
            tx_hex, sep, index = ref.partition("#")
            try:
                if not sep or not index.isdigit() or len(index) > 5:
                    raise ValueError
                found = cls(bytes.fromhex(tx_hex), int(index))
            except ValueError:
                raise ValueError(
                    f"not an escrow output reference (txhash#index): {ref!r}"
                ) from None
        found.validate()
        return found

    @property
    def text(self) -> str:
        """The "txhash#index" form the oracle API and Blockfrost use."""
        return f"{self.tx_id.hex()}#{self.index}"

    def tx_input(self) -> TransactionInput:
        return TransactionInput(TransactionId(self.tx_id), self.index)


@dataclass
class OracleMessage(PlutusData):
    """What the oracle signs, as CBOR: the validator serialises the same structure."""

    CONSTR_ID = 0
    domain: bytes
    kind: bytes
    job_id: bytes
    beneficiary: bytes
    amount: int
    escrow: EscrowRef


@dataclass
class DistributeMessage(PlutusData):
    """What the oracle signs for a split. Its own constructor id: it can never be read as an
    OracleMessage (a withdraw or refund), nor one as it. Only the provider's share and the
    escrow output: the output reference names one output ever, whose datum (job, parties,
    lock amount, oracle key) the validator reads and the oracle checked on chain before
    signing, so signing those fields again would only cost the script (docs/payments.md)."""

    CONSTR_ID = 1
    domain: bytes
    kind: bytes
    provider_amount: int
    escrow: EscrowRef


KIND_DISTRIBUTE = b"distribute"


def distribute_message(provider_amount: int, escrow: EscrowRef | TransactionInput | str) -> bytes:
    """The bytes the oracle signs to split escrow output `escrow`: `provider_amount` base
    units to the provider its datum names, the rest of the datum's amount to its consumer
    (the validator derives the consumer's share, so the two always make up the lock)."""
    if provider_amount < 0:
        raise ValueError(f"a provider's share must be non-negative, got {provider_amount}")
    message = DistributeMessage(
        ORACLE_DOMAIN, KIND_DISTRIBUTE, provider_amount, EscrowRef.parse(escrow)
    )
    return message.to_cbor()


def oracle_message(
    kind: OracleKind,
    job_id: str | bytes,
    beneficiary_pkh: bytes,
    amount: int,
    escrow: EscrowRef | TransactionInput | str,
) -> bytes:
    """The bytes the oracle signs to release `amount` base units of job `job_id`'s escrow
    output `escrow` ("txhash#index", the lock being spent) to `beneficiary_pkh` (the provider
    for "withdraw", the consumer for "refund"). Naming the output keeps one signature from
    releasing a second lock that carries the same datum."""
    if kind not in ORACLE_KINDS:
        raise ValueError(f"kind must be one of {ORACLE_KINDS}, got {kind!r}")
    job = job_id.encode("utf-8") if isinstance(job_id, str) else bytes(job_id)
    _check_job_id(job)
    _check_len("beneficiary_pkh", beneficiary_pkh, PKH_BYTES)
    if amount <= 0:
        raise ValueError(f"amount must be positive, got {amount}")
    message = OracleMessage(
        ORACLE_DOMAIN,
        kind.encode("ascii"),
        job,
        bytes(beneficiary_pkh),
        amount,
        EscrowRef.parse(escrow),
    )
    return message.to_cbor()


def ntx_to_base(ntx: Decimal | int | str) -> int:
    """NTX (e.g. "1.5") to base units (1_500_000); refuses sub-unit precision."""
    try:
        value = Decimal(ntx) if not isinstance(ntx, Decimal) else ntx
    except InvalidOperation as exc:
        raise ValueError(f"not an NTX amount: {ntx!r}") from exc
    if not value.is_finite():
        raise ValueError(f"not an NTX amount: {ntx!r}")
    base = value * NTX_UNIT
    if base != base.to_integral_value():
        raise ValueError(f"{ntx} NTX has more than {NTX_DECIMALS} decimals")
    return int(base)


def base_to_ntx(base: int) -> Decimal:
    """Base units to NTX, exact."""
    return Decimal(base) / NTX_UNIT


def format_ntx(base: int) -> str:
    """Base units as a human NTX string: 1_500_000 -> "1.5 NTX"."""
    text = f"{base_to_ntx(base):f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text} NTX"


def _check_len(name: str, value: bytes, size: int) -> None:
    if len(value) != size:
        raise ValueError(f"{name} must be {size} bytes, got {len(value)}")


def _check_stake(stake: object) -> None:
    """A staking part the ledger can put in an address: nothing, or a 28-byte key or script
    hash. Anything else (a decoded datum is not type-checked) could never match an output's
    address, and no split could ever spend the lock."""
    if isinstance(stake, NoStakingCredential):
        return
    staking = getattr(stake, "staking", None)
    credential = getattr(staking, "credential", None)
    if not (
        isinstance(stake, SomeStakingCredential)
        and isinstance(staking, StakingHash)
        and isinstance(credential, PubKeyCredential | ScriptCredential)
        and isinstance(credential.hash, bytes)
    ):
        raise ValueError(f"consumer_stake must be a staking credential or none, got {stake!r}")
    _check_len("consumer stake hash", credential.hash, PKH_BYTES)


def _check_job_id(job_id: bytes) -> None:
    if not 0 < len(job_id) <= JOB_ID_MAX_BYTES:
        raise ValueError(f"job id must be 1..{JOB_ID_MAX_BYTES} bytes, got {len(job_id)}")
