"""Lock, claim and refund NTX through the real escrow script on the local ledger.

The ledger is the real server on 127.0.0.1; the chain context is pycardano's real
BlockFrostChainContext; the oracle is a PyNaCl key made here. Refusals are checked where the
ledger makes them: the transactions that must fail are still built and submitted, either with
the builder's local checks switched off or with fixed ex-units (so no evaluation step stops
them before the ledger's own submit checks run the script).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey
from pycardano import (
    Address,
    BlockFrostChainContext,
    ExecutionUnits,
    Network,
    PaymentSigningKey,
    Transaction,
    TransactionBuilder,
    TransactionId,
    TransactionInput,
    TransactionOutput,
    Value,
    VerificationKeyWitness,
    min_lovelace_post_alonzo,
)

from oracle_client.escrow import transactions as T
from oracle_client.escrow.contract import (
    Claim,
    EscrowDatum,
    distribute_message,
    escrow_address,
    escrow_script,
    oracle_message,
    staking_of,
)
from oracle_client.ledger import LedgerServer, start_server

logging.getLogger("PyCardano").setLevel(logging.ERROR)

JOB = "job-7f3a"
AMOUNT = 25_000_000  # 25 NTX
HOUR_MS = 3_600_000
# Enough for the escrow script (~100M steps / ~0.2M mem), given when no evaluation is wanted.
FIXED_UNITS = ExecutionUnits(mem=2_000_000, steps=1_000_000_000)


class Wallet:
    def __init__(self) -> None:
        self.sk = PaymentSigningKey.generate()
        self.pkh = self.sk.to_verification_key().hash()
        self.address = Address(self.pkh, network=Network.TESTNET)


@dataclass
class World:
    ledger: LedgerServer
    ctx: BlockFrostChainContext
    consumer: Wallet
    provider: Wallet
    oracle: SigningKey
    datum: EscrowDatum
    last_lock: TransactionInput | None = None

    def balance(self, wallet: Wallet) -> dict[str, int]:
        return self.ledger.state.balance(str(wallet.address))

    def ntx(self, wallet: Wallet) -> int:
        return self.balance(wallet).get(self.ledger.ntx_unit, 0)

    def signature(
        self, kind: str, beneficiary: Wallet, escrow: TransactionInput | None = None
    ) -> bytes:
        """The oracle's signature releasing `escrow` (default: the last lock made)."""
        spent = escrow or self.last_lock or TransactionInput(TransactionId(bytes(32)), 0)
        message = oracle_message(kind, JOB, beneficiary.pkh.payload, AMOUNT, spent)  # type: ignore[arg-type]
        return bytes(self.oracle.sign(message).signature)

    def lock(self) -> str:
        tx = T.lock(
            self.ctx,
            signing_key=self.consumer.sk,
            address=self.consumer.address,
            datum=self.datum,
            ntx=self.ledger.ntx_unit,
        )
        self.last_lock = T.locked_output(tx, self.ctx)
        return T.submit(self.ctx, tx)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    ledger = start_server(tmp_path / "ledger.db")
    try:
        ctx = BlockFrostChainContext("local", base_url=ledger.url)
        consumer, provider, oracle = Wallet(), Wallet(), SigningKey.generate()
        ledger.faucet(consumer.address, ada=100, ntx=100)
        ledger.faucet(provider.address, ada=20)
        datum = EscrowDatum(
            consumer=consumer.pkh.payload,
            consumer_stake=staking_of(consumer.address),
            provider=provider.pkh.payload,
            oracle_key=bytes(oracle.verify_key),
            job_id=JOB.encode(),
            amount=AMOUNT,
            deadline=ledger.clock.now_ms() + HOUR_MS,
        )
        yield World(ledger, ctx, consumer, provider, oracle, datum)
    finally:
        ledger.stop()


def test_lock_then_claim_with_the_oracle_signature(world: World) -> None:
    world.lock()
    [escrow] = T.find_escrows(world.ctx, JOB)
    assert escrow.datum == world.datum
    assert escrow.utxo.output.address == escrow_address(Network.TESTNET)
    assert world.ntx(world.consumer) == 100_000_000 - AMOUNT

    tx = T.claim(
        world.ctx,
        signing_key=world.provider.sk,
        address=world.provider.address,
        job_id=JOB,
        oracle_signature=world.signature("withdraw", world.provider),
        ntx=world.ledger.ntx_unit,
    )
    T.submit(world.ctx, tx)

    assert world.ntx(world.provider) == AMOUNT
    assert T.find_escrows(world.ctx, JOB) == []
    assert tx.transaction_body.required_signers == [world.provider.pkh]
    assert tx.transaction_body.collateral  # scripts ran: collateral was posted, not taken
    assert world.balance(world.provider)["lovelace"] > 20_000_000 - 1_000_000


def test_claim_with_a_reference_script(world: World) -> None:
    world.lock()
    # Publish the escrow script once, in an output of its own (any address will do).
    builder = TransactionBuilder(world.ctx)
    builder.add_input_address(world.consumer.address)
    holder = TransactionOutput(world.consumer.address, Value(0), script=escrow_script())
    holder.amount.coin = min_lovelace_post_alonzo(holder, world.ctx)
    builder.add_output(holder)
    publish = builder.build_and_sign([world.consumer.sk], change_address=world.consumer.address)
    T.submit(world.ctx, publish)
    [ref] = [u for u in world.ctx.utxos(world.consumer.address) if u.output.script is not None]
    assert ref.output.script == escrow_script()  # served back through /scripts/{hash}/cbor

    tx = T.claim(
        world.ctx,
        signing_key=world.provider.sk,
        address=world.provider.address,
        job_id=JOB,
        oracle_signature=world.signature("withdraw", world.provider),
        script_utxo=ref,
    )
    assert not tx.transaction_witness_set.plutus_v3_script
    assert tx.transaction_body.reference_inputs
    T.submit(world.ctx, tx)
    assert world.ntx(world.provider) == AMOUNT


def test_claim_with_a_tampered_signature_is_rejected_by_the_ledger(world: World) -> None:
    world.lock()
    good = world.signature("withdraw", world.provider)
    tampered = bytes([good[0] ^ 1]) + good[1:]
    common = dict(signing_key=world.provider.sk, address=world.provider.address, job_id=JOB)
    # The client's own check comes first...
    with pytest.raises(T.OracleSignatureInvalid):
        T.claim(world.ctx, oracle_signature=tampered, **common)  # type: ignore[arg-type]
    # ...without it, the ledger's evaluation endpoint refuses to price the script...
    with pytest.raises(T.TxError, match="script evaluation failed"):
        T.claim(world.ctx, oracle_signature=tampered, verify_locally=False, **common)  # type: ignore[arg-type]
    # ...and with fixed ex-units the ledger's submit runs the script and refuses the tx.
    tx = T.claim(
        world.ctx,
        oracle_signature=tampered,
        verify_locally=False,
        ex_units=FIXED_UNITS,
        **common,  # type: ignore[arg-type]
    )
    with pytest.raises(T.SubmitRejected, match=r"script spend:\d failed"):
        T.submit(world.ctx, tx)
    # A signature over the refund message does not release a withdrawal either.
    wrong_kind = world.signature("refund", world.provider)
    tx = T.claim(
        world.ctx,
        oracle_signature=wrong_kind,
        verify_locally=False,
        ex_units=FIXED_UNITS,
        **common,  # type: ignore[arg-type]
    )
    with pytest.raises(T.SubmitRejected, match="failed"):
        T.submit(world.ctx, tx)
    assert world.ntx(world.provider) == 0
    assert len(T.find_escrows(world.ctx, JOB)) == 1


def test_ledger_checks_units_collateral_and_script_data_hash(world: World) -> None:
    world.lock()
    sig = world.signature("withdraw", world.provider)
    common = dict(
        signing_key=world.provider.sk,
        address=world.provider.address,
        job_id=JOB,
        oracle_signature=sig,
    )
    # The right signature, but the redeemer declares fewer units than the script uses.
    stingy = T.claim(world.ctx, ex_units=ExecutionUnits(1_000, 1_000), **common)  # type: ignore[arg-type]
    with pytest.raises(T.SubmitRejected, match="more than the 1000 / 1000 its redeemer declares"):
        T.submit(world.ctx, stingy)

    good = T.claim(world.ctx, **common)  # type: ignore[arg-type]
    # Redeemers live in the witness set: changing one leaves the signature valid, but not the
    # body's script data hash.
    swapped = Transaction.from_cbor(good.to_cbor())
    redeemers = swapped.transaction_witness_set.redeemer  # a map, as pycardano builds it
    [key] = list(redeemers)
    redeemers[key].data = Claim(bytes(64))
    with pytest.raises(T.SubmitRejected, match="script data hash is"):
        T.submit(world.ctx, swapped)

    bare = Transaction.from_cbor(good.to_cbor())
    body = bare.transaction_body
    body.collateral, body.collateral_return, body.total_collateral = None, None, None
    bare.transaction_witness_set.vkey_witnesses = [
        VerificationKeyWitness(
            world.provider.sk.to_verification_key(), world.provider.sk.sign(body.hash())
        )
    ]
    with pytest.raises(T.SubmitRejected, match="runs scripts but has no collateral"):
        T.submit(world.ctx, bare)

    T.submit(world.ctx, good)  # none of the refusals spent anything
    assert world.ntx(world.provider) == AMOUNT


def test_refund_before_the_deadline_rejected_after_it_accepted(world: World) -> None:
    world.lock()
    common = dict(signing_key=world.consumer.sk, address=world.consumer.address, job_id=JOB)
    with pytest.raises(T.DeadlineNotReached, match="can be refunded without the oracle"):
        T.refund(world.ctx, **common)  # type: ignore[arg-type]

    # Valid only after the deadline: the script accepts it, the ledger says "not yet".
    early = T.refund(world.ctx, check_deadline=False, **common)  # type: ignore[arg-type]
    with pytest.raises(T.SubmitRejected, match="not valid yet"):
        T.submit(world.ctx, early)

    # Claiming "after the deadline" with a validity range that starts now: the script refuses.
    now = world.ctx.last_block_slot
    lying = T.refund(
        world.ctx,
        check_deadline=False,
        valid_from_slot=now,
        ex_units=FIXED_UNITS,
        **common,  # type: ignore[arg-type]
    )
    with pytest.raises(T.SubmitRejected, match=r"script spend:\d failed"):
        T.submit(world.ctx, lying)

    world.ledger.clock.advance(HOUR_MS / 1000 + 5)  # past the deadline, without sleeping
    T.submit(world.ctx, early)  # the same signed tx is valid now
    assert world.ntx(world.consumer) == 100_000_000
    assert T.find_escrows(world.ctx, JOB) == []


def test_refund_with_the_oracle_signature_before_the_deadline(world: World) -> None:
    world.lock()
    tx = T.refund(
        world.ctx,
        signing_key=world.consumer.sk,
        address=world.consumer.address,
        job_id=JOB,
        oracle_signature=world.signature("refund", world.consumer),
    )
    T.submit(world.ctx, tx)
    assert world.ntx(world.consumer) == 100_000_000


def test_clear_errors(world: World) -> None:
    poor = Wallet()
    world.ledger.faucet(poor.address, ada=3, ntx=5)
    datum = replace(world.datum, consumer=poor.pkh.payload)
    with pytest.raises(T.InsufficientFunds, match=r"needs 25 NTX .* has 5 NTX") as info:
        T.lock(
            world.ctx,
            signing_key=poor.sk,
            address=poor.address,
            datum=datum,
            ntx=world.ledger.ntx_unit,
        )
    assert info.value.needed_ntx == AMOUNT and info.value.has_ntx == 5_000_000

    with pytest.raises(T.TxError, match="is not the paying key"):
        T.lock(
            world.ctx,
            signing_key=world.consumer.sk,
            address=world.consumer.address,
            datum=datum,
            ntx=world.ledger.ntx_unit,
        )

    sig = world.signature("withdraw", world.provider)
    claim = dict(job_id=JOB, oracle_signature=sig)
    with pytest.raises(T.EscrowNotFound, match="no escrow UTxO for job"):
        T.claim(world.ctx, signing_key=world.provider.sk, address=world.provider.address, **claim)  # type: ignore[arg-type]
    world.lock()
    with pytest.raises(T.EscrowNotFound, match="names another provider"):
        T.claim(world.ctx, signing_key=poor.sk, address=poor.address, **claim)  # type: ignore[arg-type]
    with pytest.raises(T.TxError, match="does not own"):
        T.claim(world.ctx, signing_key=poor.sk, address=world.provider.address, **claim)  # type: ignore[arg-type]

    # A provider with 1 ADA cannot post collateral for the script spend.
    broke = Wallet()
    world.ledger.faucet(broke.address, ada=1)
    world.datum = replace(world.datum, provider=broke.pkh.payload)
    world.lock()
    with pytest.raises(T.InsufficientFunds, match="for collateral and fees"):
        T.claim(
            world.ctx,
            signing_key=broke.sk,
            address=broke.address,
            job_id=JOB,
            oracle_signature=world.signature("withdraw", broke),
        )


def test_two_locks_with_the_same_datum_are_released_one_by_one(world: World) -> None:
    """A signature names one output: it never releases the other lock with the same terms."""
    world.lock()
    lock_a = world.last_lock
    world.lock()
    lock_b = world.last_lock
    assert lock_a is not None and lock_b is not None and lock_a != lock_b
    escrows = {e.utxo.input: e for e in T.find_escrows(world.ctx, JOB)}
    assert set(escrows) == {lock_a, lock_b}
    assert escrows[lock_a].datum == escrows[lock_b].datum
    for_a = world.signature("withdraw", world.provider, lock_a)
    common = dict(signing_key=world.provider.sk, address=world.provider.address, job_id=JOB)

    # Pointed at B, the client's own check refuses A's signature; the ledger refuses it too.
    with pytest.raises(T.OracleSignatureInvalid, match=lock_b.transaction_id.payload.hex()):
        T.claim(world.ctx, oracle_signature=for_a, escrow_utxo=escrows[lock_b].utxo, **common)  # type: ignore[arg-type]
    doomed = T.claim(
        world.ctx,
        oracle_signature=for_a,
        escrow_utxo=escrows[lock_b].utxo,
        verify_locally=False,
        ex_units=FIXED_UNITS,
        **common,  # type: ignore[arg-type]
    )
    with pytest.raises(T.SubmitRejected, match="bad oracle signature"):
        T.submit(world.ctx, doomed)
    # The consumer's refund signature for A does not take B back either.
    refund_a = world.signature("refund", world.consumer, lock_a)
    doomed = T.refund(
        world.ctx,
        signing_key=world.consumer.sk,
        address=world.consumer.address,
        job_id=JOB,
        oracle_signature=refund_a,
        escrow_utxo=escrows[lock_b].utxo,
        verify_locally=False,
        ex_units=FIXED_UNITS,
    )
    with pytest.raises(T.SubmitRejected, match="bad oracle signature"):
        T.submit(world.ctx, doomed)
    assert set(e.utxo.input for e in T.find_escrows(world.ctx, JOB)) == {lock_a, lock_b}

    # Without escrow_utxo, claim finds the one output the signature names, whatever the order.
    tx = T.claim(world.ctx, oracle_signature=for_a, **common)  # type: ignore[arg-type]
    assert lock_a in tx.transaction_body.inputs and lock_b not in tx.transaction_body.inputs
    T.submit(world.ctx, tx)
    assert world.ntx(world.provider) == AMOUNT
    [left] = T.find_escrows(world.ctx, JOB)
    assert left.utxo.input == lock_b
    # ...and A's signature has nothing left to release.
    with pytest.raises(T.OracleSignatureInvalid):
        T.claim(world.ctx, oracle_signature=for_a, **common)  # type: ignore[arg-type]

    # B, refunded with a signature of its own.
    tx = T.refund(
        world.ctx,
        signing_key=world.consumer.sk,
        address=world.consumer.address,
        job_id=JOB,
        oracle_signature=world.signature("refund", world.consumer, lock_b),
    )
    T.submit(world.ctx, tx)
    assert T.find_escrows(world.ctx, JOB) == []
    assert world.ntx(world.consumer) == 100_000_000 - AMOUNT


# -- distribute: the lock split in one tx (issue 12) ------------------------------------------


def _split_signature(world: World, provider_amount: int) -> bytes:
    assert world.last_lock is not None
    message = distribute_message(provider_amount, world.last_lock)
    return bytes(world.oracle.sign(message).signature)


def _distribute(world: World, provider_amount: int, submitter: Wallet, **kwargs: Any) -> Any:
    return T.distribute(
        world.ctx,
        signing_key=submitter.sk,
        address=submitter.address,
        job_id=JOB,
        oracle_signature=kwargs.pop("signature", None) or _split_signature(world, provider_amount),
        provider_amount=provider_amount,
        provider_address=world.provider.address,
        **kwargs,
    )


@pytest.mark.parametrize(
    ("share", "submitter"),
    [(0, "consumer"), (AMOUNT * 47 // 100, "provider"), (AMOUNT, "provider")],
)
def test_distribute_on_the_ledger_pays_each_share_in_one_tx(
    world: World, share: int, submitter: str
) -> None:
    world.lock()
    consumer_before = world.ntx(world.consumer)
    consumer_ada = world.balance(world.consumer)["lovelace"]
    [escrow] = T.find_escrows(world.ctx, JOB)
    lock_ada = int(escrow.utxo.output.amount.coin)
    payer = world.provider if submitter == "provider" else world.consumer
    tx = _distribute(world, share, payer)
    T.submit(world.ctx, tx)
    assert T.find_escrows(world.ctx, JOB) == []
    assert world.ntx(world.provider) == share
    assert world.ntx(world.consumer) == consumer_before + AMOUNT - share
    if submitter == "provider":
        # The lock's ADA went back to the consumer too, who paid nothing for the split.
        assert world.balance(world.consumer)["lovelace"] == consumer_ada + lock_ada


def test_distribute_refused_by_the_ledger_for_a_bigger_share_than_signed(world: World) -> None:
    world.lock()
    signed = _split_signature(world, AMOUNT // 4)
    with pytest.raises(T.OracleSignatureInvalid):
        _distribute(world, AMOUNT // 2, world.provider, signature=signed)
    tx = _distribute(
        world,
        AMOUNT // 2,
        world.provider,
        signature=signed,
        verify_locally=False,
        ex_units=FIXED_UNITS,
    )
    with pytest.raises(T.SubmitRejected, match="bad oracle signature"):
        T.submit(world.ctx, tx)
    assert len(T.find_escrows(world.ctx, JOB)) == 1


def test_distribute_signature_names_one_lock(world: World) -> None:
    world.lock()
    first = world.last_lock
    signed = _split_signature(world, AMOUNT // 2)
    world.lock()  # the same datum again, another output
    assert world.last_lock != first
    [second] = [e for e in T.find_escrows(world.ctx, JOB) if e.utxo.input == world.last_lock]
    with pytest.raises(T.OracleSignatureInvalid):
        _distribute(world, AMOUNT // 2, world.provider, signature=signed, escrow_utxo=second.utxo)
    T.submit(world.ctx, _distribute(world, AMOUNT // 2, world.provider, signature=signed))
    assert [e.utxo.input for e in T.find_escrows(world.ctx, JOB)] == [world.last_lock]


class _AlphabeticalCostModels:
    """An HTTP proxy in front of the ledger that serves its protocol parameters as Blockfrost
    may: the named ``cost_models`` in alphabetical key order (a sorted map's JSON), the
    ``cost_models_raw`` lists in the ledger's canonical order, everything else as it is."""

    def __init__(self, upstream: str) -> None:
        import http.server
        import json
        import threading
        import urllib.error
        import urllib.request

        base = upstream.rstrip("/")

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                request = urllib.request.Request(
                    base + self.path.removeprefix("/api"),
                    data=body,
                    method=self.command,
                    headers={k: v for k, v in self.headers.items() if k.lower() != "host"},
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as reply:
                        status, data = reply.status, reply.read()
                except urllib.error.HTTPError as exc:
                    status, data = exc.code, exc.read()
                if self.path.endswith("/epochs/latest/parameters") and status == 200:
                    params = json.loads(data)
                    params["cost_models"] = {
                        language: dict(sorted(named.items()))
                        for language, named in params["cost_models"].items()
                    }
                    data = json.dumps(params).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _forward

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_script_txs_use_the_canonical_cost_models_whatever_order_blockfrost_names_them(
    world: World,
) -> None:
    """Issue 20 §5: with the named cost models in another order than the ledger's, pycardano's
    own context builds a script integrity hash the ledger refuses; ours, built from
    ``cost_models_raw``, is accepted."""
    from oracle_client.cardano.blockfrost import CanonicalBlockFrostContext
    from oracle_client.ledger.params import cost_models

    canonical = list(cost_models()["PlutusV3"])
    assert canonical != sorted(canonical)  # the two orders differ: the test can fail
    proxy = _AlphabeticalCostModels(world.ledger.url)
    try:
        world.lock()
        claim = dict(
            signing_key=world.provider.sk,
            address=world.provider.address,
            job_id=JOB,
            oracle_signature=world.signature("withdraw", world.provider),
            ntx=world.ledger.ntx_unit,
        )
        plain = BlockFrostChainContext("local", base_url=proxy.url)
        assert list(plain.protocol_param.cost_models["PlutusV3"]) == sorted(canonical)
        with pytest.raises(T.TxError, match="script data hash"):
            T.submit(plain, T.claim(plain, **claim))  # type: ignore[arg-type]
        ours = CanonicalBlockFrostContext("local", base_url=proxy.url)
        values = list(ours.protocol_param.cost_models["PlutusV3"].values())
        assert values == list(cost_models()["PlutusV3"].values())
        T.submit(ours, T.claim(ours, **claim))  # type: ignore[arg-type]
        assert world.ntx(world.provider) == AMOUNT
    finally:
        proxy.close()


def test_a_wallet_of_small_outputs_is_told_to_add_ada_for_the_collateral(world: World) -> None:
    """Enough ADA in all, but no three outputs together hold a script spend's collateral:
    one line that says what to do, not pycardano's arithmetic alone."""
    small = Wallet()
    for _ in range(10):
        world.ledger.faucet(str(small.address), ada="1.1")
    world.datum = replace(world.datum, provider=small.pkh.payload)
    world.lock()
    with pytest.raises(T.InsufficientFunds, match="too little plain ADA for the collateral"):
        T.claim(
            world.ctx,
            signing_key=small.sk,
            address=small.address,
            job_id=JOB,
            oracle_signature=world.signature("withdraw", small),
            ntx=world.ledger.ntx_unit,
        )
