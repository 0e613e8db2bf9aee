#!opshin
"""NTX escrow: the spending validator (OpShin source, compiled by scripts/build_contract.py).

docs/payments.md is the contract's specification. This file is OpShin, not plain Python:
it is compiled to Plutus V3, so it may only use what OpShin supports (no imports but the
OpShin standard library, PlutusData classes, no exceptions but assert).

The datum/redeemer classes and `oracle_message` mirror oracle_client/escrow/contract/datum.py,
which is what off-chain code uses; tests/unit/test_escrow_contract.py proves both encode the same
bytes.

This is the Claim and Refund paths only. The split (Distribute, redeemer constr 2) is written
as UPLC in distribute_uplc.py: the build wraps this compiled validator so that a constr 2
redeemer never reaches it (OpShin's code for the split cost 2.1-2.4 % of a tx's memory, the
UPLC 0.7-0.8 %; docs/payments.md).
"""

from opshin.prelude import *
from opshin.std.builtins import *

# Prefixed to every signed message so that nothing else the oracle key signs (service quotes,
# other protocols) can ever be read as a release of escrowed money.
ORACLE_DOMAIN = b"nunet-ntx-escrow/v2"
KIND_WITHDRAW = b"withdraw"
KIND_REFUND = b"refund"


@dataclass()
class EscrowDatum(PlutusData):
    CONSTR_ID = 0
    consumer: bytes
    # The staking part of the consumer's address (Plutus V3's Maybe StakingCredential): only
    # the split reads it (distribute_uplc.py), to pay the consumer's full address.
    consumer_stake: Union[SomeStakingCredential, NoStakingCredential]
    provider: bytes
    oracle_key: bytes
    job_id: bytes
    amount: int
    deadline: int


@dataclass()
class Claim(PlutusData):
    CONSTR_ID = 0
    signature: bytes


@dataclass()
class Refund(PlutusData):
    CONSTR_ID = 1
    signature: bytes


@dataclass()
class OracleMessage(PlutusData):
    CONSTR_ID = 0
    domain: bytes
    kind: bytes
    job_id: bytes
    beneficiary: bytes
    amount: int
    # The escrow output being spent: a signature releases that one output only, never another
    # lock that happens to carry the same datum (the same terms).
    escrow: TxOutRef


# Plutus V3's ScriptInfo for a spend carries the spent output's datum, but opshin.prelude types
# it as the older ScriptPurpose, whose Spending has only the output reference. Reading the
# datum from here saves searching the inputs for our own output.
@dataclass()
class SomeDatum(PlutusData):
    CONSTR_ID = 0
    datum: EscrowDatum


@dataclass()
class NoDatum(PlutusData):
    CONSTR_ID = 1


@dataclass()
class SpendingScript(PlutusData):
    CONSTR_ID = 1
    tx_out_ref: TxOutRef
    datum: Union[SomeDatum, NoDatum]


def oracle_message(
    kind: bytes, job_id: bytes, beneficiary: bytes, amount: int, escrow: TxOutRef
) -> bytes:
    return OracleMessage(ORACLE_DOMAIN, kind, job_id, beneficiary, amount, escrow).to_cbor()


def starts_after(validity: POSIXTimeRange, deadline: int) -> bool:
    # Only the lower bound matters: the ledger rejects a tx before its lower bound, so every
    # possible execution time is later than the deadline.
    lower = validity.lower_bound.limit
    after = False
    if isinstance(lower, FinitePOSIXTime):
        after = lower.time > deadline
    return after


def validator(context: ScriptContext) -> None:
    purpose = context.purpose
    assert isinstance(purpose, Spending), "not a spend"
    raw_info: Anything = purpose
    info: SpendingScript = raw_info
    maybe_datum = info.datum
    assert isinstance(maybe_datum, SomeDatum), "no datum"
    datum = maybe_datum.datum
    # The ledger puts the spent output's reference here: the signature must name it.
    own_ref = info.tx_out_ref
    tx = context.transaction
    # Distribute (constr 2) is handled before this code runs (distribute_uplc.py); Refund
    # first, the one the consumer's deadline path and the provider-fault refund take.
    redeemer: Union[Claim, Refund] = context.redeemer
    if isinstance(redeemer, Refund):
        assert datum.consumer in tx.signatories, "consumer did not sign"
        if not starts_after(tx.validity_range, datum.deadline):
            # An empty signature asks for the deadline path; verifying it would abort with a
            # builtin error instead of this message.
            assert redeemer.signature != b"", "deadline not passed"
            message = oracle_message(
                KIND_REFUND, datum.job_id, datum.consumer, datum.amount, own_ref
            )
            assert verify_ed25519_signature(datum.oracle_key, message, redeemer.signature), (
                "bad oracle signature"
            )
    elif isinstance(redeemer, Claim):
        assert datum.provider in tx.signatories, "provider did not sign"
        message = oracle_message(KIND_WITHDRAW, datum.job_id, datum.provider, datum.amount, own_ref)
        assert verify_ed25519_signature(datum.oracle_key, message, redeemer.signature), (
            "bad oracle signature"
        )
    else:
        assert False, "unknown redeemer"
