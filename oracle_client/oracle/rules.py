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
