"""One oracle signature releases one escrow output, never a second lock with the same terms
(issue 10, section 4).

The real local ledger on 127.0.0.1 (it runs the committed escrow script with uplc on every
spend), the reference oracle over HTTP checking locks through pycardano's
BlockFrostChainContext, and two locks on chain whose datums are identical to the byte: the
consumer's lock A (the one it names, as in its Confirm) and a second lock B (a repeated lock
tx, or one anybody made at the script address with the same datum). A hostile provider that
holds the oracle's signature for A tries to spend B with it, and A and B together in one tx;
the ledger refuses both (the script fails), the oracle never signs a second time, and
afterwards the honest claim of A lands and the consumer takes B back after its deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from pycardano import (
    Address,
    BlockFrostChainContext,
    ExecutionUnits,
    Network,
    PaymentSigningKey,
    Redeemer,
    TransactionBuilder,
    TransactionInput,
    UTxO,
    VerificationKeyHash,
)

from oracle_client.client import LockNotFound, OracleClient
from oracle_client.escrow import transactions as T
from oracle_client.escrow.contract import Distribute, EscrowDatum, escrow_address, escrow_script
from oracle_client.ledger import LedgerServer, start_server
from oracle_client.models import RewardGrant, RewardRequest, ServiceQuote
from oracle_client.oracle_server.keys import load_or_create_key
from oracle_client.oracle_server.locks import ChainLockChecker
from oracle_client.oracle_server.server import OracleServer
from oracle_client.oracle_server.service import Oracle
from oracle_client.oracle_server.store import Store
from tests.doubles.oracle import (
    CONSUMER,
    PROVIDER,
    Party,
    datum_for,
    receipt_for,
    service_request,
)

JOB = "job-replay"
# Enough for the escrow script (~0.1G steps / ~0.2M mem each): fixed units skip the builder's
# evaluation, so a doomed tx gets as far as the ledger's own submit checks.
FIXED_UNITS = ExecutionUnits(mem=2_000_000, steps=1_000_000_000)


@dataclass
class Chain:
    ledger: LedgerServer
    ctx: BlockFrostChainContext
    oracle_url: str

    def key(self, party: Party) -> PaymentSigningKey:
        return PaymentSigningKey(bytes(party.payment_key))

    def address(self, party: Party) -> Address:
        return Address.from_primitive(party.address())

    def ntx(self, party: Party) -> int:
        return int(self.ledger.state.balance(party.address()).get(self.ledger.ntx_unit, 0))

    def locks(self) -> dict[TransactionInput, UTxO]:
        return {e.utxo.input: e.utxo for e in T.find_escrows(self.ctx, JOB)}

    def lock(self, datum: EscrowDatum) -> TransactionInput:
        tx = T.lock(
            self.ctx,
            signing_key=self.key(CONSUMER),
            address=self.address(CONSUMER),
            datum=datum,
            ntx=self.ledger.ntx_unit,
        )
        T.submit(self.ctx, tx)
        return T.locked_output(tx, self.ctx)

    def ask(self, request: Any) -> Any:
        async def main() -> Any:
            async with OracleClient(self.oracle_url, timeout=10, retries=0) as oracle:
                if isinstance(request, RewardRequest):
                    return await oracle.request_reward(request)
                return await oracle.request_service(request)

        return trio.run(main)


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[Chain]:
    ledger = start_server(tmp_path / "ledger.db")
    store = Store(tmp_path / "oracle.db")
    server: OracleServer | None = None
    try:
        unit = bytes.fromhex(ledger.ntx_unit)
        checker = ChainLockChecker(
            lambda: BlockFrostChainContext("local", base_url=ledger.url),
            escrow_address(Network.TESTNET),
            (unit[:28], unit[28:]),
        )
        oracle = Oracle(load_or_create_key(tmp_path / "oracle.key"), store, checker, "testnet")
        server = OracleServer(oracle, poll_interval=0.05).start()
        ledger.faucet(CONSUMER.address(), ada=60, ntx=50)
        ledger.faucet(PROVIDER.address(), ada=20)
        yield Chain(ledger, BlockFrostChainContext("local", base_url=ledger.url), server.url)
    finally:
        if server is not None:
            server.close()
        store.close()
        ledger.stop()


def _claim_both(chain: Chain, a: UTxO, b: UTxO, signature: bytes, share: int) -> Any:
    """The provider's one tx spending A and B, each with a Distribute carrying `signature`."""
    builder = TransactionBuilder(chain.ctx)
    for lock in (a, b):
        builder.add_script_input(
            lock,
            script=escrow_script(),
            redeemer=Redeemer(Distribute(signature, share), FIXED_UNITS),
        )
    builder.add_input_address(chain.address(PROVIDER))
    builder.required_signers = [VerificationKeyHash(bytes.fromhex(PROVIDER.pkh))]
    slot = chain.ctx.last_block_slot
    builder.validity_start, builder.ttl = slot, slot + 600
    return builder.build_and_sign([chain.key(PROVIDER)], change_address=chain.address(PROVIDER))


def test_a_signature_for_one_lock_never_releases_another_with_the_same_datum(
    chain: Chain,
) -> None:
    quote = chain.ask(service_request(JOB))
    assert isinstance(quote, ServiceQuote)
    lock_a = chain.lock(datum_for(quote))  # the consumer's lock, named in its Confirm
    lock_b = chain.lock(datum_for(quote))  # the same datum, to the byte, in another output
    locks = chain.locks()
    assert set(locks) == {lock_a, lock_b}
    assert locks[lock_a].output.datum.cbor == locks[lock_b].output.datum.cbor  # type: ignore[union-attr]
    done = receipt_for(quote)  # completed, signed by both peers: the whole lock charged

    # A provider that asks without naming the lock gets no signature: the oracle never guesses
    # which of two equal locks to release.
    with pytest.raises(LockNotFound, match="2 escrow outputs carry the terms"):
        chain.ask(RewardRequest(job_id=JOB, receipt=done))
    a_tx = lock_a.transaction_id.payload.hex()
    grant = chain.ask(RewardRequest(job_id=JOB, receipt=done, lock_tx=a_tx))
    assert isinstance(grant, RewardGrant) and grant.reward_type == "distribute"
    assert grant.escrow_utxo == f"{a_tx}#{lock_a.index}"
    signature = bytes.fromhex(grant.signature)
    # Naming B now gets the one decision again, for A: never a second signature.
    b_tx = lock_b.transaction_id.payload.hex()
    assert chain.ask(RewardRequest(job_id=JOB, receipt=done, lock_tx=b_tx)) == grant

    provider = dict(
        signing_key=chain.key(PROVIDER),
        address=chain.address(PROVIDER),
        job_id=JOB,
        provider_amount=grant.provider_amount,
        provider_address=chain.address(PROVIDER),
    )
    # Attack 1: A's signature on B. The client's own check says no; the ledger too.
    with pytest.raises(T.OracleSignatureInvalid):
        T.distribute(chain.ctx, oracle_signature=signature, escrow_utxo=locks[lock_b], **provider)  # type: ignore[arg-type]
    doomed = T.distribute(
        chain.ctx,
        oracle_signature=signature,
        escrow_utxo=locks[lock_b],
        verify_locally=False,
        ex_units=FIXED_UNITS,
        **provider,  # type: ignore[arg-type]
    )
    with pytest.raises(T.SubmitRejected, match=r"script spend:\d failed.*bad oracle signature"):
        T.submit(chain.ctx, doomed)

    # Attack 2: A and B in one tx, A's signature on both: the scripts fail, so the whole tx.
    both = _claim_both(chain, locks[lock_a], locks[lock_b], signature, grant.provider_amount)
    assert {lock_a, lock_b} <= set(both.transaction_body.inputs)
    with pytest.raises(T.SubmitRejected, match=r"bad oracle signature|one escrow per distribute"):
        T.submit(chain.ctx, both)

    # Nothing moved: both locks are on chain, the provider holds no NTX.
    assert set(chain.locks()) == {lock_a, lock_b}
    assert chain.ntx(PROVIDER) == 0

    # The ledger and the oracle still serve the honest claim: A, with A's signature.
    honest = T.distribute(
        chain.ctx,
        oracle_signature=signature,
        ntx=chain.ledger.ntx_unit,
        **provider,  # type: ignore[arg-type]
    )
    assert lock_a in honest.transaction_body.inputs
    assert lock_b not in honest.transaction_body.inputs
    T.submit(chain.ctx, honest)
    assert chain.ntx(PROVIDER) == quote.estimated_price
    assert set(chain.locks()) == {lock_b}

    # B was never released by anyone: its consumer takes it back after its deadline.
    consumer_before = chain.ntx(CONSUMER)
    chain.ledger.clock.advance((quote.deadline - chain.ledger.clock.now_ms()) / 1000 + 5)
    back = T.refund(
        chain.ctx,
        signing_key=chain.key(CONSUMER),
        address=chain.address(CONSUMER),
        job_id=JOB,
        escrow_utxo=locks[lock_b],
    )
    T.submit(chain.ctx, back)
    assert chain.locks() == {}
    assert chain.ntx(CONSUMER) == consumer_before + quote.estimated_price
