"""A paid job's money, on both sides: lock, check, receipt, claim, refund.

The steps, and where the job protocol calls them:

- consumer, between the provider's quote and the confirm: the oracle registers the terms
  (``request-service``) and signs them; the consumer locks the amount at the escrow script
  with an inline datum naming both parties, the oracle's key, the job and a deadline, and sends
  the signed terms and the lock's tx id in ``Confirm``;
- provider, on ``Confirm``: it checks the oracle's signature on the terms, that the oracle is
  the one it trusts and that the chain holds exactly that lock, before it runs anything;
- provider, while the job runs: a signed "still running" report to the oracle at the start
  and every ``[payments] liveness_interval_s`` (``report_liveness``): the oracle's own
  evidence that the provider did not vanish, so it never takes the consumer's word alone;
- provider, when the job ends: a receipt of the outcome and the metering, signed with its peer
  key, travels in the last ``Update``; the consumer checks it against what it saw, countersigns
  it and sends it back (``Countersign``);
- then whoever the oracle's rules pay asks it for the release signature and spends the lock:
  the provider claims, the consumer takes a refund. Without a decision (oracle down, a peer
  that never countersigns) the consumer can take the lock back after the deadline;
- consumer, when its provider vanished mid-job (silent past the grace, jobs/consumer.py): its
  own receipt says "interrupted, the provider's fault" and asks the oracle for the refund at
  once, which the oracle grants only once the provider's liveness reports stopped (past the
  oracle's grace) or never came, and never after the provider reported the job's end.

Every step is written to the store before it is acted on. A claim or refund transaction is
kept (CBOR) before it is submitted, so after a restart the same transaction is sent again or
found spent, and one that can never land is replaced by a fresh one from the same decision
(settle.py): a claim is never lost and never made twice.

In layers, each a module: escrow_book.py (the records and the oracle), escrow_lock.py (locking and
checking a lock), escrow_receipts.py (receipts and lone refunds) and this one (liveness reports
and the settle loop).
"""

from __future__ import annotations

import logging
import time
from functools import partial

import msgspec
import trio

from engine import api
from engine.errors import EngineError
from engine.payments.escrow_book import (
    _oracle_call,
)
from engine.payments.escrow_receipts import EscrowReceipts
from engine.payments.records import EscrowRecord

log = logging.getLogger("nunet.payments.escrow")

SETTLE_SOON_S = 2.0  # ... or this often while a consumer waits to see the provider's claim
SETTLE_BACKOFF_S = 1.0  # a failing escrow is tried again after 1, 2, 4 ... s
SETTLE_BACKOFF_MAX_S = 30.0
DECIDABLE_SLACK_S = 0.5  # after the time the oracle named: its clock and ours differ a little


class Escrows(EscrowReceipts):
    """The escrow of every paid job on this node, both roles (module docstring)."""

    async def report_liveness(self, job_id: str) -> None:
        """Provider: tell the oracle every interval that we are running this paid job, until
        cancelled (the run ended). A failure is logged and tried again next interval: never
        raised, so it can never end the run."""
        from oracle_client.models import sign_liveness

        try:
            record = self.get(job_id)
        except Exception:  # a store that cannot be read: the run goes on, without reports
            log.exception("job %s: no liveness reports (its escrow cannot be read)", job_id)
            return
        if not self.enabled or record is None or record.info.role != "provider":
            return
        interval = self.ctx.settings.payments.liveness_interval_s
        failures = 0
        while True:
            try:
                report = sign_liveness(
                    job_id,
                    self.ctx.identity.peer_id,
                    int(time.time() * 1000),
                    bytes(self.ctx.identity.signing_key),
                )
                async with self.oracle() as oracle:
                    await _oracle_call(partial(oracle.report_liveness, report))
                failures = 0
            except Exception as exc:
                failures += 1
                text = exc.message if isinstance(exc, EngineError) else str(exc)
                if failures == 1 or failures % 20 == 0:  # not a line every interval for hours
                    log.warning("job %s: liveness to the oracle failed: %s", job_id, text)
            await trio.sleep(interval)

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Settle what is open: after a restart, after the oracle came back, at the deadline.

        Each escrow that fails (the chain or the oracle unreachable, a tx refused, anything
        else) is retried on its own exponential backoff; no failure leaves this loop, so none
        can cancel the node's other services."""
        task_status.started()
        failures: dict[str, tuple[int, float]] = {}  # job id -> (failures in a row, retry at)
        # Open escrows are retried this often (the oracle down, a tx refused, a deadline on
        # the chain's clock); a receipt or a command wakes the loop sooner.
        every = self.ctx.settings.payments.settle_interval_s
        while True:
            soon = False
            now = trio.current_time()
            due = now + every
            # "undecided" too: a consumer's lock the oracle would not release comes back
            # after its deadline without anyone asking.
            for raw in self.ctx.store.list_escrows((*api.ESCROW_OPEN_STATES, "undecided")):
                record = msgspec.json.decode(raw, type=EscrowRecord)
                job_id = record.info.job_id
                count, retry_at = failures.get(job_id, (0, 0.0))
                if retry_at > now:
                    due = min(due, retry_at)
                    continue
                try:
                    info = await self.settle(job_id, automatic=True)
                except Exception as exc:
                    delay = min(SETTLE_BACKOFF_MAX_S, SETTLE_BACKOFF_S * 2**count)
                    failures[job_id] = (count + 1, trio.current_time() + delay)
                    due = min(due, trio.current_time() + delay)
                    if isinstance(exc, EngineError):
                        log.info("escrow of job %s: %s (again in %g s)", job_id, exc.message, delay)
                    elif count == 0:  # a bug, not the weather: its traceback once
                        log.exception("escrow of job %s: settling failed", job_id)
                    continue
                failures.pop(job_id, None)
                if info.state == "receipt" and info.decidable_at:
                    # The oracle said when it can decide (a vanished provider's grace): ask
                    # then, not a settle interval later.
                    left = info.decidable_at - time.time()
                    due = min(due, trio.current_time() + max(0.0, left) + DECIDABLE_SLACK_S)
                # The provider claims within seconds of the decision, and a submitted tx lands
                # within a block or two: look again soon.
                soon = soon or (
                    (info.state == "receipt" and info.reward_type == "withdraw")
                    or info.state in ("claiming", "refunding")
                )
            wait = SETTLE_SOON_S if soon else due - trio.current_time()
            with trio.move_on_after(max(0.0, min(wait, every))):
                await self._wake.wait()
            self._wake = trio.Event()

    async def settle(self, job_id: str, *, automatic: bool = False) -> api.EscrowInfo:
        """Move one escrow as far as it can go now; the reward commands and the loop call it."""
        from engine.payments import settle

        async with self._lock_for(job_id):
            record = self.get(job_id)
            if record is None:
                raise EngineError("not_found", f"no escrow for job {job_id}; `reward list`")
            record = await settle.advance(self, record, automatic=automatic)
            return record.info
