"""The provider's quotes: an offer judged by the shared admission rules on its own offer
view and quoted (its script fetched first, under the fetch policy), the Confirm that makes
the job once its escrow lock is seen (idempotent; a refusal is final), a Release, and the
countersigned receipt of a paid job."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time

import msgspec
import trio

from engine import api
from engine.domain.admission import Needs, Verdict, judge
from engine.domain.fetch_policy import FetchPolicy
from engine.domain.spec import JobSpec, validate_spec
from engine.errors import EngineError
from engine.jobs import protocol as p
from engine.jobs.provider_base import OFFERS_PER_S, REFUSALS_KEPT
from engine.jobs.provider_gang import ProviderGang
from engine.jobs.quote_book import ConfirmInFlight, HeldQuote
from engine.jobs.script_fetch import fetch_script
from oracle_client.ntx import ntx_of, units_of

log = logging.getLogger("nunet.jobs.provider")

# Fetching the script before quoting: well inside the consumer's wait for the answer (10 s).
OFFER_FETCH_S = 6.0


class ProviderQuotes(ProviderGang):
    """Offers, quotes and their Confirms (a Confirm starts the job: provider_runs.py)."""

    def _offer_gate(self, job_id: str, named: str, consumer: str) -> p.Refusal | None:
        """The checks every offer passes before its spec is looked at (a bad one's too)."""
        if not self._offers.allow(consumer):
            return p.refusal(job_id, f"too many offers from you: at most {OFFERS_PER_S:g} a second")
        if named != consumer:
            return p.refusal(job_id, "offer names another consumer")
        if self.ctx.store.get_job(job_id) is not None:
            return p.refusal(job_id, "job id already in use")
        return None

    def _offer(self, offer: p.Offer, consumer: str, raw: bytes) -> p.Quote | p.Refusal:
        job_id, spec = offer.job_id, offer.spec
        if refused := self._offer_gate(job_id, offer.consumer, consumer):
            return refused
        # Judged for the peer that signed the offer: a pool's specs are for its members, by
        # this provider's own pools (never what the consumer says of itself).
        verdict = self._admission(spec, consumer)
        if not verdict.ok:
            return p.refusal(job_id, verdict.reason)
        assert verdict.resource is not None
        now = time.time()
        if why := self._quotes.no_room(consumer, now):
            return p.refusal(job_id, why)
        payment_address = ""
        if self._escrows is not None:
            try:
                payment_address = self._escrows().payment_address()
            except EngineError:
                return p.refusal(job_id, "this provider has no wallet to be paid into yet")
        resource = verdict.resource
        quote = p.Quote(
            job_id=job_id,
            provider=self.ctx.identity.peer_id,
            # Older consumers' decimals (protocol.py ``Quote``): the price and the lock.
            price_ntx_hour=ntx_of(verdict.resource.price_units_hour),
            total_ntx=ntx_of(verdict.lock_units),
            expires_at=now + self._quote_ttl(),
            executor=self._executor_for(spec) or "",
            payment_address=payment_address,
            spec_name=resource.name,
            price_units_hour=resource.price_units_hour,
            min_charge_units=resource.min_charge_units,
            estimate_units=verdict.estimate_units,
            lock_units=verdict.lock_units,
        )
        quote_raw = p.encode(self.ctx.identity, quote)
        self._quotes.add(HeldQuote(quote, spec, consumer, raw, quote_raw))
        return quote

    async def _fetch_before_quoting(self, quote: p.Quote) -> p.Quote | p.Refusal:
        """Fetch the job's script now, under the fetch policy: a script that cannot be had is
        a refusal before the consumer locks any NTX, not a paid job that fails at start."""
        held = self._quotes.get(quote.job_id)
        if held is None or held.spec.script_url is None:
            return quote
        policy = FetchPolicy.from_settings(self.ctx.settings.jobs.fetch_allow_networks)
        try:
            script = await trio.to_thread.run_sync(
                functools.partial(
                    fetch_script,
                    held.spec.script_url,
                    policy=policy,
                    timeout=OFFER_FETCH_S,
                    total_s=OFFER_FETCH_S,
                )
            )
        except EngineError as exc:
            self._quotes.pop(quote.job_id)
            return p.refusal(quote.job_id, f"cannot fetch the job's script: {exc.message}")
        # The quote's life starts once it can be had: a slow fetch must not hand the
        # consumer a quote that is already (nearly) stale.
        fresh = msgspec.structs.replace(quote, expires_at=time.time() + self._quote_ttl())
        raw = p.encode(self.ctx.identity, fresh)
        self._quotes.add(dataclasses.replace(held, quote=fresh, quote_raw=raw, script=script))
        return fresh

    def _refusal_reason(self, spec: JobSpec, consumer: str | None = None) -> str:
        return self._admission(spec, consumer).reason

    def _admission(self, spec: JobSpec, consumer: str | None = None) -> Verdict:
        """The verdict on ``spec`` here: the shared rules (admission.judge) on this provider's
        own figures, after what only the provider knows (onboarded, the spec's validity)."""
        onboarding = self.ctx.store.get_onboarding()
        if onboarding is None or onboarding.state != "active":
            return _refused("not accepting jobs (not onboarded or paused)")
        report = validate_spec(spec)
        if not report.ok:
            return _refused(*(problem.message for problem in report.problems))
        try:
            self._machine.resource_book()
        except EngineError as exc:
            log.error("refusing offers: %s", exc.message)
            return _refused("this provider's resource specs do not read (its operator fixes them)")
        verdict = judge(
            Needs.of(spec),
            self.offer().resources,
            takes_payments=self._escrows is not None,
            consumer=consumer,
        )
        if verdict.ok and (why := self._gang_refusal(spec)):
            return _refused(why)
        if verdict.ok and spec.device == "gpu":
            try:
                self._gpus_for(spec)
            except EngineError as exc:
                return _refused(exc.message)
        return verdict

    async def _confirm(
        self, confirm: p.Confirm, consumer: str, raw: bytes
    ) -> tuple[p.Accepted | p.Refusal, bool]:
        """The answer, and whether this Confirm made the job (then it and its offer and
        quote are stored). Every answer is final: a refusal spends the quote, so a repeat of
        the Confirm is refused too and never accepted later (the consumer has moved on)."""
        job_id = confirm.job_id
        flight = self._confirming.get(job_id)
        if flight is not None:
            if flight.consumer != consumer:
                return p.refusal(job_id, "job id already in use"), False
            # A repeat while the first is checking the lock: its answer, once it is known
            # (the first is bounded by CONFIRM_CHECK_S; the consumer waits longer).
            await flight.done.wait()
            if flight.answer is not None:
                return flight.answer, False
        if (refused := self._refused.get(job_id)) is not None and refused[0] == consumer:
            return refused[1], False
        held = self._quotes.get(job_id)
        flight = ConfirmInFlight(consumer)
        self._confirming[job_id] = flight
        try:
            answer, created = await self._confirmed(confirm, consumer, held, flight)
            flight.answer = answer
        finally:
            del self._confirming[job_id]
            flight.done.set()
        if held is not None and held.consumer == consumer:
            self._quotes.pop(job_id)  # accepted or refused: the quote is spent either way
        if isinstance(answer, p.Refusal):
            self._remember_refusal(job_id, consumer, answer)
        if created:
            assert held is not None
            self._record(job_id, consumer, "in", "offer", held.offer_raw)
            self._record(job_id, consumer, "out", "quote", held.quote_raw)
            self._record(job_id, consumer, "in", p.kind(confirm), raw)
        return answer, created

    def _gang_refusal(self, spec: JobSpec) -> str:
        """Why this provider cannot take ``spec``'s distributed step, or ""."""
        if not any(step.distributed for step in spec.subtasks):
            return ""
        if spec.gang is None:
            return (
                "a distributed step runs as a gang, one slot a provider: `job submit` places "
                "it (each slot's offer names its rank)"
            )
        if self._executor_for(spec) != "docker":
            return "a gang's replica needs a container (its own network): this provider runs none"
        return ""

    def _remember_refusal(self, job_id: str, consumer: str, refusal: p.Refusal) -> None:
        self._refused[job_id] = (consumer, refusal)
        while len(self._refused) > REFUSALS_KEPT:
            self._refused.popitem(last=False)

    def _released(self, release: p.Release, consumer: str) -> p.Accepted | p.Refusal:
        """The consumer stopped waiting for its Confirm: the job's one outcome, made final."""
        job_id = release.job_id
        job = self.ctx.store.get_job(job_id)
        if job is not None and job.role == "provider":
            if job.consumer != consumer:
                return p.refusal(job_id, "no such job of yours")
            # Accepted before the release came: it runs (Cancel ends it, billed as usual).
            return p.Accepted(job_id=job_id)
        flight = self._confirming.get(job_id)
        if flight is not None and flight.consumer == consumer:
            flight.released = True  # its lock check ends in a refusal
        held = self._quotes.get(job_id)
        if held is not None and held.consumer == consumer:
            self._quotes.pop(job_id)
        refusal = p.refusal(job_id, "released by its consumer: this provider will not run it")
        if held is not None or flight is not None:
            self._remember_refusal(job_id, consumer, refusal)
        return refusal

    async def _confirmed(
        self,
        confirm: p.Confirm,
        consumer: str,
        held: HeldQuote | None,
        flight: ConfirmInFlight,
    ) -> tuple[p.Accepted | p.Refusal, bool]:
        """The answer, and True when this call made the job."""
        existing = self.ctx.store.get_job(confirm.job_id)
        if existing is not None:
            if existing.consumer != consumer:
                return p.refusal(confirm.job_id, "job id already in use"), False
            return p.Accepted(job_id=confirm.job_id), False  # a repeat: never run twice
        if held is None:
            return (
                p.refusal(
                    confirm.job_id,
                    "no quote for this job here (it expired, or this provider restarted): "
                    "ask again",
                ),
                False,
            )
        quote, spec = held.quote, held.spec
        if held.consumer != consumer:
            return p.refusal(confirm.job_id, "quote was made for another consumer"), False
        if time.time() > quote.expires_at:
            return p.refusal(confirm.job_id, "quote expired (ask again)"), False
        if units_of(confirm.total_ntx) != quote.lock_units:
            return p.refusal(confirm.job_id, "confirmed amount differs from quote"), False
        if self._escrows is not None and quote.lock_units > 0:
            paid = confirm.escrow_tx or self.ctx.settings.payments.require_payment
            reason = ""
            if paid:
                with trio.move_on_after(p.CONFIRM_CHECK_S) as checking:
                    reason = await self._escrows().verify_lock(
                        confirm.job_id,
                        consumer,
                        quote.lock_units,
                        confirm.escrow_terms,
                        confirm.escrow_tx,
                    )
                if checking.cancelled_caught:
                    reason = f"the lock was not seen on the chain within {p.CONFIRM_CHECK_S:g} s"
            if reason:
                return p.refusal(confirm.job_id, reason), False
        if flight.released:  # checked with no await before the job is made: never both
            return p.refusal(
                confirm.job_id, "released by its consumer while its lock was checked"
            ), False
        if self.running_jobs() >= self.ctx.settings.jobs.slots:
            return p.refusal(confirm.job_id, "busy: another consumer was first"), False
        now = time.time()
        job = api.JobInfo(
            job_id=confirm.job_id,
            role="provider",
            state="accepted",
            provider=self.ctx.identity.peer_id,
            consumer=consumer,
            spec=spec,
            resource_spec=quote.spec_name,
            price_units_hour=quote.price_units_hour,
            min_charge_units=quote.min_charge_units,
            estimate_units=quote.estimate_units,
            lock_units=quote.lock_units,
            executor=quote.executor,
            created_at=now,
        )
        self._save(job)
        assert self._nursery is not None
        if spec.gang is not None:  # a gang's slot: held until its consumer starts the gang
            self._nursery.start_soon(self._hold_for_gang, job, held.script)
        else:
            self._nursery.start_soon(self._run, job, None, held.script)
        return p.Accepted(job_id=confirm.job_id), True

    def _countersigned(
        self, message: p.Countersign, consumer: str
    ) -> p.Accepted | p.Countersigned | p.Refusal:
        if self._escrows is None:
            return p.Refusal(job_id=message.job_id, reason="this provider takes no payments")
        escrows = self._escrows()
        reason = escrows.accept_countersigned(message.job_id, consumer, message.receipt)
        if reason:
            return p.refusal(message.job_id, reason)  # clipped to the schema's bound
        agreed = escrows.kept_receipt(message.job_id) or message.receipt
        job = self.ctx.store.get_job(message.job_id)
        if job is not None and job.receipt != agreed:
            self._save(msgspec.structs.replace(job, receipt=agreed))
        if agreed != message.receipt:  # the consumer's offer, now signed by us too
            return p.Countersigned(job_id=message.job_id, receipt=agreed)
        return p.Accepted(job_id=message.job_id)


def _refused(*reasons: str) -> Verdict:
    return Verdict(tuple(reasons))
