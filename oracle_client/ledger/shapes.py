"""Blockfrost JSON shapes of the ledger's records (docs.blockfrost.io, API v0).

Field names and string-vs-number choices follow Blockfrost exactly, since blockfrost-python
turns the JSON into attribute objects and pycardano reads those attributes by name.
"""

from __future__ import annotations

from typing import Any

from pycardano.address import Address

from oracle_client.ledger.params import EPOCH_LENGTH
from oracle_client.ledger.state import StoredUtxo, TxRecord

JsonDict = dict[str, Any]


def amount_list(units: dict[str, int]) -> list[JsonDict]:
    """[{"unit": "lovelace", "quantity": "..."}, ...]: lovelace first, quantities as strings."""
    out = [{"unit": "lovelace", "quantity": str(units.get("lovelace", 0))}]
    out += [
        {"unit": unit, "quantity": str(qty)}
        for unit, qty in sorted(units.items())
        if unit != "lovelace" and qty != 0
    ]
    return out


def utxo_units(u: StoredUtxo) -> dict[str, int]:
    return {"lovelace": u.lovelace, **u.assets}


def utxo_json(u: StoredUtxo) -> JsonDict:
    """An element of GET /addresses/{address}/utxos."""
    return {
        "address": u.address,
        "tx_hash": u.tx_hash,
        "tx_index": u.output_index,  # deprecated by Blockfrost, still served
        "output_index": u.output_index,
        "amount": amount_list(utxo_units(u)),
        "block": u.block_hash,
        "data_hash": u.datum_hash,
        "inline_datum": u.inline_datum,
        "reference_script_hash": u.script_ref_hash,
    }


def address_json(address: Address, balance: dict[str, int]) -> JsonDict:
    """GET /addresses/{address}."""
    stake = None
    if address.staking_part is not None:
        try:
            stake = str(Address(staking_part=address.staking_part, network=address.network))
        except Exception:  # a pointer address has no stake address: Blockfrost says null
            stake = None
    return {
        "address": str(address),
        "amount": amount_list(balance),
        "stake_address": stake,
        "type": "shelley",
        "script": address.address_type.name.startswith("SCRIPT"),
    }


def epoch_json(epoch: int, system_start: int, block_count: int) -> JsonDict:
    """GET /epochs/latest. `end_time` matters: pycardano refetches parameters after it."""
    start = system_start + epoch * EPOCH_LENGTH
    return {
        "epoch": epoch,
        "start_time": start,
        "end_time": start + EPOCH_LENGTH,
        "first_block_time": start,
        "last_block_time": start,
        "block_count": block_count,
        "tx_count": block_count,
        "output": "0",
        "fees": "0",
        "active_stake": None,
    }


def tx_json(t: TxRecord, outputs: list[StoredUtxo]) -> JsonDict:
    """GET /txs/{hash}."""
    total: dict[str, int] = {}
    for o in outputs:
        for unit, qty in utxo_units(o).items():
            total[unit] = total.get(unit, 0) + qty
    return {
        "hash": t.hash,
        "block": t.block_hash,
        "block_height": t.block_height,
        "block_time": t.time,
        "slot": t.slot,
        "index": 0,
        "output_amount": amount_list(total),
        "fees": str(t.fee),
        "deposit": "0",
        "size": t.size,
        "invalid_before": None if t.invalid_before is None else str(t.invalid_before),
        "invalid_hereafter": None if t.invalid_hereafter is None else str(t.invalid_hereafter),
        "utxo_count": len(outputs),
        "withdrawal_count": 0,
        "mir_cert_count": 0,
        "delegation_count": 0,
        "stake_cert_count": 0,
        "pool_update_count": 0,
        "pool_retire_count": 0,
        "asset_mint_or_burn_count": 0,
        "redeemer_count": t.redeemer_count,
        "valid_contract": True,
    }


def tx_utxos_json(tx_hash: str, inputs: list[StoredUtxo], outputs: list[StoredUtxo]) -> JsonDict:
    """GET /txs/{hash}/utxos."""
    return {
        "hash": tx_hash,
        "inputs": [
            {
                "address": u.address,
                "amount": amount_list(utxo_units(u)),
                "tx_hash": u.tx_hash,
                "output_index": u.output_index,
                "data_hash": u.datum_hash,
                "inline_datum": u.inline_datum,
                "reference_script_hash": u.script_ref_hash,
                "collateral": False,
                "reference": False,
            }
            for u in inputs
        ],
        "outputs": [
            {
                "address": u.address,
                "amount": amount_list(utxo_units(u)),
                "output_index": u.output_index,
                "data_hash": u.datum_hash,
                "inline_datum": u.inline_datum,
                "collateral": False,
                "reference_script_hash": u.script_ref_hash,
                "consumed_by_tx": u.spent_by,
            }
            for u in outputs
        ],
    }


def block_json(
    height: int, block_hash: str, previous: str | None, slot: int, time_s: int, tx_count: int
) -> JsonDict:
    """GET /blocks/latest."""
    return {
        "time": time_s,
        "height": height,
        "hash": block_hash,
        "slot": slot,
        "epoch": slot // EPOCH_LENGTH,
        "epoch_slot": slot % EPOCH_LENGTH,
        "slot_leader": "nunet-ledger",
        "size": 0,
        "tx_count": tx_count,
        "output": None,
        "fees": None,
        "block_vrf": None,
        "op_cert": None,
        "op_cert_counter": None,
        "previous_block": previous,
        "next_block": None,
        "confirmations": 0,
    }


def evaluation_result(units: dict[str, tuple[int, int]]) -> JsonDict:
    """Ogmios v5 EvaluateTx success, which pycardano's blockfrost backend parses."""
    return _ogmios(
        {"EvaluationResult": {k: {"memory": m, "steps": s} for k, (m, s) in units.items()}}
    )


def evaluation_failure(failure: JsonDict) -> JsonDict:
    return _ogmios({"EvaluationFailure": failure})


def _ogmios(result: JsonDict) -> JsonDict:
    return {
        "type": "jsonwsp/response",
        "version": "1.0",
        "servicename": "ogmios",
        "methodname": "EvaluateTx",
        "result": result,
        "reflection": {"id": "nunet-ledger"},
    }
