"""Plutus V3 ScriptContext from a pycardano Transaction, as the Conway ledger builds it.

    ctx = TxContext(tx, resolved_utxos, PREPROD)
    data = ctx.script_context(redeemer)        # uplc PlutusData: ScriptContext
    ctx.script_hash(redeemer)                  # which script that redeemer runs

The result is uplc's PlutusData (what the evaluator applies the script to); its CBOR is
`uplc.ast.plutus_cbor_dumps(data)`. Covered: spend, mint and withdrawal redeemers; inputs,
reference inputs, outputs, fee, mint, withdrawals, validity range, signatories, redeemers,
witness datums, id, treasury fields. Certificates, votes and proposals are refused with
ContextError rather than translated wrongly (the escrow never needs them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import cbor2
from pycardano import (
    Address,
    MultiAsset,
    PointerAddress,
    Redeemer,
    RedeemerMap,
    RedeemerTag,
    ScriptHash,
    Transaction,
    TransactionInput,
    TransactionOutput,
    UTxO,
    VerificationKeyHash,
    datum_hash,
)
from pycardano import (
    script_hash as hash_script,
)
from pycardano.serialization import default_encoder
from uplc.ast import (
    PlutusByteString,
    PlutusConstr,
    PlutusData,
    PlutusInteger,
    PlutusList,
    PlutusMap,
    data_from_cbor,
)


class ContextError(ValueError):
    """The transaction cannot be shown to a script (missing UTxO, unsupported feature...)."""


@dataclass(frozen=True)
class SlotConfig:
    """Maps slots to POSIX milliseconds: the Shelley-era part of a network's era history."""

    zero_time_ms: int
    zero_slot: int
    slot_length_ms: int

    def slot_to_posix_ms(self, slot: int) -> int:
        if slot < self.zero_slot:
            raise ContextError(f"slot {slot} is before this network's slot {self.zero_slot}")
        return self.zero_time_ms + (slot - self.zero_slot) * self.slot_length_ms

    def posix_ms_to_slot(self, posix_ms: int) -> int:
        """The slot containing `posix_ms` (floor)."""
        return self.zero_slot + (posix_ms - self.zero_time_ms) // self.slot_length_ms


MAINNET = SlotConfig(zero_time_ms=1_596_059_091_000, zero_slot=4_492_800, slot_length_ms=1000)
PREPROD = SlotConfig(zero_time_ms=1_655_769_600_000, zero_slot=86_400, slot_length_ms=1000)
PREVIEW = SlotConfig(zero_time_ms=1_666_656_000_000, zero_slot=0, slot_length_ms=1000)


# Small constructors for Plutus data; names follow the Haskell types they encode.
def _constr(index: int, *fields: PlutusData) -> PlutusConstr:
    return PlutusConstr(index, list(fields))


def _bytes(value: bytes) -> PlutusByteString:
    return PlutusByteString(bytes(value))


def _int(value: int) -> PlutusInteger:
    return PlutusInteger(value)


def _just(value: PlutusData) -> PlutusConstr:
    return _constr(0, value)


NOTHING = _constr(1)
TRUE = _constr(1)
FALSE = _constr(0)


def to_data(value: Any) -> PlutusData:
    """A pycardano datum/redeemer value (PlutusData, RawPlutusData, int, bytes...) as uplc data."""
    if hasattr(value, "to_cbor"):
        return data_from_cbor(value.to_cbor())
    return data_from_cbor(cbor2.dumps(value, default=default_encoder))


def tx_redeemers(tx: Transaction) -> list[Redeemer]:
    """The tx's redeemers as Redeemer objects, ordered as the ledger orders them."""
    raw = tx.transaction_witness_set.redeemer
    if not raw:
        return []
    if isinstance(raw, RedeemerMap):
        redeemers = []
        for key, value in raw.items():
            redeemer = Redeemer(value.data, value.ex_units)
            redeemer.tag, redeemer.index = key.tag, key.index
            redeemers.append(redeemer)
    else:
        redeemers = list(raw)
    return sorted(redeemers, key=lambda r: (r.tag.value, r.index))


def _sorted_inputs(inputs: Iterable[TransactionInput] | None) -> list[TransactionInput]:
    return sorted(inputs or [], key=lambda i: (i.transaction_id.payload, i.index))


def _credential(part: VerificationKeyHash | ScriptHash) -> PlutusData:
    return _constr(1 if isinstance(part, ScriptHash) else 0, _bytes(part.payload))


def _credential_order(part: VerificationKeyHash | ScriptHash) -> tuple[int, bytes]:
    # The ledger's Credential puts ScriptHashObj before KeyHashObj.
    return (0 if isinstance(part, ScriptHash) else 1, part.payload)


def address_data(address: Address) -> PlutusData:
    payment = address.payment_part
    if payment is None:
        raise ContextError(f"{address} has no payment part (a reward address in an output?)")
    staking = address.staking_part
    if staking is None:
        stake = NOTHING
    elif isinstance(staking, PointerAddress):
        pointer = _constr(1, _int(staking.slot), _int(staking.tx_index), _int(staking.cert_index))
        stake = _just(pointer)
    else:
        stake = _just(_constr(0, _credential(staking)))
    return _constr(0, _credential(payment), stake)


def value_data(coin: int, assets: MultiAsset | None, *, with_ada: bool = True) -> PlutusMap:
    entries: dict[PlutusData, PlutusData] = {}
    if with_ada:
        entries[_bytes(b"")] = PlutusMap({_bytes(b""): _int(coin)})
    assets = assets or MultiAsset()
    for policy in sorted(assets, key=lambda p: p.payload):
        tokens = {
            _bytes(name.payload): _int(qty)
            for name, qty in sorted(assets[policy].items(), key=lambda kv: kv[0].payload)
            if qty != 0
        }
        if tokens:
            entries[_bytes(policy.payload)] = PlutusMap(tokens)
    return PlutusMap(entries)


class TxContext:
    """One transaction as its scripts see it; builds a ScriptContext per redeemer."""

    def __init__(self, tx: Transaction, resolved: Iterable[UTxO], slot_config: SlotConfig):
        self.tx = tx
        self.body = tx.transaction_body
        self.witnesses = tx.transaction_witness_set
        self.slot_config = slot_config
        self.utxos: dict[TransactionInput, TransactionOutput] = {
            u.input: u.output for u in resolved
        }
        self.inputs = _sorted_inputs(self.body.inputs)
        self.reference_inputs = _sorted_inputs(self.body.reference_inputs)
        self.redeemers = tx_redeemers(tx)
        self.datums: dict[bytes, Any] = {
            datum_hash(d).payload: d for d in (self.witnesses.plutus_data or [])
        }

    # -- the parts of TxInfo -------------------------------------------------------------
    def _refuse_unsupported(self) -> None:
        for name, value in (
            ("certificates", self.body.certificates),
            ("voting procedures", self.body.voting_procedures),
            ("proposal procedures", self.body.proposal_procedures),
        ):
            if value:
                raise ContextError(f"transactions with {name} are not supported here")

    def resolve(self, tx_input: TransactionInput) -> TransactionOutput:
        try:
            return self.utxos[tx_input]
        except KeyError:
            raise ContextError(f"input {tx_input} is not among the resolved UTxOs") from None

    def _out_ref(self, tx_input: TransactionInput) -> PlutusData:
        return _constr(0, _bytes(tx_input.transaction_id.payload), _int(tx_input.index))

    def _output(self, output: TransactionOutput) -> PlutusData:
        if output.datum is not None:
            datum = _constr(2, to_data(output.datum))
        elif output.datum_hash is not None:
            datum = _constr(1, _bytes(output.datum_hash.payload))
        else:
            datum = _constr(0)
        ref_script = NOTHING
        if output.script is not None:
            ref_script = _just(_bytes(hash_script(output.script).payload))
        amount = output.amount
        value = value_data(amount.coin, amount.multi_asset)
        return _constr(0, address_data(output.address), value, datum, ref_script)

    def _in_info(self, tx_input: TransactionInput) -> PlutusData:
        return _constr(0, self._out_ref(tx_input), self._output(self.resolve(tx_input)))

    def _withdrawals(self) -> list[tuple[VerificationKeyHash | ScriptHash, int]]:
        pairs = []
        for raw_address, amount in (self.body.withdraws or {}).items():
            staking = Address.from_primitive(raw_address).staking_part
            if staking is None or isinstance(staking, PointerAddress):
                raise ContextError(f"withdrawal from a non-reward address {raw_address.hex()}")
            pairs.append((staking, amount))
        return sorted(pairs, key=lambda pair: _credential_order(pair[0]))

    def _mint_policies(self) -> list[ScriptHash]:
        return sorted(self.body.mint or {}, key=lambda p: p.payload)

    def _validity(self) -> PlutusData:
        # Conway's transValidityInterval: lower bound inclusive, upper bound exclusive.
        start, ttl = self.body.validity_start, self.body.ttl
        if start is None:
            lower = _constr(0, _constr(0), TRUE)
        else:
            lower = _constr(0, _constr(1, _int(self.slot_config.slot_to_posix_ms(start))), TRUE)
        if ttl is None:
            upper = _constr(0, _constr(2), TRUE)
        else:
            upper = _constr(0, _constr(1, _int(self.slot_config.slot_to_posix_ms(ttl))), FALSE)
        return _constr(0, lower, upper)

    @cached_property
    def tx_info(self) -> PlutusData:
        """TxInfo, built once (and only when a script needs it)."""
        self._refuse_unsupported()
        body = self.body
        signers = sorted(body.required_signers or [], key=lambda h: h.payload)
        withdrawals = PlutusMap({_credential(c): _int(n) for c, n in self._withdrawals()})
        redeemers = PlutusMap({self.purpose(r): to_data(r.data) for r in self.redeemers})
        datums = PlutusMap({_bytes(h): to_data(d) for h, d in sorted(self.datums.items())})
        treasury = body.current_treasury_value
        donation = body.donation
        return _constr(
            0,
            PlutusList([self._in_info(i) for i in self.inputs]),
            PlutusList([self._in_info(i) for i in self.reference_inputs]),
            PlutusList([self._output(o) for o in body.outputs]),
            _int(body.fee),
            value_data(0, body.mint, with_ada=False),
            PlutusList([]),  # certificates: refused above
            withdrawals,
            self._validity(),
            PlutusList([_bytes(h.payload) for h in signers]),
            redeemers,
            datums,
            _bytes(body.hash()),
            PlutusMap({}),  # votes: refused above
            PlutusList([]),  # proposal procedures: refused above
            NOTHING if treasury is None else _just(_int(treasury)),
            NOTHING if not donation else _just(_int(donation)),
        )

    # -- per redeemer ----------------------------------------------------------------------
    def _pick(self, items: Sequence[Any], redeemer: Redeemer, what: str) -> Any:
        if not 0 <= redeemer.index < len(items):
            raise ContextError(f"{_name(redeemer)}: the tx has {len(items)} {what}")
        return items[redeemer.index]

    def purpose(self, redeemer: Redeemer) -> PlutusData:
        """The redeemer's ScriptPurpose (the key of txInfoRedeemers)."""
        tag = redeemer.tag
        if tag == RedeemerTag.SPEND:
            return _constr(1, self._out_ref(self._pick(self.inputs, redeemer, "inputs")))
        if tag == RedeemerTag.MINT:
            policy = self._pick(self._mint_policies(), redeemer, "minted policies")
            return _constr(0, _bytes(policy.payload))
        if tag == RedeemerTag.WITHDRAWAL:
            credential, _ = self._pick(self._withdrawals(), redeemer, "withdrawals")
            return _constr(2, _credential(credential))
        raise ContextError(f"{_name(redeemer)}: {tag.name} redeemers are not supported here")

    def script_info(self, redeemer: Redeemer) -> PlutusData:
        """V3's ScriptInfo: the purpose, plus the spent output's datum for a spend."""
        purpose = self.purpose(redeemer)
        if redeemer.tag != RedeemerTag.SPEND:
            return purpose
        output = self.resolve(self.inputs[redeemer.index])
        if output.datum is not None:
            datum: PlutusData = _just(to_data(output.datum))
        elif output.datum_hash is not None and output.datum_hash.payload in self.datums:
            datum = _just(to_data(self.datums[output.datum_hash.payload]))
        else:
            datum = NOTHING
        return _constr(1, purpose.fields[0], datum)

    def script_hash(self, redeemer: Redeemer) -> ScriptHash:
        """The hash of the script this redeemer is for."""
        if redeemer.tag == RedeemerTag.SPEND:
            tx_input = self._pick(self.inputs, redeemer, "inputs")
            payment = self.resolve(tx_input).address.payment_part
            if not isinstance(payment, ScriptHash):
                raise ContextError(f"{_name(redeemer)}: input {tx_input} is not script-locked")
            return payment
        if redeemer.tag == RedeemerTag.MINT:
            policy: ScriptHash = self._pick(self._mint_policies(), redeemer, "minted policies")
            return policy
        if redeemer.tag == RedeemerTag.WITHDRAWAL:
            credential, _ = self._pick(self._withdrawals(), redeemer, "withdrawals")
            if not isinstance(credential, ScriptHash):
                raise ContextError(f"{_name(redeemer)}: withdrawal is not script-controlled")
            return credential
        raise ContextError(f"{_name(redeemer)}: {redeemer.tag.name} is not supported here")

    def script_context(self, redeemer: Redeemer) -> PlutusData:
        return _constr(0, self.tx_info, to_data(redeemer.data), self.script_info(redeemer))

    def scripts(self) -> dict[bytes, Any]:
        """Every script the tx can run, by hash: witnesses and reference scripts."""
        found: dict[bytes, Any] = {}
        w = self.witnesses
        for group in (w.native_scripts, w.plutus_v1_script, w.plutus_v2_script, w.plutus_v3_script):
            for script in group or []:
                found[hash_script(script).payload] = script
        for tx_input in [*self.inputs, *self.reference_inputs]:
            script = self.resolve(tx_input).script
            if script is not None:
                found[hash_script(script).payload] = script
        return found


def script_context(
    tx: Transaction, resolved: Iterable[UTxO], redeemer: Redeemer, slot_config: SlotConfig
) -> PlutusData:
    """The ScriptContext `redeemer`'s script sees in `tx` (one-off; reuse TxContext for many)."""
    return TxContext(tx, resolved, slot_config).script_context(redeemer)


def _name(redeemer: Redeemer) -> str:
    return redeemer_name(redeemer.tag, redeemer.index)


def redeemer_name(tag: RedeemerTag, index: int) -> str:
    """The "spend:0" naming Blockfrost/Ogmios and pycardano's builder use."""
    return f"{tag.name.lower()}:{index}"
