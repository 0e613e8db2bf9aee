"""Offline Plutus: V3 ScriptContexts from pycardano transactions, and running scripts with uplc."""

import logging

from oracle_client.cardano.plutus.context import (
    MAINNET,
    PREPROD,
    PREVIEW,
    ContextError,
    SlotConfig,
    TxContext,
    script_context,
)
from oracle_client.cardano.plutus.evaluate import (
    DEFAULT_PRICES,
    MAX_TX_EX_UNITS,
    ExPrices,
    ScriptFailure,
    ScriptResult,
    evaluate_tx,
    execution_units,
    require_success,
    script_fee,
)

# pycardano's builder dumps its whole state at WARNING on any error; callers report errors.
logging.getLogger("PyCardano").setLevel(logging.ERROR)

__all__ = [
    "DEFAULT_PRICES",
    "MAINNET",
    "MAX_TX_EX_UNITS",
    "PREPROD",
    "PREVIEW",
    "ContextError",
    "ExPrices",
    "ScriptFailure",
    "ScriptResult",
    "SlotConfig",
    "TxContext",
    "evaluate_tx",
    "execution_units",
    "require_success",
    "script_context",
    "script_fee",
]
