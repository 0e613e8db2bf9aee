"""A split pays the consumer's share and the lock's ADA to the consumer's full address (issue
20 §5).

The real local ledger (it runs the committed escrow script with uplc on every spend) and the
reference oracle over HTTP, as in test_escrow_replay. The consumer locks from a base address
(payment key and a stake key): the datum keeps that staking part. A dishonest provider holding
the oracle's split signature builds its own split tx that (a) keeps the lock's ADA in a 100 %
split, (b) pays the consumer's NTX to the consumer's payment key with the provider's stake
key (before, "any staking part" passed, and the consumer's wallet, which reads its base
address, never saw it), (c) pays the consumer less ADA than the lock held; the ledger refuses
each with the validator's trace. The honest splits, the provider's and the consumer's own,
land, and the consumer's base address holds its share and the lock's ADA.
"""

from __future__ import annotations

import msgspec
import pytest
from pycardano import (
    Address,
    Network,
    PaymentSigningKey,
    Redeemer,
    Transaction,
    TransactionBuilder,
    TransactionOutput,
    UTxO,
    Value,
    VerificationKeyHash,
    min_lovelace_post_alonzo,
)

from oracle_client.escrow import transactions as T
from oracle_client.escrow.contract import Distribute, escrow_script, staking_of
from oracle_client.models import RewardGrant, RewardRequest, ServiceQuote, sign_service_request
from tests.adversarial.test_escrow_replay import FIXED_UNITS, Chain, chain
from tests.doubles.oracle import CONSUMER, PROVIDER, datum_for, receipt_for, service_request

__all__ = ["chain"]

PRICE = 5_000_000
STAKE_KEY = PaymentSigningKey(bytes([77]) * 32).to_verification_key().hash()
PROVIDER_STAKE = PaymentSigningKey(bytes([78]) * 32).to_verification_key().hash()


def _consumer_base() -> Address:
    """The consumer's base address: its payment key and its own stake key."""
    return Address(VerificationKeyHash(bytes.fromhex(CONSUMER.pkh)), STAKE_KEY, Network.TESTNET)


def _lock(chain: Chain, job: str, base: Address) -> tuple[ServiceQuote, UTxO]:
    request = msgspec.structs.replace(
        service_request(job, price=PRICE), consumer_address=str(base), signature="00" * 64
    )
    quote = chain.ask(sign_service_request(request, bytes(CONSUMER.peer_key)))
    assert isinstance(quote, ServiceQuote)
    locked = datum_for(quote)
    locked.consumer_stake = staking_of(base)
    tx = T.lock(
        chain.ctx,
        signing_key=chain.key(CONSUMER),
        address=base,
        datum=locked,
        ntx=chain.ledger.ntx_unit,
    )
    T.submit(chain.ctx, tx)
    spent = T.locked_output(tx, chain.ctx)
    (lock,) = [e.utxo for e in T.find_escrows(chain.ctx, job) if e.utxo.input == spent]
    return quote, lock


def _grant(chain: Chain, quote: ServiceQuote, lock: UTxO, charge: int) -> RewardGrant:
    receipt = receipt_for(quote, min_charge=min(charge, PRICE), charge=charge)
    lock_tx = lock.input.transaction_id.payload.hex()
    grant = chain.ask(RewardRequest(job_id=quote.job_id, receipt=receipt, lock_tx=lock_tx))
    assert isinstance(grant, RewardGrant) and grant.reward_type == "distribute", grant
    assert grant.provider_amount == charge
    return grant


def _dishonest(
    chain: Chain, lock: UTxO, grant: RewardGrant, outputs: list[TransactionOutput]
) -> Transaction:
    """The provider's own split tx with `outputs` first (fixed units: no evaluation before the
    ledger's own)."""
    builder = TransactionBuilder(chain.ctx)
    builder.add_script_input(
        lock,
        script=escrow_script(),
        redeemer=Redeemer(
            Distribute(bytes.fromhex(grant.signature), grant.provider_amount), FIXED_UNITS
        ),
    )
    builder.add_input_address(chain.address(PROVIDER))
    for output in outputs:
        builder.add_output(output)
    builder.required_signers = [VerificationKeyHash(bytes.fromhex(PROVIDER.pkh))]
    slot = chain.ctx.last_block_slot
    builder.validity_start, builder.ttl = slot, slot + 600
    return builder.build_and_sign([chain.key(PROVIDER)], change_address=chain.address(PROVIDER))


def _pays(chain: Chain, address: Address, ntx: int, lovelace: int = 0) -> TransactionOutput:
    unit = T.NtxUnit.parse(chain.ledger.ntx_unit)
    output = TransactionOutput(address, Value(lovelace, unit.multi_asset(ntx)) if ntx else lovelace)
    if not lovelace:
        output.amount = Value(
            min_lovelace_post_alonzo(output, chain.ctx), output.amount.multi_asset
        )
    return output


def _balance(chain: Chain, address: Address) -> tuple[int, int]:
    held = chain.ledger.state.balance(str(address))
    return held["lovelace"], int(held.get(chain.ledger.ntx_unit, 0))


def _refused(chain: Chain, tx: Transaction, trace: str) -> None:
    with pytest.raises(T.SubmitRejected, match=rf"script spend:\d failed.*{trace}"):
        T.submit(chain.ctx, tx)


def test_a_100_percent_split_returns_the_locks_ada_to_the_consumers_base_address(
    chain: Chain,
) -> None:
    base = _consumer_base()
    chain.ledger.faucet(str(base), ada=40, ntx=20)
    quote, lock = _lock(chain, "job-full", base)
    lock_ada = int(lock.output.amount.coin)
    grant = _grant(chain, quote, lock, PRICE)  # the whole lock to the provider

    provider_share = _pays(chain, chain.address(PROVIDER), PRICE)
    # (a) The split as the builder made it before: the provider's NTX only, the lock's ADA
    # left in the provider's change.
    _refused(chain, _dishonest(chain, lock, grant, [provider_share]), "consumer paid elsewhere")
    # (c) Something back to the consumer's own address, but less ADA than the lock held.
    less = _pays(chain, base, 0)
    assert int(less.amount.coin) < lock_ada
    _refused(chain, _dishonest(chain, lock, grant, [less, provider_share]), "ADA not returned")
    assert _balance(chain, chain.address(PROVIDER))[1] == 0

    # The honest split: the consumer's base address gets the lock's ADA back.
    before = _balance(chain, base)
    split = T.distribute(
        chain.ctx,
        signing_key=chain.key(PROVIDER),
        address=chain.address(PROVIDER),
        job_id=quote.job_id,
        oracle_signature=bytes.fromhex(grant.signature),
        provider_amount=grant.provider_amount,
        provider_address=chain.address(PROVIDER),
        escrow_utxo=lock,
    )
    assert split.transaction_body.outputs[0].address == base
    T.submit(chain.ctx, split)
    assert _balance(chain, base) == (before[0] + lock_ada, before[1])
    assert _balance(chain, chain.address(PROVIDER))[1] == PRICE


def test_the_consumers_share_never_goes_to_its_key_with_another_stake_key(chain: Chain) -> None:
    base = _consumer_base()
    chain.ledger.faucet(str(base), ada=40, ntx=20)
    quote, lock = _lock(chain, "job-part", base)
    lock_ada = int(lock.output.amount.coin)
    charge = PRICE * 47 // 100
    grant = _grant(chain, quote, lock, charge)
    back = PRICE - charge

    provider_share = _pays(chain, chain.address(PROVIDER), charge)
    # (b) The consumer's payment key with the provider's stake key: the consumer's wallet
    # never sees it, and the provider may keep delegating its weight.
    diverted = Address(base.payment_part, PROVIDER_STAKE, Network.TESTNET)
    outputs = [_pays(chain, diverted, back, lock_ada), provider_share]
    _refused(chain, _dishonest(chain, lock, grant, outputs), "consumer paid elsewhere")
    # Nor the consumer's enterprise address: the lock named the base address.
    outputs = [_pays(chain, chain.address(CONSUMER), back, lock_ada), provider_share]
    _refused(chain, _dishonest(chain, lock, grant, outputs), "consumer paid elsewhere")
    # (c) Its address and its NTX, but only the output's min ADA, not the lock's.
    short = _pays(chain, base, back)
    assert int(short.amount.coin) < lock_ada
    _refused(chain, _dishonest(chain, lock, grant, [short, provider_share]), "ADA not returned")

    # The consumer's own split (a provider that never sends it: settle.py's split_grace_s)
    # passes the ledger's script run and pays its base address its share and the lock's ADA.
    before = _balance(chain, base)
    own = T.distribute(
        chain.ctx,
        signing_key=chain.key(CONSUMER),
        address=base,
        job_id=quote.job_id,
        oracle_signature=bytes.fromhex(grant.signature),
        provider_amount=grant.provider_amount,
        provider_address=chain.address(PROVIDER),
        escrow_utxo=lock,
    )
    first = own.transaction_body.outputs[0]
    assert first.address == base and int(first.amount.coin) == lock_ada
    T.submit(chain.ctx, own)
    lovelace, ntx = _balance(chain, base)
    assert ntx == before[1] + back
    # The consumer paid the fee and the provider's output's min ADA, and got the lock's back.
    assert lovelace > before[0] + lock_ada - 2_000_000
    assert _balance(chain, chain.address(PROVIDER))[1] == charge
    # Nothing reached the consumer's enterprise address: it holds the fixture's 50 NTX only.
    enterprise = Address(base.payment_part, network=Network.TESTNET)
    assert _balance(chain, enterprise)[1] == 50_000_000
