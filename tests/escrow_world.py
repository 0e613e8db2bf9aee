"""A small, fixed Cardano world for the escrow tests: parties, an NTX lock, signed spend txs,
and an offline pycardano ChainContext whose evaluate_tx is ours."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from nacl.signing import SigningKey as OracleKey
from pycardano import (
    Address,
    Asset,
    AssetName,
    ChainContext,
    ExecutionUnits,
    GenesisParameters,
    MultiAsset,
    Network,
    PaymentSigningKey,
    PaymentVerificationKey,
    ProtocolParameters,
    Redeemer,
    RedeemerKey,
    RedeemerMap,
    RedeemerTag,
    RedeemerValue,
    ScriptHash,
    Transaction,
    TransactionBody,
    TransactionId,
    TransactionInput,
    TransactionOutput,
    TransactionWitnessSet,
    UTxO,
    Value,
    VerificationKeyHash,
    VerificationKeyWitness,
    script_data_hash,
)
from pycardano.plutus import CostModels
from uplc.cost_model import latest_network_config

from oracle_client.cardano.plutus import PREPROD, ScriptResult, evaluate_tx, execution_units
from oracle_client.escrow.contract import escrow_address, escrow_script
from oracle_client.escrow.contract.datum import (
    EscrowDatum,
    NoStakingCredential,
    OracleKind,
    distribute_message,
    oracle_message,
)

logging.getLogger("PyCardano").setLevel(logging.ERROR)

SLOTS = PREPROD
NETWORK = Network.TESTNET
NOW_SLOT = 80_000_000
DEADLINE_SLOT = NOW_SLOT + 3_600
DEADLINE_MS = SLOTS.slot_to_posix_ms(DEADLINE_SLOT)
JOB_ID = b"3f9a1c0d2b7e"
AMOUNT = 25_000_000  # 25 NTX
NTX_POLICY = ScriptHash(bytes.fromhex("c0ffee" * 9 + "00"))
NTX_NAME = AssetName(b"NTX")


@dataclass(frozen=True)
class Party:
    signing_key: PaymentSigningKey
    verification_key: PaymentVerificationKey

    @property
    def pkh(self) -> VerificationKeyHash:
        return self.verification_key.hash()

    @property
    def address(self) -> Address:
        return Address(self.pkh, network=NETWORK)


def party(seed: int) -> Party:
    signing_key = PaymentSigningKey(bytes([seed]) * 32)
    return Party(signing_key, signing_key.to_verification_key())


CONSUMER = party(1)
PROVIDER = party(2)
STRANGER = party(4)
ORACLE = OracleKey(bytes([3]) * 32)
OTHER_ORACLE = OracleKey(bytes([5]) * 32)


def make_datum(**overrides: Any) -> EscrowDatum:
    fields: dict[str, Any] = {
        "consumer": CONSUMER.pkh.payload,
        "consumer_stake": NoStakingCredential(),  # CONSUMER.address: an enterprise address
        "provider": PROVIDER.pkh.payload,
        "oracle_key": bytes(ORACLE.verify_key),
        "job_id": JOB_ID,
        "amount": AMOUNT,
        "deadline": DEADLINE_MS,
    }
    fields.update(overrides)
    return EscrowDatum(**fields)


def oracle_sign(
    kind: OracleKind,
    beneficiary: Party,
    *,
    job_id: bytes = JOB_ID,
    amount: int = AMOUNT,
    key: OracleKey = ORACLE,
    escrow: TransactionInput | None = None,
) -> bytes:
    """The oracle's signature releasing `escrow` (default: the output `escrow_utxo()` makes)."""
    spent = escrow_utxo().input if escrow is None else escrow
    message = oracle_message(kind, job_id, beneficiary.pkh.payload, amount, spent)
    return key.sign(message).signature


def distribute_sign(
    provider_amount: int,
    *,
    key: OracleKey = ORACLE,
    escrow: TransactionInput | None = None,
) -> bytes:
    """The oracle's signature splitting `escrow` (default: `escrow_utxo()`'s output)."""
    spent = escrow_utxo().input if escrow is None else escrow
    message = distribute_message(provider_amount, spent)
    return key.sign(message).signature


def ntx(amount: int, lovelace: int = 2_000_000) -> Value:
    return Value(lovelace, MultiAsset({NTX_POLICY: Asset({NTX_NAME: amount})}))


def escrow_utxo(datum: EscrowDatum | None = None, *, index: int = 0) -> UTxO:
    datum = make_datum() if datum is None else datum
    tx_input = TransactionInput(TransactionId(bytes([0xE5]) * 32), index)
    output = TransactionOutput(escrow_address(NETWORK), ntx(datum.amount), datum=datum)
    return UTxO(tx_input, output)


def wallet_utxo(owner: Party, *, index: int = 0, lovelace: int = 20_000_000) -> UTxO:
    # Distinct tx ids per owner so that inputs sort differently from how they are listed.
    tx_id = TransactionId(bytes([0x01 if owner is PROVIDER else 0xF0]) + bytes(31))
    return UTxO(TransactionInput(tx_id, index), TransactionOutput(owner.address, lovelace))


def spend_tx(
    redeemer_data: Any,
    *,
    payer: Party,
    signers: list[Party],
    escrow: UTxO,
    validity_start: int | None = NOW_SLOT,
    ttl: int | None = NOW_SLOT + 600,
    fee: int = 400_000,
    outputs: list[TransactionOutput] | None = None,
    also_spend: tuple[UTxO, ...] = (),
) -> tuple[Transaction, list[UTxO]]:
    """A signed tx spending `escrow` with `redeemer_data`, paid for by `payer`; the NTX go to
    the payer, or `outputs` are the tx's outputs (the scripts see them; value balance is the
    ledger's check, not the script's). `also_spend`: further escrow inputs, each with the
    same redeemer. Returns the tx and the UTxOs it spends."""
    funds = wallet_utxo(payer)
    redeemer = Redeemer(redeemer_data, ExecutionUnits(mem=1_000_000, steps=1_000_000_000))
    redeemer.tag = RedeemerTag.SPEND
    # Listed wallet-first on purpose: the ledger (and so the redeemer index) sorts inputs.
    inputs = [funds.input, escrow.input, *(u.input for u in also_spend)]
    order = sorted(inputs, key=lambda i: (i.transaction_id.payload, i.index))
    redeemer.index = order.index(escrow.input)
    redeemers = RedeemerMap(
        {
            RedeemerKey(redeemer.tag, order.index(spent.input)): RedeemerValue(
                redeemer_data, redeemer.ex_units
            )
            for spent in (escrow, *also_spend)
        }
    )
    locked = escrow.output.amount
    change = funds.output.amount.coin + locked.coin - fee
    body = TransactionBody(
        inputs=inputs,
        outputs=outputs
        if outputs is not None
        else [TransactionOutput(payer.address, Value(change, locked.multi_asset))],
        fee=fee,
        ttl=ttl,
        validity_start=validity_start,
        collateral=[funds.input],
        required_signers=[s.pkh for s in signers],
        script_data_hash=script_data_hash(redeemers, None, CostModels({2: cost_model_v3()})),
        network_id=NETWORK,
    )
    witnesses = [
        VerificationKeyWitness(s.verification_key, s.signing_key.sign(body.hash())) for s in signers
    ]
    witness_set = TransactionWitnessSet(
        vkey_witnesses=witnesses or None,
        plutus_v3_script=[escrow_script()],
        redeemer=redeemers,
    )
    return Transaction(body, witness_set), [escrow, *also_spend, funds]


def run_spend(
    redeemer_data: Any,
    *,
    payer: Party,
    signers: list[Party] | None = None,
    datum: EscrowDatum | None = None,
    validity_start: int | None = NOW_SLOT,
    ttl: int | None = NOW_SLOT + 600,
) -> ScriptResult:
    """Build and evaluate a spend of a fresh escrow; the one script result."""
    tx, utxos = spend_tx(
        redeemer_data,
        payer=payer,
        signers=[payer] if signers is None else signers,
        escrow=escrow_utxo(datum),
        validity_start=validity_start,
        ttl=ttl,
    )
    (result,) = evaluate_tx(tx, utxos, SLOTS)
    return result


def cost_model_v3() -> dict[str, int]:
    return dict(latest_network_config()["PlutusV3"])


class OfflineChain(ChainContext):
    """Just enough chain for pycardano's TransactionBuilder; evaluate_tx is ours."""

    def __init__(self, utxos: list[UTxO]):
        self.known = utxos

    @property
    def protocol_param(self) -> ProtocolParameters:
        return ProtocolParameters(
            min_fee_constant=155_381,
            min_fee_coefficient=44,
            max_block_size=90_112,
            max_tx_size=16_384,
            max_block_header_size=1_100,
            key_deposit=2_000_000,
            pool_deposit=500_000_000,
            pool_influence=Fraction(3, 10),
            monetary_expansion=Fraction(3, 1000),
            treasury_expansion=Fraction(1, 5),
            decentralization_param=Fraction(0),
            extra_entropy="",
            protocol_major_version=10,
            protocol_minor_version=0,
            min_utxo=4_310,
            min_pool_cost=170_000_000,
            price_mem=Fraction(577, 10_000),
            price_step=Fraction(721, 10_000_000),
            max_tx_ex_mem=14_000_000,
            max_tx_ex_steps=10_000_000_000,
            max_block_ex_mem=62_000_000,
            max_block_ex_steps=20_000_000_000,
            max_val_size=5_000,
            collateral_percent=150,
            max_collateral_inputs=3,
            coins_per_utxo_word=4_310,
            coins_per_utxo_byte=4_310,
            cost_models={"PlutusV3": cost_model_v3()},
        )

    @property
    def genesis_param(self) -> GenesisParameters:
        return GenesisParameters(
            active_slots_coefficient=Fraction(1, 20),
            update_quorum=5,
            max_lovelace_supply=45_000_000_000_000_000,
            network_magic=1,
            epoch_length=432_000,
            system_start=SLOTS.zero_time_ms // 1000,
            slots_per_kes_period=129_600,
            slot_length=1,
            max_kes_evolutions=62,
            security_param=2_160,
        )

    @property
    def network(self) -> Network:
        return NETWORK

    @property
    def epoch(self) -> int:
        return 200

    @property
    def last_block_slot(self) -> int:
        return NOW_SLOT

    def _utxos(self, address: str) -> list[UTxO]:
        return [u for u in self.known if str(u.output.address) == address]

    def submit_tx_cbor(self, cbor: bytes | str) -> str:
        raise NotImplementedError("offline")

    def evaluate_tx(self, tx: Transaction) -> dict[str, ExecutionUnits]:
        return execution_units(evaluate_tx(tx, self.known, SLOTS))
