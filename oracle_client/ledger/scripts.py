"""The ledger's bridge to the offline Plutus evaluator (oracle_client.cardano.plutus).

Kept apart so the validator sees a small, stable shape (`RedeemerRun`) and every evaluator
exception, expected or not, becomes a `ScriptRunError` with a message instead of a 500.
"""

from __future__ import annotations

from dataclasses import dataclass

from pycardano.plutus import ExecutionUnits
from pycardano.transaction import Transaction, UTxO

from oracle_client.cardano.plutus import ContextError, SlotConfig, evaluate_tx
from oracle_client.ledger.clock import LedgerClock
from oracle_client.ledger.params import SLOT_LENGTH_S


class ScriptRunError(Exception):
    """The transaction's scripts cannot be run at all (missing UTxO or script, bad script)."""


@dataclass(frozen=True)
class RedeemerRun:
    key: str  # "spend:0"
    ok: bool
    mem: int
    steps: int
    error: str
    logs: tuple[str, ...]


def slot_config(clock: LedgerClock) -> SlotConfig:
    """Slot 0 is the genesis system start; slots are SLOT_LENGTH_S long."""
    return SlotConfig(
        zero_time_ms=clock.system_start * 1000, zero_slot=0, slot_length_ms=SLOT_LENGTH_S * 1000
    )


def run_scripts(
    tx: Transaction, resolved: list[UTxO], clock: LedgerClock, budget: ExecutionUnits
) -> list[RedeemerRun]:
    """Each redeemer's script run with up to `budget` (the per-tx maximum): the validator then
    compares what it used with what the redeemer declares, for a clearer message than an
    exhausted budget."""
    try:
        results = evaluate_tx(tx, resolved, slot_config(clock), budget=budget)
    except ContextError as exc:
        raise ScriptRunError(str(exc)) from exc
    except Exception as exc:  # a malformed script or datum must not take the server down
        raise ScriptRunError(f"{type(exc).__name__}: {exc}") from exc
    return [
        RedeemerRun(
            key=r.redeemer,
            ok=r.ok,
            mem=r.mem,
            steps=r.cpu,
            error=r.error or "",
            logs=tuple(r.logs),
        )
        for r in results
    ]
