"""The NTX escrow contract: the committed artifact, the oracle message, and every case of the
validator, run as the COMMITTED compiled script (uplc) on ScriptContexts that
oracle_client.cardano.plutus builds from real, signed pycardano transactions."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycardano import (
    ExecutionUnits,
    Network,
    Redeemer,
    RedeemerKey,
    RedeemerMap,
    RedeemerTag,
    RedeemerValue,
    Transaction,
    TransactionBody,
    TransactionBuilder,
    TransactionId,
    TransactionInput,
    TransactionOutput,
    TransactionWitnessSet,
    UTxO,
    Value,
    VerificationKeyWitness,
    script_data_hash,
)
from pycardano.plutus import CostModels
from uplc.ast import PlutusByteString, PlutusConstr, PlutusInteger, PlutusMap, data_from_cbor
from uplc.cost_model import (
    default_budget,
    default_builtin_cost_model_plutus_v3,
    default_cek_machine_cost_model_plutus_v3,
)
from uplc.machine import Machine
from uplc.tools import parse

from oracle_client.cardano.plutus import (
    MAX_TX_EX_UNITS,
    ContextError,
    ScriptFailure,
    ScriptResult,
    TxContext,
    evaluate_tx,
    execution_units,
    require_success,
)
from oracle_client.cardano.plutus.evaluate import run_script
from oracle_client.escrow.contract import (
    escrow_address,
    escrow_script,
    escrow_script_hash,
    format_ntx,
    ntx_to_base,
)
from oracle_client.escrow.contract.artifact import ARTIFACT_PATH, load_artifact
from oracle_client.escrow.contract.datum import (
    ORACLE_DOMAIN,
    Claim,
    EscrowDatum,
    EscrowRef,
    Refund,
    base_to_ntx,
    oracle_message,
)
from tests.escrow_world import (
    AMOUNT,
    CONSUMER,
    DEADLINE_SLOT,
    JOB_ID,
    NETWORK,
    NOW_SLOT,
    NTX_NAME,
    NTX_POLICY,
    OTHER_ORACLE,
    PROVIDER,
    SLOTS,
    STRANGER,
    OfflineChain,
    Party,
    cost_model_v3,
    escrow_utxo,
    make_datum,
    oracle_sign,
    run_spend,
    spend_tx,
    wallet_utxo,
)

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "oracle_client" / "escrow" / "contract"
# What the script is built from: the OpShin validator and the split's UPLC.
SOURCES = (CONTRACT / "escrow_validator.py", CONTRACT / "distribute_uplc.py")

# The world's lock (A, escrow_utxo()) and a second lock B with the very same datum, made by
# another transaction at another output index.
LOCK_A = escrow_utxo()
LOCK_B = UTxO(TransactionInput(TransactionId(bytes([0xE6]) * 32), 1), LOCK_A.output)
REF_A = EscrowRef.parse(LOCK_A.input).text

# "Well under" the per-tx limits (maxTxExecutionUnits): each case must stay below 2% of them.
COST_SHARE = 0.02


def assert_ok(result: ScriptResult) -> None:
    assert result.ok, result.describe()


def assert_fails(result: ScriptResult, trace: str) -> None:
    assert not result.ok, "the script accepted a spend it must refuse"
    assert trace in result.logs, result.describe()


def assert_cheap(result: ScriptResult) -> None:
    assert result.cpu < COST_SHARE * MAX_TX_EX_UNITS.steps, result.describe()
    assert result.mem < COST_SHARE * MAX_TX_EX_UNITS.mem, result.describe()


# -- the committed artifact ---------------------------------------------------------------


def test_artifact_is_consistent() -> None:
    artifact = load_artifact()
    assert artifact.script_hash == escrow_script_hash().payload.hex()
    assert str(escrow_address(Network.TESTNET)) == artifact.testnet_address
    assert str(escrow_address(Network.MAINNET)) == artifact.mainnet_address
    assert artifact.testnet_address.startswith("addr_test1w")  # enterprise script address
    assert artifact.size_bytes == len(escrow_script())
    assert artifact.size_bytes < 16_384 // 2  # leaves room in a max-size tx for the rest


def test_artifact_was_built_from_the_current_source() -> None:
    """Cheap guard: a source changed but nobody ran scripts/build_contract.py."""
    assert load_artifact().sources == {
        str(path.relative_to(REPO)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in SOURCES
    }


def test_compiling_again_gives_the_committed_script(tmp_path: Path) -> None:
    """The opshin CLI and the split's UPLC, as the artifact was built (~10-15 s)."""
    out = tmp_path / "escrow.json"
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_contract.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        cwd=REPO,
    )
    fresh = json.loads(out.read_text())
    committed = json.loads(ARTIFACT_PATH.read_text())
    assert fresh["opshin_version"] == committed["opshin_version"]
    assert fresh["script_hash"] == committed["script_hash"]
    assert fresh["cbor_hex"] == committed["cbor_hex"]


# -- the oracle message --------------------------------------------------------------------


def plutus_serialise(data: PlutusConstr) -> bytes:
    """What the chain's serialiseData builtin gives for `data`, via uplc."""
    program = parse(f"(program 1.1.0 [(builtin serialiseData) {data.dumps()}])")
    machine = Machine(
        default_budget(),
        default_cek_machine_cost_model_plutus_v3(),
        default_builtin_cost_model_plutus_v3(),
    )
    result = machine.eval(program).result
    assert not isinstance(result, Exception), result
    return bytes(result.value)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["withdraw", "refund"]),
    job_id=st.binary(min_size=1, max_size=63),
    beneficiary=st.binary(min_size=28, max_size=28),
    amount=st.integers(min_value=1, max_value=2**63),
    tx_id=st.binary(min_size=32, max_size=32),
    index=st.integers(min_value=0, max_value=0xFFFF),
)
def test_oracle_message_is_what_the_validator_serialises(
    kind: str, job_id: bytes, beneficiary: bytes, amount: int, tx_id: bytes, index: int
) -> None:
    """The validator builds OracleMessage(domain, kind, job, beneficiary, amount, own_ref)
    .to_cbor(), i.e. serialiseData of that constructor with the spent output's V3 TxOutRef
    (constr 0 [tx id, index]) last: off-chain bytes must be exactly those."""
    on_chain = PlutusConstr(
        0,
        [
            PlutusByteString(ORACLE_DOMAIN),
            PlutusByteString(kind.encode()),
            PlutusByteString(job_id),
            PlutusByteString(beneficiary),
            PlutusInteger(amount),
            PlutusConstr(0, [PlutusByteString(tx_id), PlutusInteger(index)]),
        ],
    )
    ref = f"{tx_id.hex()}#{index}"
    assert oracle_message(kind, job_id, beneficiary, amount, ref) == plutus_serialise(on_chain)  # type: ignore[arg-type]


def test_oracle_message_known_answer() -> None:
    """Pinned bytes, for the oracle service and anyone re-implementing the message."""
    ref = "ab" * 32 + "#1"
    message = oracle_message("withdraw", "job-1", bytes(range(28)), 5_000_000, ref)
    expected = [
        "d8799f",  # constr 0, indefinite field list
        "53" + ORACLE_DOMAIN.hex(),
        "48" + b"withdraw".hex(),
        "45" + b"job-1".hex(),
        "581c" + bytes(range(28)).hex(),
        "1a004c4b40",  # 5_000_000
        "d8799f" + "5820" + "ab" * 32 + "01" + "ff",  # the escrow output: constr 0 [id, 1]
        "ff",
    ]
    assert message.hex() == "".join(expected)
    assert ORACLE_DOMAIN == b"nunet-ntx-escrow/v2"
    same = [
        oracle_message("withdraw", b"job-1", bytes(range(28)), 5_000_000, ref),
        oracle_message("withdraw", "job-1", bytes(range(28)), 5_000_000, EscrowRef.parse(ref)),
        oracle_message(
            "withdraw", "job-1", bytes(range(28)), 5_000_000, EscrowRef.parse(ref).tx_input()
        ),
    ]
    assert same == [message] * 3
    assert EscrowRef.parse(ref).text == ref


@pytest.mark.parametrize(
    ("kind", "job_id", "pkh", "amount", "ref"),
    [
        ("claim", b"j", bytes(28), 1, REF_A),  # unknown kind
        ("withdraw", b"", bytes(28), 1, REF_A),  # empty job id
        (
            "withdraw",
            b"x" * 64,
            bytes(28),
            1,
            REF_A,
        ),  # uplc and the chain encode 64 bytes differently
        ("withdraw", b"j", bytes(27), 1, REF_A),  # not a key hash
        ("refund", b"j", bytes(28), 0, REF_A),  # nothing to release
        ("withdraw", b"j", bytes(28), 1, "ab" * 31 + "#0"),  # not a tx id
        ("withdraw", b"j", bytes(28), 1, "ab" * 32 + "#65536"),  # no such output index
        ("withdraw", b"j", bytes(28), 1, "ab" * 32 + "#-1"),
        ("withdraw", b"j", bytes(28), 1, "ab" * 32),  # no index at all
        ("withdraw", b"j", bytes(28), 1, "zz" * 32 + "#0"),
    ],
)
def test_oracle_message_refuses_bad_fields(
    kind: str, job_id: bytes, pkh: bytes, amount: int, ref: str
) -> None:
    with pytest.raises(ValueError):
        oracle_message(kind, job_id, pkh, amount, ref)  # type: ignore[arg-type]


def test_datum_validation_and_ntx_units() -> None:
    make_datum().validate()
    with pytest.raises(ValueError, match="provider"):
        make_datum(provider=bytes(27)).validate()
    with pytest.raises(ValueError, match="oracle_key"):
        make_datum(oracle_key=bytes(28)).to_cbor()  # serialising validates
    assert ntx_to_base("1.5") == 1_500_000
    assert ntx_to_base(25) == AMOUNT
    assert base_to_ntx(1) == base_to_ntx(1_000_000) / 1_000_000
    assert format_ntx(AMOUNT) == "25 NTX"
    assert format_ntx(1_500_001) == "1.500001 NTX"
    with pytest.raises(ValueError):
        ntx_to_base("0.0000001")
    with pytest.raises(ValueError):
        ntx_to_base("lots")


# -- claim -----------------------------------------------------------------------------------


def test_claim_by_provider_with_oracle_signature() -> None:
    result = run_spend(Claim(oracle_sign("withdraw", PROVIDER)), payer=PROVIDER)
    assert_ok(result)
    assert_cheap(result)


def test_claim_fails_when_the_provider_did_not_sign() -> None:
    # The right oracle signature, but the tx is signed (and paid) by a stranger.
    result = run_spend(Claim(oracle_sign("withdraw", PROVIDER)), payer=STRANGER)
    assert_fails(result, "provider did not sign")


@pytest.mark.parametrize(
    "signature_for",
    ["another job", "another provider", "another amount", "a refund"],
)
def test_claim_fails_with_an_oracle_signature_for_something_else(signature_for: str) -> None:
    signature = {
        "another job": oracle_sign("withdraw", PROVIDER, job_id=b"other-job"),
        "another provider": oracle_sign("withdraw", STRANGER),
        "another amount": oracle_sign("withdraw", PROVIDER, amount=AMOUNT + 1),
        # a refund decision for the same job, beneficiary and amount, replayed as a claim
        "a refund": oracle_sign("refund", PROVIDER),
    }[signature_for]
    result = run_spend(Claim(signature), payer=PROVIDER)
    assert_fails(result, "bad oracle signature")


def test_claim_fails_with_a_tampered_signature() -> None:
    signature = bytearray(oracle_sign("withdraw", PROVIDER))
    signature[10] ^= 0x01
    assert_fails(run_spend(Claim(bytes(signature)), payer=PROVIDER), "bad oracle signature")


def test_claim_fails_with_a_signature_from_another_oracle_key() -> None:
    signature = oracle_sign("withdraw", PROVIDER, key=OTHER_ORACLE)
    assert_fails(run_spend(Claim(signature), payer=PROVIDER), "bad oracle signature")


def test_claim_fails_without_a_signature() -> None:
    # An empty signature is not a signature: the builtin refuses it, so the script fails.
    assert not run_spend(Claim(b""), payer=PROVIDER).ok


# -- refund ----------------------------------------------------------------------------------


def test_refund_after_the_deadline_by_the_consumer() -> None:
    result = run_spend(Refund(b""), payer=CONSUMER, validity_start=DEADLINE_SLOT + 1, ttl=None)
    assert_ok(result)
    assert_cheap(result)


def test_refund_at_the_deadline_is_too_early() -> None:
    # The range starts exactly at the deadline: "strictly after" is not met.
    result = run_spend(Refund(b""), payer=CONSUMER, validity_start=DEADLINE_SLOT, ttl=None)
    assert_fails(result, "deadline not passed")


def test_refund_before_the_deadline_without_oracle_signature_fails() -> None:
    assert_fails(run_spend(Refund(b""), payer=CONSUMER), "deadline not passed")


def test_refund_without_a_lower_bound_counts_as_before_the_deadline() -> None:
    result = run_spend(Refund(b""), payer=CONSUMER, validity_start=None)
    assert_fails(result, "deadline not passed")


def test_refund_before_the_deadline_with_oracle_refund_signature() -> None:
    result = run_spend(Refund(oracle_sign("refund", CONSUMER)), payer=CONSUMER)
    assert_ok(result)
    assert_cheap(result)


def test_refund_before_the_deadline_with_a_withdraw_signature_fails() -> None:
    result = run_spend(Refund(oracle_sign("withdraw", CONSUMER)), payer=CONSUMER)
    assert_fails(result, "bad oracle signature")


@pytest.mark.parametrize("when", ["after the deadline", "with an oracle refund signature"])
def test_refund_signed_by_someone_else_fails(when: str) -> None:
    if when == "after the deadline":
        result = run_spend(Refund(b""), payer=STRANGER, validity_start=DEADLINE_SLOT + 1)
    else:
        result = run_spend(Refund(oracle_sign("refund", CONSUMER)), payer=STRANGER)
    assert_fails(result, "consumer did not sign")


def test_provider_cannot_refund_to_itself() -> None:
    # Oracle-signed refund for the provider: the datum's consumer must sign, not the provider.
    result = run_spend(Refund(oracle_sign("refund", PROVIDER)), payer=PROVIDER)
    assert_fails(result, "consumer did not sign")


# -- a second lock with the same datum ---------------------------------------------------------


def spend(escrow: UTxO, redeemer: Claim | Refund, payer: Party) -> ScriptResult:
    tx, utxos = spend_tx(redeemer, payer=payer, signers=[payer], escrow=escrow)
    (result,) = evaluate_tx(tx, utxos, SLOTS)
    return result


def release(kind: str, signature: bytes) -> tuple[Claim | Refund, Party]:
    """The redeemer that uses a `kind` signature, and who signs that spend."""
    return (Claim(signature), PROVIDER) if kind == "withdraw" else (Refund(signature), CONSUMER)


@pytest.mark.parametrize("kind", ["withdraw", "refund"])
def test_a_signature_for_one_lock_does_not_release_another_with_the_same_datum(kind: str) -> None:
    party = PROVIDER if kind == "withdraw" else CONSUMER
    assert LOCK_B.output.datum == LOCK_A.output.datum  # the same terms, to the byte
    for mine, other in ((LOCK_A, LOCK_B), (LOCK_B, LOCK_A)):
        redeemer, payer = release(kind, oracle_sign(kind, party, escrow=mine.input))  # type: ignore[arg-type]
        honest = spend(mine, redeemer, payer)
        assert_ok(honest)
        assert_cheap(honest)
        assert_fails(spend(other, redeemer, payer), "bad oracle signature")


@pytest.mark.parametrize("kind", ["withdraw", "refund"])
def test_a_signature_mixing_the_two_locks_references_releases_neither(kind: str) -> None:
    party = PROVIDER if kind == "withdraw" else CONSUMER
    a, b = LOCK_A.input, LOCK_B.input
    mixed = [
        TransactionInput(a.transaction_id, b.index),  # A's tx id with B's index
        TransactionInput(b.transaction_id, a.index),  # B's tx id with A's index
    ]
    for ref in mixed:
        redeemer, payer = release(kind, oracle_sign(kind, party, escrow=ref))  # type: ignore[arg-type]
        for lock in (LOCK_A, LOCK_B):
            assert_fails(spend(lock, redeemer, payer), "bad oracle signature")


def spend_both_tx(
    signatures: tuple[bytes, bytes], *, payer: Party = PROVIDER
) -> tuple[Transaction, list[UTxO]]:
    """One signed tx claiming LOCK_A and LOCK_B, with a Claim redeemer each."""
    funds = wallet_utxo(payer)
    units = ExecutionUnits(mem=1_000_000, steps=1_000_000_000)
    inputs = [funds.input, LOCK_A.input, LOCK_B.input]
    order = sorted(inputs, key=lambda i: (i.transaction_id.payload, i.index))
    redeemers = RedeemerMap(
        {
            RedeemerKey(RedeemerTag.SPEND, order.index(lock.input)): RedeemerValue(
                Claim(signature), units
            )
            for lock, signature in zip((LOCK_A, LOCK_B), signatures, strict=True)
        }
    )
    fee = 600_000
    locked = LOCK_A.output.amount + LOCK_B.output.amount
    change = Value(funds.output.amount.coin + locked.coin - fee, locked.multi_asset)
    body = TransactionBody(
        inputs=inputs,
        outputs=[TransactionOutput(payer.address, change)],
        fee=fee,
        ttl=NOW_SLOT + 600,
        validity_start=NOW_SLOT,
        collateral=[funds.input],
        required_signers=[payer.pkh],
        script_data_hash=script_data_hash(redeemers, None, CostModels({2: cost_model_v3()})),
        network_id=NETWORK,
    )
    witness = VerificationKeyWitness(payer.verification_key, payer.signing_key.sign(body.hash()))
    witness_set = TransactionWitnessSet(
        vkey_witnesses=[witness], plutus_v3_script=[escrow_script()], redeemer=redeemers
    )
    return Transaction(body, witness_set), [LOCK_A, LOCK_B, funds]


def test_one_signature_cannot_release_both_locks_in_one_tx() -> None:
    for_a = oracle_sign("withdraw", PROVIDER, escrow=LOCK_A.input)
    tx, utxos = spend_both_tx((for_a, for_a))
    results = {r.redeemer: r for r in evaluate_tx(tx, utxos, SLOTS)}
    # Inputs sort as wallet (01...), A (e5...), B (e6...): A is spend:1, B spend:2.
    assert_ok(results["spend:1"])
    assert_fails(results["spend:2"], "bad oracle signature")
    with pytest.raises(ScriptFailure, match="spend:2"):
        require_success(list(results.values()))

    # Each output with a signature of its own: both scripts pass (the oracle itself never
    # signs twice for one job; the script only checks that each output was named).
    for_b = oracle_sign("withdraw", PROVIDER, escrow=LOCK_B.input)
    tx, utxos = spend_both_tx((for_a, for_b))
    require_success(evaluate_tx(tx, utxos, SLOTS))


# -- what the script is given ----------------------------------------------------------------


def test_spending_an_output_without_datum_fails() -> None:
    escrow = escrow_utxo()
    bare = UTxO(escrow.input, TransactionOutput(escrow.output.address, escrow.output.amount))
    tx, utxos = spend_tx(
        Claim(oracle_sign("withdraw", PROVIDER)), payer=PROVIDER, signers=[PROVIDER], escrow=bare
    )
    (result,) = evaluate_tx(tx, utxos, SLOTS)
    assert_fails(result, "no datum")


def test_script_context_matches_the_ledger_shape() -> None:
    datum = make_datum()
    escrow = escrow_utxo(datum)
    tx, utxos = spend_tx(Claim(b"s" * 64), payer=CONSUMER, signers=[CONSUMER], escrow=escrow)
    ctx = TxContext(tx, utxos, SLOTS)
    (redeemer,) = ctx.redeemers
    context = ctx.script_context(redeemer)
    tx_info, redeemer_data, script_info = context.fields
    assert context.constructor == 0 and len(tx_info.fields) == 16
    inputs, ref_inputs, outputs, fee, mint, certs, withdrawals, validity = tx_info.fields[:8]
    signatories, redeemers, datums, tx_id, votes, proposals, treasury, donation = tx_info.fields[8:]

    # Inputs sorted by (tx id, index): the escrow (e5...) before the consumer's wallet (f0...).
    refs = [i.fields[0] for i in inputs.value]
    assert [r.fields[0].value[0] for r in refs] == [0xE5, 0xF0]
    escrow_out = inputs.value[0].fields[1]
    address, value, out_datum, ref_script = escrow_out.fields
    assert address == PlutusConstr(
        0, [PlutusConstr(1, [PlutusByteString(escrow_script_hash().payload)]), PlutusConstr(1, [])]
    )
    assert value == PlutusMap(
        {
            PlutusByteString(b""): PlutusMap({PlutusByteString(b""): PlutusInteger(2_000_000)}),
            PlutusByteString(NTX_POLICY.payload): PlutusMap(
                {PlutusByteString(NTX_NAME.payload): PlutusInteger(AMOUNT)}
            ),
        }
    )
    assert out_datum == PlutusConstr(2, [data_from_cbor(datum.to_cbor())])
    assert ref_script == PlutusConstr(1, [])
    assert ref_inputs.value == [] and len(outputs.value) == 1
    assert fee == PlutusInteger(tx.transaction_body.fee)
    assert mint == PlutusMap({}) and certs.value == [] and withdrawals == PlutusMap({})

    # Validity: [start, ttl) in POSIX ms, lower bound closed, upper bound open.
    start_ms, ttl_ms = SLOTS.slot_to_posix_ms(NOW_SLOT), SLOTS.slot_to_posix_ms(NOW_SLOT + 600)
    assert validity == PlutusConstr(
        0,
        [
            PlutusConstr(0, [PlutusConstr(1, [PlutusInteger(start_ms)]), PlutusConstr(1, [])]),
            PlutusConstr(0, [PlutusConstr(1, [PlutusInteger(ttl_ms)]), PlutusConstr(0, [])]),
        ],
    )
    assert signatories.value == [PlutusByteString(CONSUMER.pkh.payload)]
    assert redeemers == PlutusMap({PlutusConstr(1, [refs[0]]): redeemer_data})
    assert datums == PlutusMap({})  # inline datums are not witness datums
    assert tx_id == PlutusByteString(tx.transaction_body.hash())
    assert votes == PlutusMap({}) and proposals.value == []
    assert treasury == PlutusConstr(1, []) and donation == PlutusConstr(1, [])

    assert redeemer_data == data_from_cbor(Claim(b"s" * 64).to_cbor())
    # V3 ScriptInfo for a spend: SpendingScript(out_ref, Just datum).
    assert script_info == PlutusConstr(
        1, [refs[0], PlutusConstr(0, [data_from_cbor(datum.to_cbor())])]
    )


def test_unbounded_validity_is_neg_inf_to_pos_inf() -> None:
    tx, utxos = spend_tx(
        Refund(b""),
        payer=CONSUMER,
        signers=[CONSUMER],
        escrow=escrow_utxo(),
        validity_start=None,
        ttl=None,
    )
    validity = TxContext(tx, utxos, SLOTS).tx_info.fields[7]
    assert validity == PlutusConstr(
        0,
        [
            PlutusConstr(0, [PlutusConstr(0, []), PlutusConstr(1, [])]),
            PlutusConstr(0, [PlutusConstr(2, []), PlutusConstr(1, [])]),
        ],
    )


def test_evaluate_refuses_what_it_cannot_see() -> None:
    tx, utxos = spend_tx(Refund(b""), payer=CONSUMER, signers=[CONSUMER], escrow=escrow_utxo())
    with pytest.raises(ContextError, match="not among the resolved UTxOs"):
        evaluate_tx(tx, utxos[:1], SLOTS)
    tx.transaction_witness_set.plutus_v3_script = None
    with pytest.raises(ContextError, match="neither witnessed nor referenced"):
        evaluate_tx(tx, utxos, SLOTS)
    # No redeemers, no scripts to run: nothing is asked of the inputs.
    tx.transaction_witness_set.redeemer = None
    assert evaluate_tx(tx, [], SLOTS) == []


def test_reference_script_is_found_in_a_reference_input() -> None:
    tx, utxos = spend_tx(
        Claim(oracle_sign("withdraw", PROVIDER)),
        payer=PROVIDER,
        signers=[PROVIDER],
        escrow=escrow_utxo(),
    )
    holder = wallet_utxo(STRANGER, index=7)
    holder.output.script = escrow_script()
    tx.transaction_body.reference_inputs = [holder.input]
    tx.transaction_witness_set.plutus_v3_script = None
    (result,) = evaluate_tx(tx, [*utxos, holder], SLOTS)
    assert_ok(result)


def test_failures_are_reported_with_the_trace() -> None:
    tx, utxos = spend_tx(Refund(b""), payer=CONSUMER, signers=[CONSUMER], escrow=escrow_utxo())
    results = evaluate_tx(tx, utxos, SLOTS)
    with pytest.raises(ScriptFailure, match=r"spend:0.*deadline not passed") as failure:
        execution_units(results)
    assert failure.value.results == results
    with pytest.raises(ScriptFailure, match="deadline not passed"):
        require_success(results)


def test_require_success_holds_scripts_to_their_declared_units() -> None:
    tx, utxos = spend_tx(
        Refund(oracle_sign("refund", CONSUMER)),
        payer=CONSUMER,
        signers=[CONSUMER],
        escrow=escrow_utxo(),
    )
    (result,) = evaluate_tx(tx, utxos, SLOTS)
    assert result.ok and result.within_declared  # spend_tx declares 1e9 steps / 1e6 mem
    require_success([result])
    assert execution_units([result]) == {"spend:0": result.ex_units}
    assert execution_units([result])["spend:0"] is not execution_units([result])["spend:0"]
    assert result.fee_lovelace > 0

    under = type(result)(**{**result.__dict__, "declared": ExecutionUnits(mem=100, steps=100)})
    with pytest.raises(ScriptFailure, match="declared"):
        require_success([under])


def test_run_script_reports_an_exhausted_budget() -> None:
    tx, utxos = spend_tx(
        Claim(oracle_sign("withdraw", PROVIDER)),
        payer=PROVIDER,
        signers=[PROVIDER],
        escrow=escrow_utxo(),
    )
    ctx = TxContext(tx, utxos, SLOTS)
    units, _logs, error = run_script(
        bytes(escrow_script()),
        ctx.script_context(ctx.redeemers[0]),
        ExecutionUnits(mem=10_000, steps=1_000_000),
    )
    assert error == "exhausted its execution budget"
    assert units.steps >= 1_000_000  # it ran until the budget was gone


def test_pycardano_builder_gets_execution_units_from_evaluate_tx() -> None:
    """pycardano's TransactionBuilder asks the chain context to evaluate its draft (fake
    witnesses, placeholder units): the built claim then passes the ledger's check."""
    escrow, funds = escrow_utxo(), wallet_utxo(PROVIDER)
    chain = OfflineChain([escrow, funds])
    builder = TransactionBuilder(chain)
    builder.add_script_input(
        escrow, script=escrow_script(), redeemer=Redeemer(Claim(oracle_sign("withdraw", PROVIDER)))
    )
    builder.add_input(funds)
    builder.required_signers = [PROVIDER.pkh]
    builder.validity_start, builder.ttl = NOW_SLOT, NOW_SLOT + 600
    tx = builder.build_and_sign([PROVIDER.signing_key], change_address=PROVIDER.address)

    results = evaluate_tx(tx, [escrow, funds], SLOTS)
    require_success(results)
    (result,) = results
    assert result.redeemer == "spend:1"  # the wallet input (01...) sorts before the escrow
    assert result.declared is not None and result.declared.steps > result.cpu  # builder margin
    assert tx.transaction_body.network_id is None or tx.transaction_body.network_id == NETWORK


def test_datum_round_trips_through_plutus_data() -> None:
    datum = make_datum(job_id=JOB_ID)
    assert EscrowDatum.from_cbor(datum.to_cbor()) == datum
    assert Refund().signature == b""
