"""The NTX escrow contract: validator source, compiled artifact, datum and oracle message."""

from oracle_client.escrow.contract.artifact import escrow_address, escrow_script, escrow_script_hash
from oracle_client.escrow.contract.datum import (
    Claim,
    Distribute,
    EscrowDatum,
    EscrowRef,
    OracleKind,
    Refund,
    base_to_ntx,
    distribute_message,
    format_ntx,
    ntx_to_base,
    oracle_message,
)

__all__ = [
    "Claim",
    "Distribute",
    "EscrowDatum",
    "EscrowRef",
    "OracleKind",
    "Refund",
    "base_to_ntx",
    "distribute_message",
    "escrow_address",
    "escrow_script",
    "escrow_script_hash",
    "format_ntx",
    "ntx_to_base",
    "oracle_message",
]
