#!opshin
"""NTX escrow: the spending validator (OpShin source, compiled by scripts/build_contract.py).

docs/payments.md is the contract's specification. This file is OpShin, not plain Python:
it is compiled to Plutus V3, so it may only use what OpShin supports (no imports but the
OpShin standard library, PlutusData classes, no exceptions but assert).

The datum/redeemer classes and `oracle_message` mirror oracle_client/escrow/contract/datum.py,
which is what off-chain code uses; tests/test_escrow_contract.py proves both encode the same
bytes.
"""

from opshin.prelude import *
from opshin.std.builtins import *

# Prefixed to every signed message so that nothing else the oracle key signs (service quotes,
# other protocols) can ever be read as a release of escrowed money.
ORACLE_DOMAIN = b"nunet-ntx-escrow/v2"
KIND_WITHDRAW = b"withdraw"
KIND_REFUND = b"refund"
KIND_DISTRIBUTE = b"distribute"


@dataclass()
class EscrowDatum(PlutusData):
    CONSTR_ID = 0
    consumer: bytes
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
class Distribute(PlutusData):
    # The lock split in one tx: provider_amount NTX to the provider, the rest to the consumer.
    CONSTR_ID = 2
    signature: bytes
    provider_amount: int


@dataclass()
class DistributeMessage(PlutusData):
    # Its own constructor id: a split can never be read as a withdraw or refund, nor they as it.
    # No job, parties or consumer share: the output reference names one output ever, and its
    # datum (which this script reads) fixes them; signing them again cost ~0.1 % of memory.
    CONSTR_ID = 1
    domain: bytes
    kind: bytes
    provider_amount: int
    escrow: TxOutRef


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
    redeemer: Union[Claim, Refund, Distribute] = context.redeemer
    # The settlement first: each isinstance that fails on the way costs its execution. Its
    # checks are written here, not in a function: an OpShin call costs ~0.02 % of the memory
    # budget.
    if isinstance(redeemer, Distribute):
        # Either party may submit (the outputs are checked), but not a stranger, who could keep
        # the lock's ADA.
        # The submitter is the builder's one required signer: checking the first signer before
        # a search of the list is ~0.12 % of the memory budget less for the consumer (a tx
        # without signers fails here too, with a builtin error instead of the message).
        signatories = tx.signatories
        first = signatories[0]
        assert (
            first == datum.provider
            or first == datum.consumer
            or datum.provider in signatories
            or datum.consumer in signatories
        ), "neither party signed"
        provider_amount = redeemer.provider_amount
        assert provider_amount >= 0 and provider_amount <= datum.amount, "bad split"
        consumer_amount = datum.amount - provider_amount
        message = DistributeMessage(
            ORACLE_DOMAIN,
            KIND_DISTRIBUTE,
            provider_amount,
            own_ref,
        ).to_cbor()
        assert verify_ed25519_signature(datum.oracle_key, message, redeemer.signature), (
            "bad oracle signature"
        )
        # One script input, ours: two escrows split in one tx could both count the same payment
        # (double satisfaction).
        script_inputs = 0
        locked: Value = {}
        for tx_input in tx.inputs:
            spent = tx_input.resolved
            if isinstance(spent.address.payment_credential, ScriptCredential):
                script_inputs += 1
                locked = spent.value
        assert script_inputs == 1, "one escrow per distribute tx"
        # The one token beside ADA in the lock: the NTX the escrow splits. The ledger orders a
        # Value's policies, ADA's empty one first. Indexing the entries, not a loop over them
        # (~0.13 % of the memory budget less).
        entries = locked.items()
        assert len(entries) == 2, "a lock holds ADA and one token"
        token = entries[1]
        policy = token[0]
        names = token[1].items()
        assert len(names) == 1, "a lock holds ADA and one token"
        name = names[0][0]
        # The layout transactions.distribute builds: the consumer's output first, the provider's
        # second. Each is checked where it must be, instead of a search of every output.
        outputs = tx.outputs
        if consumer_amount > 0:
            back = outputs[0]
            assert back.address.payment_credential == PubKeyCredential(datum.consumer), (
                "consumer underpaid"
            )
            assert back.value.get(policy, {b"": 0}).get(name, 0) >= consumer_amount, (
                "consumer underpaid"
            )
        if provider_amount > 0:
            paid = outputs[1]
            assert paid.address.payment_credential == PubKeyCredential(datum.provider), (
                "provider underpaid"
            )
            assert paid.value.get(policy, {b"": 0}).get(name, 0) >= provider_amount, (
                "provider underpaid"
            )
    elif isinstance(redeemer, Refund):
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
