"""The NTX escrow contract: validator source, compiled artifact, datum and oracle message."""

from oracle_client.escrow.contract.artifact import escrow_address, escrow_script, escrow_script_hash
from oracle_client.escrow.contract.datum import (
    Claim,
    ConsumerStake,
    Distribute,
    EscrowDatum,
    EscrowRef,
    NoStakingCredential,
    OracleKind,
    Refund,
    base_to_ntx,
    consumer_address,
    distribute_message,
    format_ntx,
    ntx_to_base,
    oracle_message,
    staking_of,
)

__all__ = [
    "Claim",
    "ConsumerStake",
    "Distribute",
    "EscrowDatum",
    "EscrowRef",
    "NoStakingCredential",
    "OracleKind",
    "Refund",
    "base_to_ntx",
    "consumer_address",
    "distribute_message",
    "escrow_address",
    "escrow_script",
    "escrow_script_hash",
    "format_ntx",
    "ntx_to_base",
    "oracle_message",
    "staking_of",
]
