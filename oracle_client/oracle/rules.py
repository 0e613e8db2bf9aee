"""Which outcome pays whom: the only place the oracle turns a receipt into money.

Both peers signed the receipt, so its outcome and fault are what they agree on; the rules only
map that agreement to one of the two messages the escrow accepts:

| outcome                   | started | fault    | decision                             |
|---------------------------|---------|----------|--------------------------------------|
| completed                 | yes     | none     | withdraw (the provider did the work) |
| anything else             | no      | any      | refund (nothing ran)                 |
| failed/oom/timeout/...    | yes     | provider | refund                               |
| failed/oom/timeout/...    | yes     | consumer | withdraw (the provider's machine was |
|                           |         |          | used; the job's own code or limits   |
|                           |         |          | ended it, or the consumer cancelled) |
| failed/oom/timeout/...    | yes     | none     | undecidable: no signature; the       |
|                           |         |          | consumer takes it back after the     |
|                           |         |          | deadline                             |

A receipt the consumer signed alone says one thing only: the provider vanished mid-job
(``interrupted``, the provider's fault, started or not). It decides ``refund`` while the
provider never reported the job (a provider that is still there sends its own signed receipt
as soon as the job ends, and then only a receipt both signed decides). It gives a consumer
nothing it could not have without the oracle: a consumer that never countersigns takes its
lock back after the deadline anyway; it only spares an honest one the wait.
"""

from __future__ import annotations

from oracle_client.fields import RewardType
from oracle_client.receipt import Receipt


class UndecidableReceipt(ValueError):
    pass


def decide(receipt: Receipt) -> RewardType:
    if receipt.outcome == "completed":
        # Receipt.__post_init__ already refuses a completed job with a fault or never started.
        return "withdraw"
    if not receipt.started:
        return "refund"
    if receipt.fault == "provider":
        return "refund"
    if receipt.fault == "consumer":
        return "withdraw"
    raise UndecidableReceipt(
        f"the receipt says the job ended {receipt.outcome!r} after it started but blames "
        "neither peer: no rule pays either side; the consumer can take the lock back after "
        "its deadline"
    )


def decide_vanished(receipt: Receipt, provider_reported: Receipt | None) -> RewardType:
    """The decision on a receipt signed by the consumer alone (its signature already checked)."""
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
    return "refund"


class UnsignedByProvider(ValueError):
    pass
