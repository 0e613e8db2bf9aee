"""Can a job's lock come back now? The one answer the job view and `reward refund` give.

A consumer's lock comes back before its deadline when this node asks the oracle on its own
word (engine/payments/escrow_receipts.py ``never_ran``, ``provider_vanished``): at once for a job
whose provider never ran it; for a vanished provider once the oracle's grace after the
provider's last "still running" report has passed (the oracle says how long: the escrow's
``decidable_at``). The engine asks by itself (at that time, and every settle interval);
"refund now" asks at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from engine.api import EscrowInfo
from engine.domain.safe_text import safe

WHY = {
    "never_ran": "its provider never ran it",
    "provider_vanished": "its provider vanished mid-job",
}


@dataclass(frozen=True)
class RefundNow:
    ready: bool  # the oracle can decide now: asking refunds the lock
    short: str  # one line: why the lock comes back, and when (or that it can now)
    oracle: str = ""  # the oracle's own words, where they say why not yet

    @property
    def text(self) -> str:
        """The line with the oracle's words (a view showing the escrow's error leaves them)."""
        return f"{self.short} ({self.oracle})" if self.oracle else self.short


def refund_now(escrow: EscrowInfo | None, now: float) -> RefundNow | None:
    """Where a consumer's refund asked on its own word stands (None: no such refund: an
    unpaid job, a provider's escrow, a receipt both signed, or one settled already)."""
    if escrow is None or escrow.role != "consumer" or not escrow.refund_alone:
        return None
    why = WHY[escrow.refund_alone]
    if escrow.state == "refunding":
        return RefundNow(False, f"{why}: its refund tx is on its way to the chain")
    if escrow.state == "undecided":
        deadline = time.strftime("%Y-%m-%d %H:%M", time.localtime(escrow.deadline_ms / 1000))
        return RefundNow(
            False,
            "the oracle would not refund it on this node's word: the lock comes back at its "
            f"deadline, {deadline}",
            safe(escrow.error),
        )
    if escrow.state != "receipt":
        return None
    left = escrow.decidable_at - now
    if left > 0:
        at = time.strftime("%H:%M:%S", time.localtime(escrow.decidable_at))
        return RefundNow(
            False,
            f"{why}; the oracle can decide in about {left:.0f} s (at {at}), and this node "
            "asks again then by itself",
            safe(escrow.error),
        )
    return RefundNow(True, f"{why}: its locked NTX can be refunded now")
