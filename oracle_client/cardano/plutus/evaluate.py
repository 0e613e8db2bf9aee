"""Run a transaction's Plutus V3 scripts offline with uplc: execution units, fee, logs, errors.

Stable API (the local ledger and the chain contexts depend on it):

    evaluate_tx(tx, resolved_utxos, slot_config, *, budget=MAX_TX_EX_UNITS,
                prices=DEFAULT_PRICES) -> list[ScriptResult]

- `tx`: a pycardano Transaction; its redeemers' declared ex-units are not used as the
  budget (a builder asks with placeholders), each script may use up to `budget`.
- `resolved_utxos`: UTxOs for every input and reference input (collateral is not needed).
- `slot_config`: turns the tx's validity slots into POSIX time (context.MAINNET/PREPROD/...).
- one ScriptResult per redeemer, in ledger order, named like Blockfrost/Ogmios/pycardano
  ("spend:0", "mint:1"). A script that fails gives `error` (and its trace `logs`); it does
  not raise. A tx that cannot be evaluated at all (missing UTxO, missing script, a Plutus V1/
  V2 script, certificates...) raises ContextError.

Then:
    execution_units(results) -> {"spend:0": ExecutionUnits}   what ChainContext.evaluate_tx
                                                               returns; raises ScriptFailure
    require_success(results, max_tx=...)                       the ledger's acceptance check:
                                                               every script passed, within its
                                                               declared units and the tx limit
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from pycardano import ExecutionUnits, PlutusV3Script, RedeemerTag, Transaction, UTxO
from uplc.ast import BuiltinUnit, Program
from uplc.cost_model import (
    Budget,
    default_builtin_cost_model_plutus_v3,
    default_cek_machine_cost_model_plutus_v3,
)
from uplc.machine import Machine
from uplc.tools import apply, unflatten

from oracle_client.cardano.plutus.context import (
    ContextError,
    SlotConfig,
    TxContext,
    redeemer_name,
)

# uplc logs every failing builtin with a traceback at ERROR; a failing script is a normal,
# reported outcome here.
logging.getLogger("uplc").setLevel(logging.CRITICAL)

# Conway protocol parameters (mainnet and preprod alike, 2024-2025): maxTxExecutionUnits and
# the prices of one memory unit and one CPU step in lovelace.
MAX_TX_EX_UNITS = ExecutionUnits(mem=14_000_000, steps=10_000_000_000)


@dataclass(frozen=True)
class ExPrices:
    mem: Fraction
    steps: Fraction


DEFAULT_PRICES = ExPrices(mem=Fraction(577, 10_000), steps=Fraction(721, 10_000_000))


@dataclass(frozen=True)
class ScriptResult:
    """What one redeemer's script did."""

    redeemer: str  # "spend:0"
    tag: RedeemerTag
    index: int
    script_hash: str  # hex
    ex_units: ExecutionUnits  # consumed (on failure: consumed until it failed)
    fee_lovelace: int  # what ex_units cost at the given prices, rounded up
    logs: tuple[str, ...]
    error: str | None
    declared: ExecutionUnits | None  # what the tx's redeemer declares

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def cpu(self) -> int:
        return int(self.ex_units.steps)

    @property
    def mem(self) -> int:
        return int(self.ex_units.mem)

    @property
    def within_declared(self) -> bool:
        declared = self.declared
        return (
            declared is not None
            and self.ex_units.mem <= declared.mem
            and self.ex_units.steps <= declared.steps
        )

    def describe(self) -> str:
        head = f"{self.redeemer} (script {self.script_hash[:16]}…)"
        if self.ok:
            return f"{head}: ok, cpu {self.cpu:,} mem {self.mem:,}"
        trace = "; ".join(self.logs) if self.logs else "no trace"
        return f"{head}: FAILED: {self.error} [trace: {trace}]"


class ScriptFailure(Exception):
    """A script of the tx failed or overran its budget; `results` says which and why."""

    def __init__(self, message: str, results: list[ScriptResult]):
        super().__init__(message)
        self.results = results


def script_fee(units: ExecutionUnits, prices: ExPrices = DEFAULT_PRICES) -> int:
    """Lovelace the ledger charges for `units` (rounded up, as the fee formula does)."""
    fee = prices.mem * units.mem + prices.steps * units.steps
    return -(-fee.numerator // fee.denominator)


def evaluate_tx(
    tx: Transaction,
    resolved_utxos: Iterable[UTxO],
    slot_config: SlotConfig,
    *,
    budget: ExecutionUnits = MAX_TX_EX_UNITS,
    prices: ExPrices = DEFAULT_PRICES,
) -> list[ScriptResult]:
    """Run every redeemer's script of `tx` (see the module docstring)."""
    ctx = TxContext(tx, resolved_utxos, slot_config)
    if not ctx.redeemers:
        return []  # nothing to run: certificates or unresolved inputs are the ledger's business
    scripts = ctx.scripts()
    results = []
    for redeemer in ctx.redeemers:
        name = redeemer_name(redeemer.tag, redeemer.index)
        wanted = ctx.script_hash(redeemer).payload
        script = scripts.get(wanted)
        if script is None:
            raise ContextError(f"{name}: script {wanted.hex()} is neither witnessed nor referenced")
        if not isinstance(script, PlutusV3Script):
            raise ContextError(
                f"{name}: only Plutus V3 scripts are evaluated, got {type(script).__name__}"
            )
        units, logs, error = run_script(bytes(script), ctx.script_context(redeemer), budget)
        declared = redeemer.ex_units
        results.append(
            ScriptResult(
                redeemer=name,
                tag=redeemer.tag,
                index=redeemer.index,
                script_hash=wanted.hex(),
                ex_units=units,
                fee_lovelace=script_fee(units, prices),
                logs=tuple(logs),
                error=error,
                declared=ExecutionUnits(declared.mem, declared.steps) if declared else None,
            )
        )
    return results


def run_script(
    script_cbor: bytes, context: object, budget: ExecutionUnits = MAX_TX_EX_UNITS
) -> tuple[ExecutionUnits, list[str], str | None]:
    """Apply a V3 script (CBOR-wrapped flat, as in a PlutusV3Script) to its ScriptContext
    (uplc data) and run it: (units used, trace logs, error or None)."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, _RECURSION_LIMIT))
    try:
        return _run_script(script_cbor, context, budget)
    finally:
        sys.setrecursionlimit(previous)


def _run_script(
    script_cbor: bytes, context: object, budget: ExecutionUnits
) -> tuple[ExecutionUnits, list[str], str | None]:
    program: Program = unflatten(script_cbor)
    machine = Machine(
        Budget(cpu=budget.steps, memory=budget.mem),
        default_cek_machine_cost_model_plutus_v3(),
        default_builtin_cost_model_plutus_v3(),
    )
    outcome = machine.eval(apply(program, context))
    units = ExecutionUnits(mem=outcome.cost.memory, steps=outcome.cost.cpu)
    error: str | None = None
    if isinstance(outcome.result, Exception):
        error = _explain(outcome.result)
    elif not isinstance(outcome.result, BuiltinUnit):
        # Plutus V3 accepts only a script that returns unit.
        error = f"script returned {outcome.result.dumps()[:80]}, not unit"
    return units, list(outcome.logs), error


# uplc's flat decoder and its term transformers recurse once per nested term; OpShin nests
# a script's definitions as lets, so the escrow's depth (~900 with the Distribute path) sits
# near Python's default limit of 1000, less the caller's own frames. Python 3.11 runs
# Python-to-Python calls without C recursion, so a higher limit while a script runs is safe.
_RECURSION_LIMIT = 20_000


def _explain(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if text == "Exhausted budget":
        return "exhausted its execution budget"
    if text == "Execution called Error":
        return "the script failed (error)"
    # A failing builtin's message carries all its arguments (whole messages, keys...).
    text = text if len(text) <= 240 else text[:240] + "…"
    return f"{type(exc).__name__}: {text}"


def execution_units(results: list[ScriptResult]) -> dict[str, ExecutionUnits]:
    """{"spend:0": ExecutionUnits} for a chain context's evaluate_tx; fresh objects every
    call, since pycardano's builder scales them in place. Raises ScriptFailure if any failed."""
    failed = [r for r in results if not r.ok]
    if failed:
        raise ScriptFailure("; ".join(r.describe() for r in failed), results)
    return {r.redeemer: ExecutionUnits(mem=r.mem, steps=r.cpu) for r in results}


def require_success(results: list[ScriptResult], max_tx: ExecutionUnits = MAX_TX_EX_UNITS) -> None:
    """What a ledger checks before accepting a tx: every script passed within the units its
    redeemer declares, and all together within the per-tx limit. Raises ScriptFailure."""
    problems = [r.describe() for r in results if not r.ok]
    for r in results:
        if r.ok and not r.within_declared:
            problems.append(
                f"{r.redeemer}: used cpu {r.cpu:,} mem {r.mem:,}, declared {r.declared}"
            )
    total_mem = sum(r.mem for r in results)
    total_cpu = sum(r.cpu for r in results)
    if total_mem > max_tx.mem or total_cpu > max_tx.steps:
        problems.append(f"tx uses cpu {total_cpu:,} mem {total_mem:,}, over the limit {max_tx}")
    if problems:
        raise ScriptFailure("; ".join(problems), results)
