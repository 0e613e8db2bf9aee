"""What the NTX escrow costs on-chain: script size, and execution units and fee of each path.

Runs the committed compiled script (oracle_client/escrow/contract/build/escrow.json) with uplc on
signed transactions, as tests/unit/test_escrow_contract.py does, and prints the figures against
the per-tx limits. Usage: python bench/escrow_costs.py [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pycardano import TransactionId, TransactionInput, TransactionOutput, UTxO

from oracle_client.cardano.plutus import MAX_TX_EX_UNITS, ScriptResult, evaluate_tx
from oracle_client.escrow.contract.artifact import load_artifact
from oracle_client.escrow.contract.datum import Claim, Distribute, Refund
from tests.escrow_world import (
    AMOUNT,
    CONSUMER,
    DEADLINE_SLOT,
    PROVIDER,
    SLOTS,
    distribute_sign,
    escrow_utxo,
    ntx,
    oracle_sign,
    run_spend,
    spend_tx,
)

# The goal for the settle redeemer: under this share of the per-tx limits.
GOAL_SHARE = 0.02


def run_split(provider_amount: int, *, payer: Any = PROVIDER) -> ScriptResult:
    """A Distribute spend whose outputs pay each party its share (as transactions.distribute
    builds it: the consumer's output first, the provider's when it gets something)."""
    outputs = [TransactionOutput(CONSUMER.address, ntx(AMOUNT - provider_amount))]
    if provider_amount:
        outputs.append(TransactionOutput(PROVIDER.address, ntx(provider_amount)))
    tx, utxos = spend_tx(
        Distribute(distribute_sign(provider_amount), provider_amount),
        payer=payer,
        signers=[payer],
        escrow=escrow_utxo(),
        outputs=outputs,
    )
    (result,) = evaluate_tx(tx, utxos, SLOTS)
    return result


SPLITS: dict[str, tuple[int, Any]] = {
    "distribute 0 % (consumer submits: all back)": (0, CONSUMER),
    "distribute 47 % (provider submits: metered + the rest back)": (AMOUNT * 47 // 100, PROVIDER),
    "distribute 100 % (provider submits)": (AMOUNT, PROVIDER),
}

CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "claim (provider + oracle withdraw signature)": (
        Claim(oracle_sign("withdraw", PROVIDER)),
        {"payer": PROVIDER},
    ),
    "refund after the deadline (consumer)": (
        Refund(b""),
        {"payer": CONSUMER, "validity_start": DEADLINE_SLOT + 1, "ttl": None},
    ),
    "refund before the deadline (consumer + oracle refund signature)": (
        Refund(oracle_sign("refund", CONSUMER)),
        {"payer": CONSUMER},
    ),
}


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    artifact = load_artifact()
    print(f"escrow script: {artifact.size_bytes} bytes, hash {artifact.script_hash}")
    print(f"limits per tx: cpu {MAX_TX_EX_UNITS.steps:,} mem {MAX_TX_EX_UNITS.mem:,}")
    for label, (redeemer, kwargs) in CASES.items():
        timings = []
        result: ScriptResult | None = None
        for _ in range(rounds):
            start = time.perf_counter()
            result = run_spend(redeemer, **kwargs)
            timings.append(time.perf_counter() - start)
        assert result is not None and result.ok, result and result.describe()
        cpu_share = 100 * result.cpu / MAX_TX_EX_UNITS.steps
        mem_share = 100 * result.mem / MAX_TX_EX_UNITS.mem
        print(f"{label}")
        print(
            f"  cpu {result.cpu:>12,} ({cpu_share:.2f}%)  mem {result.mem:>9,} ({mem_share:.2f}%)"
            f"  script fee {result.fee_lovelace / 1e6:.6f} ADA"
            f"  built+evaluated in {1000 * statistics.median(timings):.0f} ms (median of {rounds})"
        )
    for label, (share, payer) in SPLITS.items():
        timings = []
        result = None
        for _ in range(rounds):
            start = time.perf_counter()
            result = run_split(share, payer=payer)
            timings.append(time.perf_counter() - start)
        assert result is not None and result.ok, result and result.describe()
        cpu_share = result.cpu / MAX_TX_EX_UNITS.steps
        mem_share = result.mem / MAX_TX_EX_UNITS.mem
        verdict = "within" if max(cpu_share, mem_share) < GOAL_SHARE else "ABOVE"
        print(f"{label}")
        print(
            f"  cpu {result.cpu:>12,} ({100 * cpu_share:.2f}%)  mem {result.mem:>9,}"
            f" ({100 * mem_share:.2f}%)  script fee {result.fee_lovelace / 1e6:.6f} ADA"
            f"  {verdict} the {100 * GOAL_SHARE:g} % goal"
            f"  built+evaluated in {1000 * statistics.median(timings):.0f} ms (median of {rounds})"
        )
    # The signature names its escrow output: the first lock's does not release a second one
    # that carries the very same datum.
    second = UTxO(TransactionInput(TransactionId(bytes([0xE6]) * 32), 1), escrow_utxo().output)
    tx, utxos = spend_tx(
        Claim(oracle_sign("withdraw", PROVIDER)), payer=PROVIDER, signers=[PROVIDER], escrow=second
    )
    (replay,) = evaluate_tx(tx, utxos, SLOTS)
    assert not replay.ok, replay.describe()
    trace = replay.logs[-1] if replay.logs else replay.error
    print(f"a second lock (same datum), claimed with the first's signature: refused ({trace})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
