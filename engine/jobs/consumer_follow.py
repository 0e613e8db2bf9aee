"""The consumer's jobs, third layer: following each unfinished job (its log and state, from
the provider's signed updates), a silent provider ended "interrupted" after its grace, and the
receipt countersigned.
"""

from __future__ import annotations

import contextlib
import logging
import time

import msgspec
import trio

from engine import api
from engine.domain.charges import metered_units
from engine.domain.peer_info import MISSED_HEARTBEATS
from engine.errors import EngineError
from engine.jobs import protocol as p
from engine.jobs.consumer_base import (
    PROVIDER_UNREACHABLE,
    RETRY_S,
    UNDECIDED,
    _Heard,
    _why,
)
from engine.jobs.consumer_results import ConsumerResults
from engine.jobs.joblog import JobLog

log = logging.getLogger("nunet.jobs.consumer")


class ConsumerFollow(ConsumerResults):
    def _follow_soon(self, job_id: str) -> None:
        if job_id in self._following or self._nursery is None:
            return
        self._following.add(job_id)
        self._logs.use(job_id)
        self._nursery.start_soon(self._follow, job_id)

    async def _follow(self, job_id: str) -> None:
        attempt = 0
        heard = _Heard(time.time())  # a restart gives the provider the whole limit again
        try:
            while True:
                job = self.ctx.store.get_job(job_id)
                if job is None:
                    return
                try:
                    if job.state in UNDECIDED:
                        await self._settle_confirm(job)
                        attempt = 0
                        continue
                    if job.state in api.TERMINAL_STATES:
                        if self._receipt_missing(job):
                            # Ended while we were away: the last Update brings the receipt.
                            await self._follow_once(job)
                        if job.spec.gang is not None:  # a gang's slot: its end may end the gang
                            await self._slot_ended(job)
                        if self._results_missing(job):
                            await self._fetch_results_tried(job)
                        return
                    if await self._follow_watched(job, heard):
                        attempt = 0
                        continue
                except Exception as exc:  # the provider away, a bad stream: retry, never crash
                    log.info("following job %s: %s; retrying", job_id, _why(exc))
                # Redial on the retry schedule; look at the provider's silence more often.
                retry_at = trio.current_time() + RETRY_S[min(attempt, len(RETRY_S) - 1)]
                attempt += 1
                while (left := retry_at - trio.current_time()) > 0:
                    try:
                        if self._ended_by_silence(job_id, heard):
                            break
                    except Exception as exc:  # the store, the escrow: never the nursery's
                        log.warning("job %s: judging the provider's silence: %s", job_id, exc)
                    await trio.sleep(min(left, self._watch_poll_s()))
        finally:
            self._following.discard(job_id)
            self._logs.done(job_id)

    async def _slot_ended(self, job: api.JobInfo) -> None:
        """A gang's slot ended (consumer_gang.py)."""

    def _silence_limit_s(self) -> float:
        return MISSED_HEARTBEATS * self.ctx.settings.network.heartbeat_interval_s

    def _watch_poll_s(self) -> float:
        return max(0.1, min(self.ctx.settings.network.heartbeat_interval_s / 4, 5.0))

    def _silent_for(self, provider: str, heard: _Heard) -> float:
        """Seconds since the provider was last heard: a heartbeat or advert on the channel, or
        an Update of this job. Our own network down blames nobody: the count starts again."""
        now = time.time()
        try:
            info = self._service().peer(provider)
        except EngineError:
            heard.at = now
            return 0.0
        if info is not None:
            heard.at = max(heard.at, info.last_seen)
        return max(0.0, now - heard.at)

    async def _follow_watched(self, job: api.JobInfo, heard: _Heard) -> bool:
        """Follow once; False when the provider went silent, which ends a stream that a
        vanished machine would otherwise leave open forever."""
        done = trio.Event()
        with trio.CancelScope() as scope:
            if self._nursery is not None:
                self._nursery.start_soon(self._watch, job.provider, heard, scope, done)
            try:
                await self._follow_once(job, heard)
            finally:
                done.set()
        return not scope.cancelled_caught

    async def _watch(
        self, provider: str, heard: _Heard, scope: trio.CancelScope, done: trio.Event
    ) -> None:
        while not done.is_set():
            with trio.move_on_after(self._watch_poll_s()):
                await done.wait()
            try:
                silent = self._silent_for(provider, heard) >= self._silence_limit_s()
            except Exception as exc:  # never the nursery's problem
                log.info("watching provider %s: %s", provider, exc)
                return
            if silent and not done.is_set():
                scope.cancel()
                return

    def _ended_by_silence(self, job_id: str, heard: _Heard) -> bool:
        """While a follow is down: a provider silent for three heartbeats is shown as
        unreachable; past the grace the job ends interrupted (True) and its refund is asked."""
        job = self.ctx.store.get_job(job_id)
        if job is None or job.state in api.TERMINAL_STATES:
            return False
        silent = self._silent_for(job.provider, heard)
        limit = self._silence_limit_s()
        if silent < limit:
            return False
        grace = max(0.0, self.ctx.settings.jobs.provider_grace_s)
        if silent < limit + grace:
            if not job.reason.startswith(PROVIDER_UNREACHABLE):
                self._save(
                    msgspec.structs.replace(
                        job,
                        reason=f"{PROVIDER_UNREACHABLE}: no heartbeat for {silent:.0f} s; the "
                        f"job ends interrupted if it stays away {grace:g} s more",
                    )
                )
            return False
        asked = False
        if self._escrows is not None:
            try:  # the escrow first: a crash after it still finds the job to end again
                asked = self._escrows().provider_vanished(job)
            except Exception as exc:
                log.warning("job %s: cannot ask for the refund: %s", job_id, exc)
        reason = f"{PROVIDER_UNREACHABLE} for {silent:.0f} s: the job ended interrupted"
        self._save(
            msgspec.structs.replace(
                job,
                state="interrupted",
                reason=reason + ("; its escrow's refund is asked for" if asked else ""),
                finished_at=job.finished_at or time.time(),
            )
        )
        log.info("job %s: %s", job_id, reason)
        return True

    async def _follow_once(self, job: api.JobInfo, heard: _Heard | None = None) -> None:
        service = self._service()
        joblog = self.job_log(job.job_id)
        stream = await self._open(service, job.provider)
        try:
            await p.send(
                stream,
                self.ctx.identity,
                p.Follow(job_id=job.job_id, after_seq=joblog.last_seq),
            )
            live = False  # the first Update is the state as it is: not a change seen live
            while True:
                received = await p.receive(stream, job.provider)
                if received is None:
                    return
                if heard is not None:
                    heard.at = time.time()
                update, _ = received
                if isinstance(update, p.Refusal):
                    self._save(
                        msgspec.structs.replace(job, state="interrupted", reason=update.reason)
                    )
                    return
                if not isinstance(update, p.Update):
                    raise p.ProtocolError(f"unexpected {type(update).__name__} while following")
                job = self._apply(job, update, joblog, live=live)
                live = True
                if update.receipt and job.state in api.TERMINAL_STATES:
                    await self._countersign(job, update.receipt)
        finally:
            with contextlib.suppress(Exception):
                await stream.close()

    def _apply(
        self, job: api.JobInfo, update: p.Update, joblog: JobLog, *, live: bool = False
    ) -> api.JobInfo:
        """``live``: the update came on a follow that had shown the job before (its changes
        are seen as they happen: their time on our clock bounds what the job may cost)."""
        now = time.time()
        fresh = joblog.append(update.lines)
        if fresh:
            self.ctx.emit(api.JobLogEvent(at=now, job_id=job.job_id, lines=tuple(fresh)))
        seen: dict[str, float] = {}
        started = update.state == "running" and job.state not in ("running", *api.TERMINAL_STATES)
        if live and job.seen_started_at is None and started:
            seen["seen_started_at"] = now
        ended = job.state == "running" and update.state in api.TERMINAL_STATES
        if live and job.seen_finished_at is None and job.seen_started_at is not None and ended:
            seen["seen_finished_at"] = now
        seen_usage: dict[str, api.UsageSample] = {}
        if update.usage and (newest := self._usage.ring(job.job_id).take(update.usage, now)):
            seen_usage["usage"] = newest
        progress = update.progress()
        if not p.steps_fit(job.spec, update.steps):
            # Steps the spec never asked for (other names, more replicas): not this job's,
            # and never billed; the rest of the Update stands.
            log.warning("job %s: the provider's steps are not the spec's: ignored", job.job_id)
            progress["steps"] = job.steps
        changed = msgspec.structs.replace(
            job, **progress, log_lines=len(joblog), **seen, **seen_usage
        )
        if changed.metering is not None:
            # The metering's charge is this node's own figure from its record (the provider
            # sends none: protocol.py WireMetering), the one its receipt check and views use.
            cost = metered_units(changed)
            changed = msgspec.structs.replace(
                changed, metering=msgspec.structs.replace(changed.metering, cost_units=cost)
            )
        if changed == job:
            return job
        if msgspec.structs.replace(changed, log_lines=job.log_lines) == job:
            # Only the line count moved: keep it, but the JobLogEvent already told everyone.
            self.ctx.store.save_job(changed)
            return changed
        return self._save(changed)

    def usage(self, job_id: str) -> tuple[api.UsageSample, ...]:
        """A job's recent live samples from its provider, oldest first."""
        return self._usage.samples(job_id)

    def _receipt_missing(self, job: api.JobInfo) -> bool:
        if self._escrows is None:
            return False
        return self._escrows().awaiting_receipt(job.job_id)

    async def _countersign(self, job: api.JobInfo, receipt: str) -> None:
        """Sign the provider's receipt (if it says what we saw) and send it back; or sign
        our offer and keep the receipt the provider signs in its answer."""
        if self._escrows is None:
            return
        try:
            signed = await self._escrows().countersign(job, receipt)
        except EngineError as exc:
            log.warning("job %s: not countersigning the receipt: %s", job.job_id, exc.message)
            return
        escrows = self._escrows()
        answer = await self._ask(
            self._service(), job.provider, p.Countersign(job_id=job.job_id, receipt=signed)
        )
        if isinstance(answer, p.Countersigned):  # our offer (escrow.py), signed by both
            reason = escrows.offer_signed(job, answer.receipt)
            if reason:
                raise p.ProtocolError(reason)
            signed = answer.receipt
        elif isinstance(answer, p.Refusal):
            log.warning("job %s: the provider refused our receipt: %s", job.job_id, answer.reason)
            escrows.receipt_refused(job.job_id, answer.reason)
            return
        current = self.ctx.store.get_job(job.job_id) or job
        if current.receipt != signed:
            self._save(msgspec.structs.replace(current, receipt=signed))
