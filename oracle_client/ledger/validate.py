"""Phase-1 and phase-2 checks of a submitted transaction, in the order the ledger can afford.

Cheap structural checks first (size, decoding, unsupported features, inputs exist and are
unspent, validity interval, signatures, value, min ADA, fee, collateral, script data hash), the
scripts last. Each failure raises `TxRejected` with one sentence that says what was wrong and by
how much: that text goes back to the wallet as Blockfrost's 400 message.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey
from pycardano.address import Address
from pycardano.cbor import cbor2
from pycardano.exception import DeserializeException
from pycardano.hash import ScriptHash, VerificationKeyHash
from pycardano.nativescript import NativeScript
from pycardano.network import Network
from pycardano.plutus import (
    CostModels,
    ExecutionUnits,
    PlutusScript,
    PlutusV3Script,
    RedeemerMap,
    script_hash,
)
from pycardano.serialization import default_encoder
from pycardano.transaction import Transaction, TransactionInput, TransactionOutput
from pycardano.utils import fee as min_fee_for
from pycardano.utils import min_lovelace_post_alonzo

from oracle_client.ledger.clock import LedgerClock
from oracle_client.ledger.params import ParamsContext
from oracle_client.ledger.rawcbor import array_items, map_values
from oracle_client.ledger.scripts import ScriptRunError, run_scripts
from oracle_client.ledger.state import (
    LedgerState,
    NewTx,
    StoredUtxo,
    blake2b_224,
    blake2b_256,
)

Units = dict[str, int]  # "lovelace" or policy+name hex -> quantity


class TxRejected(Exception):
    """The ledger refuses the transaction; str(exc) is the reason shown to the submitter."""


@dataclass(frozen=True)
class Redeemer:
    tag: str  # "spend", "mint", ...
    index: int
    mem: int
    steps: int

    @property
    def key(self) -> str:
        return f"{self.tag}:{self.index}"


@dataclass(frozen=True)
class Decoded:
    """A transaction decoded once, with the raw slices its hashes are computed over."""

    raw: bytes
    tx: Transaction
    tx_hash: str
    witness_raw: dict[int, bytes]
    aux_raw: bytes | None


def decode(raw: bytes, max_size: int) -> Decoded:
    if len(raw) > max_size:
        raise TxRejected(f"transaction is {len(raw)} bytes, the maximum is {max_size}")
    try:
        parts = array_items(raw)
        if len(parts) not in (3, 4):
            raise ValueError(f"expected 3 or 4 elements, got {len(parts)}")
        witness_raw = map_values(parts[1], "witness set")
        tx = Transaction.from_cbor(raw)
    except (ValueError, DeserializeException, TypeError, KeyError, IndexError) as exc:
        raise TxRejected(f"cannot decode transaction: {exc}") from exc
    except Exception as exc:  # pycardano raises assorted types on malformed input
        raise TxRejected(f"cannot decode transaction: {type(exc).__name__}: {exc}") from exc
    aux_raw = parts[3] if len(parts) == 4 and parts[3] != b"\xf6" else None
    return Decoded(raw, tx, blake2b_256(parts[0]).hex(), witness_raw, aux_raw)


def redeemers_of(tx: Transaction) -> list[Redeemer]:
    found = tx.transaction_witness_set.redeemer
    out: list[Redeemer] = []
    if found is None:
        return out
    if isinstance(found, RedeemerMap):
        for k, v in found.items():
            out.append(Redeemer(k.tag.name.lower(), int(k.index), v.ex_units.mem, v.ex_units.steps))
    else:
        for r in found:
            if r.tag is None or r.ex_units is None:
                raise TxRejected("a redeemer has no tag or no execution units")
            out.append(Redeemer(r.tag.name.lower(), int(r.index), r.ex_units.mem, r.ex_units.steps))
    keys = [r.key for r in out]
    if len(set(keys)) != len(keys):
        raise TxRejected("two redeemers share a purpose")
    return out


def _ref(i: TransactionInput) -> str:
    return f"{i.transaction_id.payload.hex()}#{i.index}"


def sorted_inputs(inputs: Iterable[TransactionInput]) -> list[TransactionInput]:
    """Ledger order (tx id bytes, then index): what a spend redeemer's index counts in."""
    return sorted(inputs, key=lambda i: (i.transaction_id.payload, i.index))


def _add(total: Units, unit: str, qty: int) -> None:
    total[unit] = total.get(unit, 0) + qty


def value_units(output: TransactionOutput) -> Units:
    units: Units = {"lovelace": int(output.amount.coin)}
    for policy, assets in output.amount.multi_asset.items():
        for name, qty in assets.items():
            _add(units, policy.payload.hex() + name.payload.hex(), int(qty))
    return units


def _sum(values: Iterable[Units]) -> Units:
    total: Units = {"lovelace": 0}
    for v in values:
        for unit, qty in v.items():
            _add(total, unit, qty)
    return {u: q for u, q in total.items() if q != 0 or u == "lovelace"}


def _fmt(units: Units) -> str:
    parts = [f"{units.get('lovelace', 0)} lovelace"]
    parts += [f"{q} {u[:8]}..{u[56:]}" for u, q in sorted(units.items()) if u != "lovelace"]
    return ", ".join(parts)


class Validator:
    """Checks transactions against one ledger state, clock and parameter set."""

    def __init__(self, state: LedgerState, clock: LedgerClock) -> None:
        self.state = state
        self.clock = clock
        self.ctx = ParamsContext(state.system_start)
        self.params = self.ctx.protocol_param
        self.max_ex = ExecutionUnits(self.params.max_tx_ex_mem, self.params.max_tx_ex_steps)

    # -- resolution --------------------------------------------------------------------------

    def resolve(self, inputs: Iterable[TransactionInput], what: str) -> list[StoredUtxo]:
        out: list[StoredUtxo] = []
        for i in inputs:
            found = self.state.get_utxo(i.transaction_id.payload.hex(), int(i.index))
            if found is None:
                raise TxRejected(f"{what} {_ref(i)} does not exist")
            if found.spent_by is not None:
                raise TxRejected(
                    f"{what} {_ref(i)} is already spent (by {found.spent_by}): double spend"
                )
            out.append(found)
        return out

    # -- the checks --------------------------------------------------------------------------

    def check(self, raw: bytes) -> NewTx:
        d = decode(raw, self.params.max_tx_size)
        tx, body = d.tx, d.tx.transaction_body
        self._check_supported(d)
        inputs = list(body.inputs)
        if not inputs:
            raise TxRejected("a transaction needs at least one input")
        if len({_ref(i) for i in inputs}) != len(inputs):
            raise TxRejected("an input is listed twice")
        spent = self.resolve(inputs, "input")
        refs = self.resolve(body.reference_inputs or [], "reference input")
        collateral = self.resolve(body.collateral or [], "collateral input")
        self._check_validity(body.validity_start, body.ttl)
        self._check_outputs(body.outputs)
        if body.collateral_return is not None:
            self._check_outputs([body.collateral_return], "collateral return")
        self._check_balance(spent, body.outputs, int(body.fee))
        self._check_signatures(d, spent, collateral)
        redeemers = redeemers_of(tx)
        scripts_by_input = self._check_scripts(d, inputs, spent, refs, redeemers)
        self._check_fee(d, redeemers, spent, refs)
        if redeemers:
            self._check_collateral(
                collateral, body.collateral_return, body.total_collateral, int(body.fee)
            )
        self._check_script_data_hash(d, redeemers, scripts_by_input)
        if d.aux_raw is not None or body.auxiliary_data_hash is not None:
            self._check_aux_hash(d)
        if redeemers:
            self._run(d, spent, refs, redeemers)
        return NewTx(
            hash=d.tx_hash,
            cbor=raw,
            inputs=[(i.transaction_id.payload.hex(), int(i.index)) for i in inputs],
            input_addresses=[u.address for u in spent],
            outputs=list(body.outputs),
            fee=int(body.fee),
            invalid_before=body.validity_start,
            invalid_hereafter=body.ttl,
            redeemer_count=len(redeemers),
        )

    def _check_supported(self, d: Decoded) -> None:
        body, ws = d.tx.transaction_body, d.tx.transaction_witness_set
        if not d.tx.valid:
            raise TxRejected("transactions marked is_valid=false are not accepted")
        unsupported = {
            "mint": body.mint,
            "certificates": body.certificates,
            "withdrawals": body.withdraws,
            "update proposals": body.update,
            "votes": body.voting_procedures,
            "governance proposals": body.proposal_procedures,
            "treasury value": body.current_treasury_value,
            "treasury donations": body.donation,
            "bootstrap (Byron) witnesses": ws.bootstrap_witness,
        }
        for what, value in unsupported.items():
            if value:
                hint = " (only the faucet creates tokens)" if what == "mint" else ""
                raise TxRejected(f"{what} are not supported by the local ledger{hint}")
        if body.network_id is not None and body.network_id != Network.TESTNET:
            raise TxRejected("the transaction's network id is mainnet; this ledger is a testnet")

    def _check_validity(self, start: int | None, ttl: int | None) -> None:
        slot = self.clock.slot()
        if start is not None and slot < start:
            raise TxRejected(
                f"not valid yet: the validity interval starts at slot {start}, the current slot"
                f" is {slot} ({start - slot} s to go)"
            )
        if ttl is not None and slot >= ttl:
            raise TxRejected(
                f"expired: the validity interval ended before slot {ttl}, the current slot is"
                f" {slot}"
            )

    def _check_outputs(self, outputs: Sequence[TransactionOutput], what: str = "output") -> None:
        if not outputs and what == "output":
            raise TxRejected("a transaction needs at least one output")
        for n, out in enumerate(outputs):
            label = f"{what} #{n}" if what == "output" else what
            if out.address.network != Network.TESTNET:
                raise TxRejected(f"{label} pays a mainnet address; this ledger is a testnet")
            for unit, qty in value_units(out).items():
                if qty < 0 or (unit != "lovelace" and qty == 0):
                    raise TxRejected(f"{label} holds {qty} of {unit}: quantities must be positive")
            need = min_lovelace_post_alonzo(out, self.ctx)
            if out.amount.coin < need:
                raise TxRejected(
                    f"{label} holds {out.amount.coin} lovelace, below its minimum of {need}"
                    f" ({self.params.coins_per_utxo_byte} lovelace per byte)"
                )
            size = len(cbor2.dumps(out.amount, default=default_encoder))
            if size > self.params.max_val_size:
                raise TxRejected(
                    f"{label}'s value is {size} bytes, the maximum is {self.params.max_val_size}"
                )

    def _check_balance(
        self, spent: Sequence[StoredUtxo], outputs: Sequence[TransactionOutput], fee: int
    ) -> None:
        if fee < 0:
            raise TxRejected("the fee is negative")
        consumed = _sum(_units_of(u) for u in spent)
        produced = _sum([*(value_units(o) for o in outputs), {"lovelace": fee}])
        if consumed != produced:
            diff = {
                u: produced.get(u, 0) - consumed.get(u, 0)
                for u in set(consumed) | set(produced)
                if produced.get(u, 0) != consumed.get(u, 0)
            }
            raise TxRejected(
                f"value is not conserved: inputs hold {_fmt(consumed)}; outputs plus fee hold"
                f" {_fmt(produced)} (difference {_fmt(diff)})"
            )

    def _check_signatures(
        self, d: Decoded, spent: Sequence[StoredUtxo], collateral: Sequence[StoredUtxo]
    ) -> None:
        body_hash = bytes.fromhex(d.tx_hash)
        signed: set[bytes] = set()
        for w in d.tx.transaction_witness_set.vkey_witnesses or []:
            vkey = bytes(w.vkey.payload)
            key_hash = blake2b_224(vkey)
            if len(vkey) != 32 or len(w.signature) != 64:
                raise TxRejected(f"malformed key witness for key hash {key_hash.hex()}")
            try:
                VerifyKey(vkey).verify(body_hash, bytes(w.signature))
            except BadSignatureError as exc:
                raise TxRejected(
                    f"invalid signature by key hash {key_hash.hex()}: it does not sign this"
                    f" transaction's body hash {d.tx_hash}"
                ) from exc
            signed.add(key_hash)
        needed: list[tuple[bytes, str]] = []
        for what, utxos in (("input", spent), ("collateral input", collateral)):
            for u in utxos:
                part = Address.from_primitive(u.address).payment_part
                if isinstance(part, VerificationKeyHash):
                    needed.append((part.payload, f"{what} {u.tx_hash}#{u.output_index}"))
                elif what == "collateral input":
                    raise TxRejected(
                        f"collateral input {u.tx_hash}#{u.output_index} is locked by a script;"
                        " collateral must be key-locked"
                    )
        for signer in d.tx.transaction_body.required_signers or []:
            needed.append((signer.payload, "required signer"))
        for key_hash, why in needed:
            if key_hash not in signed:
                raise TxRejected(f"missing signature of key hash {key_hash.hex()} ({why})")

    def _check_scripts(
        self,
        d: Decoded,
        inputs: Sequence[TransactionInput],
        spent: Sequence[StoredUtxo],
        refs: Sequence[StoredUtxo],
        redeemers: Sequence[Redeemer],
    ) -> dict[str, PlutusScript]:
        """Every script input has a Plutus V3 script and a redeemer; no redeemer is stray."""
        ws = d.tx.transaction_witness_set
        available: dict[bytes, PlutusScript | NativeScript] = {}
        witness_hashes: set[bytes] = set()
        for group in (
            ws.plutus_v1_script,
            ws.plutus_v2_script,
            ws.plutus_v3_script,
            ws.native_scripts,
        ):
            for s in group or []:
                h = script_hash(s).payload
                available[h] = s
                witness_hashes.add(h)
        for u in [*spent, *refs]:
            out = TransactionOutput.from_cbor(u.output_cbor)
            if out.script is not None:
                available.setdefault(script_hash(out.script).payload, out.script)
        by_ref = {(u.tx_hash, u.output_index): u for u in spent}
        order = {_ref(i): n for n, i in enumerate(sorted_inputs(inputs))}
        expected: dict[str, PlutusScript] = {}
        used: set[bytes] = set()
        for i in inputs:
            u = by_ref[(i.transaction_id.payload.hex(), int(i.index))]
            part = Address.from_primitive(u.address).payment_part
            if not isinstance(part, ScriptHash):
                continue
            script = available.get(part.payload)
            where = f"input {_ref(i)}"
            if script is None:
                raise TxRejected(
                    f"{where} is locked by script {part.payload.hex()}, which the transaction"
                    " neither carries nor references"
                )
            if not isinstance(script, PlutusV3Script):
                raise TxRejected(
                    f"{where} is locked by a {type(script).__name__}; the local ledger runs"
                    " Plutus V3 only"
                )
            used.add(part.payload)
            expected[f"spend:{order[_ref(i)]}"] = script
        extra = witness_hashes - used
        if extra:
            raise TxRejected(
                f"the transaction carries script {sorted(extra)[0].hex()} that no input needs"
            )
        got = {r.key for r in redeemers}
        for key in expected:
            if key not in got:
                raise TxRejected(f"no redeemer for {key} (a script-locked input)")
        for key in sorted(got - set(expected)):
            raise TxRejected(f"redeemer {key} points at no script-locked input")
        return expected

    def _check_fee(
        self,
        d: Decoded,
        redeemers: Sequence[Redeemer],
        spent: Sequence[StoredUtxo],
        refs: Sequence[StoredUtxo],
    ) -> None:
        mem = sum(r.mem for r in redeemers)
        steps = sum(r.steps for r in redeemers)
        if mem > self.params.max_tx_ex_mem or steps > self.params.max_tx_ex_steps:
            raise TxRejected(
                f"redeemers declare {mem} mem / {steps} steps; a transaction may use at most"
                f" {self.params.max_tx_ex_mem} / {self.params.max_tx_ex_steps}"
            )
        ref_size = 0
        for u in [*spent, *refs]:
            if u.script_ref_hash is not None:
                out = TransactionOutput.from_cbor(u.output_cbor)
                if isinstance(out.script, PlutusScript):
                    ref_size += len(bytes(out.script))
                elif out.script is not None:
                    ref_size += len(out.script.to_cbor())
        need = min_fee_for(self.ctx, len(d.raw), steps, mem, ref_size)
        fee = int(d.tx.transaction_body.fee)
        if fee < need:
            raise TxRejected(
                f"fee too low: {fee} lovelace, the minimum for this {len(d.raw)}-byte transaction"
                f" with {mem} mem / {steps} steps is {need}"
            )

    def _check_collateral(
        self,
        collateral: Sequence[StoredUtxo],
        collateral_return: TransactionOutput | None,
        total_collateral: int | None,
        fee: int,
    ) -> None:
        if not collateral:
            raise TxRejected("the transaction runs scripts but has no collateral inputs")
        if len(collateral) > self.params.max_collateral_inputs:
            raise TxRejected(
                f"{len(collateral)} collateral inputs; at most {self.params.max_collateral_inputs}"
            )
        posted = _sum(_units_of(u) for u in collateral)
        if collateral_return is not None:
            back = value_units(collateral_return)
            posted = _sum([posted, {u: -q for u, q in back.items()}])
        if any(q != 0 for u, q in posted.items() if u != "lovelace"):
            raise TxRejected("collateral minus its return must be ADA only (return the tokens)")
        need = math.ceil(fee * self.params.collateral_percent / 100)
        if posted["lovelace"] < need:
            raise TxRejected(
                f"collateral of {posted['lovelace']} lovelace is below {need}"
                f" ({self.params.collateral_percent}% of the fee)"
            )
        if total_collateral is not None and total_collateral != posted["lovelace"]:
            raise TxRejected(
                f"total collateral says {total_collateral} lovelace, the collateral inputs minus"
                f" the return hold {posted['lovelace']}"
            )

    def _check_script_data_hash(
        self, d: Decoded, redeemers: Sequence[Redeemer], scripts: dict[str, PlutusScript]
    ) -> None:
        declared = d.tx.transaction_body.script_data_hash
        redeemers_raw = d.witness_raw.get(5)
        datums_raw = d.witness_raw.get(4)
        if not redeemers and datums_raw is None:
            if declared is not None:
                raise TxRejected("script data hash present, but no redeemers or datums")
            return
        languages: dict[int, dict[str, int]] = {}
        for s in scripts.values():
            languages[s.version - 1] = self.params.cost_models.get(f"PlutusV{s.version}", {})
        views = CostModels(languages) if redeemers else {}
        # No redeemers: the ledger hashes an empty redeemer map and no cost models.
        redeemer_bytes = redeemers_raw if redeemers and redeemers_raw else b"\xa0"
        data = redeemer_bytes + (datums_raw or b"") + cbor2.dumps(views, default=default_encoder)
        expected = blake2b_256(data)
        if declared is None:
            raise TxRejected(f"script data hash missing; expected {expected.hex()}")
        if declared.payload != expected:
            raise TxRejected(
                f"script data hash is {declared.payload.hex()}, expected {expected.hex()}"
                " (over the redeemers, the datums and the cost models of the scripts run)"
            )

    def _check_aux_hash(self, d: Decoded) -> None:
        declared = d.tx.transaction_body.auxiliary_data_hash
        if d.aux_raw is None or declared is None:
            raise TxRejected("auxiliary data and its hash must come together")
        actual = blake2b_256(d.aux_raw)
        if declared.payload != actual:
            raise TxRejected(
                f"auxiliary data hash is {declared.payload.hex()}, the metadata hashes to"
                f" {actual.hex()}"
            )

    def _run(
        self,
        d: Decoded,
        spent: Sequence[StoredUtxo],
        refs: Sequence[StoredUtxo],
        redeemers: Sequence[Redeemer],
    ) -> None:
        resolved = [u.to_utxo() for u in [*spent, *refs]]
        try:
            runs = {r.key: r for r in run_scripts(d.tx, resolved, self.clock, self.max_ex)}
        except ScriptRunError as exc:
            raise TxRejected(f"cannot run the scripts: {exc}") from exc
        for r in redeemers:
            run = runs.get(r.key)
            if run is None:
                raise TxRejected(f"no script ran for redeemer {r.key}")
            if not run.ok:
                logs = f"; trace: {' | '.join(run.logs)}" if run.logs else ""
                raise TxRejected(f"script {r.key} failed: {run.error}{logs}")
            if run.mem > r.mem or run.steps > r.steps:
                raise TxRejected(
                    f"script {r.key} used {run.mem} mem / {run.steps} steps, more than the"
                    f" {r.mem} / {r.steps} its redeemer declares"
                )


def _units_of(u: StoredUtxo) -> Units:
    return {"lovelace": u.lovelace, **u.assets}
