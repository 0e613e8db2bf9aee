"""Protocol parameters and genesis of the local ledger, in Blockfrost's JSON shapes.

The ledger checks transactions against the very `ProtocolParameters` a client gets from
`BlockFrostChainContext`: both are parsed from the same JSON by the same rules
(`protocol_parameters_from_json` mirrors pycardano's blockfrost backend), so a fee or min-ADA
the client computed is the one the ledger demands, to the lovelace.
"""

from __future__ import annotations

import json
from fractions import Fraction
from functools import cache
from importlib import resources
from typing import Any

from pycardano.backend.base import (
    ALONZO_COINS_PER_UTXO_WORD,
    ChainContext,
    GenesisParameters,
    ProtocolParameters,
)
from pycardano.network import Network

# Mainnet-like Conway values (protocol 10). Blockfrost returns big numbers as strings; keep that,
# clients int() them.
NETWORK_MAGIC = 42  # the customary magic of local devnets; addresses are testnet ones
# Slot 0 starts here (POSIX seconds). A fixed constant, so slots of every local ledger agree.
SYSTEM_START = 1_654_041_600
SLOT_LENGTH_S = 1
EPOCH_LENGTH = 432_000  # 5 days of 1 s slots, as on mainnet
PROTOCOL_MAJOR = 10
PROTOCOL_MINOR = 0

_UPLC_COST_MODELS = "2024-07-30/cost-model-merged.json"


@cache
def cost_models() -> dict[str, dict[str, int]]:
    """Named cost models, V1..V3, in the ledger's canonical parameter order.

    Taken from uplc's bundled network config: the evaluator prices scripts with these very
    numbers, so the script data hash (which commits to them) and the ex-units agree. pycardano
    serialises V3 in dict order, which this file keeps canonical (297 entries).
    """
    path = resources.files("uplc").joinpath("cost_model_files", *_UPLC_COST_MODELS.split("/"))
    data = json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, dict[str, int]] = {}
    for lang in ("PlutusV1", "PlutusV2", "PlutusV3"):
        out[lang] = {str(k): int(v) for k, v in data[lang].items()}
    return out


def protocol_parameters_json(epoch: int) -> dict[str, Any]:
    """GET /epochs/latest/parameters."""
    models = cost_models()
    return {
        "epoch": epoch,
        "min_fee_a": 44,
        "min_fee_b": 155381,
        "max_block_size": 90112,
        "max_tx_size": 16384,
        "max_block_header_size": 1100,
        "key_deposit": "2000000",
        "pool_deposit": "500000000",
        "e_max": 18,
        "n_opt": 500,
        "a0": 0.3,
        "rho": 0.003,
        "tau": 0.2,
        "decentralisation_param": 0,
        "extra_entropy": None,
        "protocol_major_ver": PROTOCOL_MAJOR,
        "protocol_minor_ver": PROTOCOL_MINOR,
        "min_utxo": "4310",
        "min_pool_cost": "170000000",
        "nonce": "0" * 64,
        "cost_models": models,
        "cost_models_raw": {k: list(v.values()) for k, v in models.items()},
        "price_mem": 0.0577,
        "price_step": 0.0000721,
        "max_tx_ex_mem": "14000000",
        "max_tx_ex_steps": "10000000000",
        "max_block_ex_mem": "62000000",
        "max_block_ex_steps": "20000000000",
        "max_val_size": "5000",
        "collateral_percent": 150,
        "max_collateral_inputs": 3,
        "coins_per_utxo_size": "4310",
        "coins_per_utxo_word": "4310",
        "pvt_motion_no_confidence": 0.51,
        "pvt_committee_normal": 0.51,
        "pvt_committee_no_confidence": 0.51,
        "pvt_hard_fork_initiation": 0.51,
        "dvt_motion_no_confidence": 0.67,
        "dvt_committee_normal": 0.67,
        "dvt_committee_no_confidence": 0.6,
        "dvt_update_to_constitution": 0.75,
        "dvt_hard_fork_initiation": 0.6,
        "dvt_p_p_network_group": 0.67,
        "dvt_p_p_economic_group": 0.67,
        "dvt_p_p_technical_group": 0.67,
        "dvt_p_p_gov_group": 0.75,
        "dvt_treasury_withdrawal": 0.67,
        "committee_min_size": "7",
        "committee_max_term_length": "146",
        "gov_action_lifetime": "6",
        "gov_action_deposit": "100000000000",
        "drep_deposit": "500000000",
        "drep_activity": "20",
        "pvtpp_security_group": 0.51,
        "pvt_p_p_security_group": 0.51,
        "min_fee_ref_script_cost_per_byte": 15,
    }


def genesis_json(system_start: int = SYSTEM_START) -> dict[str, Any]:
    """GET /genesis: exactly GenesisParameters' fields (pycardano passes them as kwargs)."""
    return {
        "active_slots_coefficient": 0.05,
        "update_quorum": 5,
        "max_lovelace_supply": "45000000000000000",
        "network_magic": NETWORK_MAGIC,
        "epoch_length": EPOCH_LENGTH,
        "system_start": system_start,
        "slots_per_kes_period": 129600,
        "slot_length": SLOT_LENGTH_S,
        "max_kes_evolutions": 62,
        "security_param": 2160,
    }


def protocol_parameters_from_json(p: dict[str, Any]) -> ProtocolParameters:
    """The mapping pycardano's BlockFrostChainContext.protocol_param applies, field by field."""
    return ProtocolParameters(
        min_fee_constant=int(p["min_fee_b"]),
        min_fee_coefficient=int(p["min_fee_a"]),
        max_block_size=int(p["max_block_size"]),
        max_tx_size=int(p["max_tx_size"]),
        max_block_header_size=int(p["max_block_header_size"]),
        key_deposit=int(p["key_deposit"]),
        pool_deposit=int(p["pool_deposit"]),
        pool_influence=Fraction(p["a0"]),
        monetary_expansion=Fraction(p["rho"]),
        treasury_expansion=Fraction(p["tau"]),
        decentralization_param=Fraction(p["decentralisation_param"]),
        extra_entropy=p["extra_entropy"],
        protocol_major_version=int(p["protocol_major_ver"]),
        protocol_minor_version=int(p["protocol_minor_ver"]),
        min_utxo=int(p["min_utxo"]),
        min_pool_cost=int(p["min_pool_cost"]),
        price_mem=Fraction(p["price_mem"]),
        price_step=Fraction(p["price_step"]),
        max_tx_ex_mem=int(p["max_tx_ex_mem"]),
        max_tx_ex_steps=int(p["max_tx_ex_steps"]),
        max_block_ex_mem=int(p["max_block_ex_mem"]),
        max_block_ex_steps=int(p["max_block_ex_steps"]),
        max_val_size=int(p["max_val_size"]),
        collateral_percent=int(p["collateral_percent"]),
        max_collateral_inputs=int(p["max_collateral_inputs"]),
        coins_per_utxo_word=int(p["coins_per_utxo_word"]) or ALONZO_COINS_PER_UTXO_WORD,
        coins_per_utxo_byte=int(p["coins_per_utxo_size"]),
        cost_models={k: dict(v) for k, v in p["cost_models"].items()},
        maximum_reference_scripts_size={"bytes": 200000},
        min_fee_reference_scripts={
            "base": p["min_fee_ref_script_cost_per_byte"],
            "range": 200000,
            "multiplier": 1,
        },
    )


class ParamsContext(ChainContext):
    """A chain context that only knows parameters: what pycardano's fee and min-ADA helpers read."""

    def __init__(self, system_start: int = SYSTEM_START) -> None:
        self._params = protocol_parameters_from_json(protocol_parameters_json(0))
        self._genesis = GenesisParameters(**genesis_json(system_start))

    @property
    def protocol_param(self) -> ProtocolParameters:
        return self._params

    @property
    def genesis_param(self) -> GenesisParameters:
        return self._genesis

    @property
    def network(self) -> Network:
        return Network.TESTNET
