"""Which outcome pays whom: the only place the oracle turns a receipt into money.

Both peers signed the receipt, so its outcome and fault are what they agree on; the rules only
map that agreement to a split of the lock (issue 12): the provider's share and the consumer's.

| outcome                   | started | fault    | decision: provider / consumer        |
|---------------------------|---------|----------|--------------------------------------|
| completed                 | yes     | none     | distribute: charge / lock - charge   |
| anything else             | no      | any      | refund: 0 / lock (nothing ran)       |
| failed/oom/timeout/...    | yes     | provider | refund: 0 / lock                     |
| failed/oom/timeout/...    | yes     | consumer | distribute: charge / lock - charge   |
|                           |         |          | (the machine time was used; the job's|
|                           |         |          | own code or limits ended it, or the  |
|                           |         |          | consumer cancelled: metered up to it)|
| failed/oom/timeout/...    | yes     | none     | undecidable: no signature; the       |
|                           |         |          | consumer takes it back after the     |
|                           |         |          | deadline                             |

A receipt the consumer signed alone says one thing only: the provider vanished mid-job
(``interrupted``, the provider's fault, started or not). The consumer's word is not taken for
it: the oracle has its own evidence. A provider running a paid job sends a signed liveness
report at the start and every ``LIVENESS_INTERVAL_S``; the lone receipt decides ``refund`` only
while the provider never reported at all, or its last liveness report is older than
``LIVENESS_GRACE_S``; while it is fresher the answer is "pending" (the consumer asks again),
so a consumer that lies while the job runs gains nothing, and a provider that really vanished
is found out within the grace. A provider that sent its own signed receipt (the job ended)
was there: then only a receipt both signed decides. None of it gives a consumer anything it
could not have without the oracle: a consumer that never countersigns takes its lock back
after the deadline anyway; it only spares an honest one the wait.
"""

from __future__ import annotations

from oracle_client.escrow.receipt import Receipt
from oracle_client.fields import RewardType

# The provider's default period between liveness reports ([payments] liveness_interval_s).
LIVENESS_INTERVAL_S = 30.0
# Silence past three missed reports and a margin for a slow oracle or network: vanished.
LIVENESS_GRACE_S = 3 * LIVENESS_INTERVAL_S + 10.0
# How far a liveness report's own time may be ahead of the oracle's clock.
LIVENESS_SKEW_S = 30.0


class UndecidableReceipt(ValueError):
    pass


def decide(receipt: Receipt) -> RewardType:
    if receipt.outcome == "completed":
        # Receipt.__post_init__ already refuses a completed job with a fault or never started.
        return "distribute"
    if not receipt.started:
        return "refund"
    if receipt.fault == "provider":
        return "refund"
    if receipt.fault == "consumer":
        return "distribute"
    raise UndecidableReceipt(
        f"the receipt says the job ended {receipt.outcome!r} after it started but blames "
        "neither peer: no rule pays either side; the consumer can take the lock back after "
        "its deadline"
    )


def split(receipt: Receipt, kind: RewardType) -> tuple[int, int]:
    """(provider's, consumer's) base units of the lock for the decision ``kind``: the
    receipt's charge (Receipt.__post_init__ holds it to billing.charge of its own price,
    minimum charge and machine time, capped at the lock) and the rest; a refund is all back."""
    if kind == "refund":
        return 0, receipt.amount
    if kind == "withdraw":
        return receipt.amount, 0
    return receipt.charge, receipt.amount - receipt.charge


def decide_vanished(
    receipt: Receipt,
    provider_reported: Receipt | None,
    last_alive_ms: int | None = None,
    now_ms: int = 0,
    grace_s: float = LIVENESS_GRACE_S,
) -> RewardType | None:
    """The decision on a receipt signed by the consumer alone (its signature already checked);
    None: not yet, the provider's last liveness report (at ``last_alive_ms``) is too fresh."""
    if receipt.outcome != "interrupted" or receipt.fault != "provider":
        raise UnsignedByProvider(
            "the receipt is not signed by the provider: the consumer's signature alone only "
            "says the provider vanished (outcome 'interrupted', fault 'provider')"
        )
    if provider_reported is not None:
        raise UnsignedByProvider(
            f"the provider reported this job (it says it ended {provider_reported.outcome!r}): "
            "only a receipt both peers signed decides it now; countersign the provider's "
            "receipt, or take the lock back after its deadline"
        )
    if last_alive_ms is not None and now_ms - last_alive_ms <= grace_s * 1000:
        return None
    return "refund"


class UnsignedByProvider(ValueError):
    pass
