"""The consumer's side of the job protocol: match, offer, confirm, follow, fetch results.

A submitted job is committed to the store before the provider is asked to run it; a follower
task per unfinished job keeps its log and state current, reconnecting with the last sequence
number it has (backlog, then the live tail) until the job ends; then the results archive is
fetched, its sha256 checked against the provider's signed header, and kept for ``job results``.
A provider silent for three heartbeats (no heartbeat, no update) is shown as unreachable; one
still silent ``[jobs] provider_grace_s`` later has its job ended interrupted, and a paid job's
refund is asked for at once (payments/escrow_receipts.py ``provider_vanished``).

In layers, each a module: consumer_base.py (state, constants, asking a provider),
consumer_results.py (fetching and unpacking results), consumer_follow.py (following jobs,
silence, the receipt) and this one (serving, submit and resubmit, cancel and stop).
"""

from __future__ import annotations

import functools
import secrets
import time

import msgspec
import trio

from engine import api
from engine.api import notebooks
from engine.domain.admission import max_minutes
from engine.domain.gang import gang_size
from engine.domain.matching import NoMatch, match
from engine.domain.spec import JobSpec, validate_spec
from engine.errors import EngineError
from engine.identity import short_peer_id
from engine.jobs import protocol as p
from engine.jobs.consumer_base import (
    CANCEL_END_S,
    CANCEL_RELEASE_S,
    MAX_CANDIDATES,
    MAX_OFFER_WAIT_S,
    MAX_UNVERIFIED_CANDIDATES,
    SUBMIT_S,
    UNDECIDED,
    _why,
    quoted_units,
)
from engine.jobs.consumer_gang import ConsumerGang
from engine.jobs.consumer_queue import JobQueue, JobRefused, refusal_of
from engine.store import consumer_reputations
from oracle_client.ntx import ESTIMATE, LOCKED, format_ntx


class ConsumerJobs(ConsumerGang):
    """``network``: the node's network; ``escrows``: the escrow of paid jobs (None: payments
    are off). Both are built on first use."""

    @functools.cached_property
    def queue(self) -> JobQueue:
        return JobQueue(self.ctx.store, self._place_queued, self._save)

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for job in self.ctx.store.list_jobs():
                if (
                    job.role == "consumer"
                    and job.state != "queued"
                    and (job.state not in api.TERMINAL_STATES or self._results_missing(job))
                ):
                    self._follow_soon(job.job_id)
            nursery.start_soon(self.queue.run)
            nursery.start_soon(self.resume_gangs)  # a gang placed or started before a restart
            task_status.started()
            await trio.sleep_forever()

    async def submit(self, command: api.SubmitJob) -> api.JobInfo:
        job_id = secrets.token_hex(6)
        try:
            return await self._place(command, job_id)
        except NoMatch as exc:
            # A gang is not queued: it is placed whole or not at all (consumer_gang.py). A
            # provider that refused the job itself (its script, its spec) would refuse it
            # again: only a market that is busy, or lacks what it needs yet, queues.
            refused = any(isinstance(reason, JobRefused) for _, reason in exc.excluded)
            if not command.queue or gang_size(command.spec) or refused:
                raise
            spec = command.spec
            waiting = api.JobInfo(
                job_id=job_id,
                role="consumer",
                state="queued",
                provider=command.peer_id or "",
                consumer=self.ctx.identity.peer_id,
                spec=spec,
                created_at=time.time(),
            )
            return self.queue.enqueue(waiting, exc, command.queue_timeout_s)

    def _with_score(
        self, candidates: list[str], least: float, refusals: list[tuple[str, str]]
    ) -> list[str]:
        """The candidates whose record with us scores ``least`` or more, best first; the
        others refused with their record said."""
        records = consumer_reputations(self.ctx.store)
        kept = []
        for peer in candidates:
            record = records.get(peer)
            if record is None or record.score is None or record.score < least:
                shown = (
                    f"{record.score:.2f} ({record.basis})"
                    if record and record.score
                    else ("none (no history with us)")
                )
                refusals.append((peer, f"its score {shown} is under --min-score {least:g}"))
            else:
                kept.append(peer)
        return sorted(kept, key=lambda p: -(records[p].score or 0))

    async def _place_queued(self, job: api.JobInfo) -> api.JobInfo:
        """A queued job offered again, under its own id (NoMatch: still no provider)."""
        return await self._place(
            api.SubmitJob(spec=job.spec, peer_id=job.provider or None), job.job_id
        )

    async def _place(self, command: api.SubmitJob, job_id: str) -> api.JobInfo:
        began = time.monotonic()
        spec = command.spec
        validate_spec(spec).raise_if_failed()
        if len(spec.name) > p.MAX_JOB_NAME_CHARS:
            raise EngineError(
                "invalid",
                f"job name of {len(spec.name)} characters: give at most {p.MAX_JOB_NAME_CHARS}",
            )
        service = self._service()
        from engine.domain.peer_info import to_api_peer

        peers = [to_api_peer(info) for info in service.peers()]
        self._progress(
            command,
            began,
            "matching",
            f"peer {short_peer_id(command.peer_id)}, picked by hand"
            if command.peer_id
            else f"{len(peers)} peers on this channel",
        )
        refusals: list[tuple[str, str]] = []
        if command.peer_id:
            chosen = [peer for peer in peers if peer.peer_id == command.peer_id]
            if not chosen:
                raise EngineError(
                    "not_found",
                    f"peer {command.peer_id} is not listed on this channel; `nunet-tui peer list`",
                )
            # A hand-picked peer is judged by the same rules as a matched one, before any
            # offer: a provider that cannot run the job would only refuse it (or worse).
            picked = match(spec, chosen, consumer=self.ctx.identity.peer_id)
            if not picked.candidates:
                reasons = picked.excluded[0][1]
                raise EngineError(
                    "unsuitable",
                    f"peer {command.peer_id} cannot run this job: {reasons}; "
                    "pick another with `nunet-tui peer list`, or leave out --peer",
                )
            candidates = [c.peer_id for c in picked.candidates]
        else:
            completed = self.ctx.store.providers_completed()
            result = match(
                spec,
                peers,
                consumer=self.ctx.identity.peer_id,
                # Those that completed jobs for us, then those we talked to, then the rest.
                standing=lambda peer: 0 if peer.peer_id in completed else 1 if peer.verified else 2,
            )
            result.best()  # NoMatch with every peer's reason
            candidates = []
            unverified = 0
            for c in result.candidates:
                if len(candidates) >= MAX_CANDIDATES:
                    break
                if not c.peer.verified and c.peer_id not in completed:
                    unverified += 1
                    if unverified > MAX_UNVERIFIED_CANDIDATES:
                        continue
                candidates.append(c.peer_id)
            refusals.extend(result.excluded)
        if command.min_score is not None:
            candidates = self._with_score(candidates, command.min_score, refusals)
            if not candidates:
                raise NoMatch(refusals)
        if gang_size(spec):
            return await self._submit_gang(command, began, spec, candidates, refusals)
        job = await self._offer_to(command, began, spec, candidates, refusals, job_id)
        if job is None:
            raise NoMatch(refusals)
        return job

    async def _offer_to(
        self,
        command: api.SubmitJob,
        began: float,
        spec: JobSpec,
        candidates: list[str],
        refusals: list[tuple[str, str]],
        job_id: str,
    ) -> api.JobInfo | None:
        """The job (as ``job_id``) on the first of ``candidates`` that accepts it: quoted,
        locked, confirmed (``accepted``), or left ``confirming`` when a provider gave no final
        answer in time (asked again in the background). None: every candidate refused
        (``refusals``)."""
        service = self._service()
        from engine.domain.peer_info import to_api_peer

        peers = [to_api_peer(info) for info in service.peers()]
        me = self.ctx.identity.peer_id
        deadline = trio.current_time() + SUBMIT_S
        for provider in candidates:
            if trio.current_time() >= deadline:
                refusals.append((provider, "not asked: the submit ran out of time"))
                continue
            wait = self._offer_pace.wait_s(provider)
            if wait > MAX_OFFER_WAIT_S:
                refusals.append((provider, f"our offers to it are paced: free in {wait:.0f} s"))
                continue
            await trio.sleep(wait)
            self._offer_pace.allow(provider)
            who = f"provider {short_peer_id(provider)}"
            self._progress(command, began, "asking", f"{who}: offer sent, waiting for a quote")
            try:
                quote = await self._ask(
                    service,
                    provider,
                    p.Offer(job_id=job_id, spec=spec, consumer=me),
                )
            except (p.ProtocolError, OSError, trio.TooSlowError, Exception) as exc:
                refusals.append((provider, f"unreachable: {_why(exc)}"))
                continue
            if isinstance(quote, p.Refusal):
                refusals.append((provider, refusal_of(quote.reason)))
                self._progress(command, began, "refused", f"{who}: {quote.reason}")
                continue
            if not isinstance(quote, p.Quote) or quote.provider != provider:
                refusals.append((provider, "answered the offer with something else"))
                continue
            estimate, lock, why = quoted_units(quote, spec)
            if why:
                refusals.append((provider, why))
                self._progress(command, began, "refused", f"{who}: {why}")
                continue
            self._progress(
                command,
                began,
                "quoted",
                f"{who}: {format_ntx(estimate, ESTIMATE)}, at most {format_ntx(lock, LOCKED)}",
            )
            job = self._save(
                api.JobInfo(
                    job_id=job_id,
                    role="consumer",
                    state="pending",
                    provider=provider,
                    consumer=me,
                    spec=spec,
                    resource_spec=quote.spec_name,
                    price_units_hour=quote.price_units_hour or None,
                    min_charge_units=quote.min_charge_units,
                    estimate_units=estimate,
                    lock_units=lock,
                    executor=quote.executor,
                    created_at=time.time(),
                )
            )
            if self._escrows is not None and lock > 0:
                self._progress(
                    command,
                    began,
                    "locking",
                    f"{format_ntx(lock, LOCKED)} into escrow: building and submitting the "
                    "transaction, then waiting for the chain to show it",
                )
                try:
                    # The lock covers the maximum time (the budget cap); what the job uses
                    # is paid from it and the rest comes back. Its terms and tx go with the
                    # Confirm (lock_of: the same with every repeat of it).
                    await self._escrows().lock(
                        job_id,
                        provider,
                        quote.payment_address,
                        lock,
                        max_minutes(spec),
                        slots=_slots(peers, provider),
                    )
                except EngineError as exc:
                    self._save(msgspec.structs.replace(job, state="refused", reason=exc.message))
                    raise
            # Saved before the Confirm goes: after a restart the job is asked about again,
            # never forgotten with its lock (the follower settles it: _settle_confirm).
            job = self._save(msgspec.structs.replace(job, state="confirming"))
            self._progress(command, began, "confirming", f"{who}: waiting for its final answer")
            answer = await self._final_answer(job, release=False, until=deadline)
            if answer is None:
                job = self._save(
                    msgspec.structs.replace(
                        job,
                        reason=f"no final answer from provider {provider} within "
                        f"{SUBMIT_S:g} s: asked again in the background, and no other "
                        "provider is asked meanwhile (`job cancel` releases it)",
                    )
                )
                self._follow_soon(job_id)
                return job
            if isinstance(answer, p.Refusal):
                job = self._never_ran(job, "refused", answer.reason)
                refusals.append((provider, refusal_of(job.reason)))
                self._progress(command, began, "refused", f"{who}: {job.reason}")
                job_id = secrets.token_hex(6)
                continue
            job = self._save(msgspec.structs.replace(job, state="accepted", reason=""))
            self._progress(command, began, "accepted", f"{who}: job {job_id} accepted")
            self._follow_soon(job_id)
            return job
        return None

    async def resubmit(self, command: api.ResubmitJob) -> api.JobInfo:
        """`job resubmit`: a finished job's stored spec submitted again as a new job (its own
        id, quote and lock), on ``peer_id`` or wherever matching finds; the old job stays as
        it ended. Refused while the old one still runs: two runs of one spec at once is a
        second submit, which says so itself."""
        job_id = command.job_id.strip()
        job = self.ctx.store.get_job(job_id)
        if job is None:
            raise EngineError("not_found", f"no job {job_id!r}; `nunet-tui job list`")
        if job.role != "consumer":
            raise EngineError(
                "invalid",
                f"job {job.job_id} is one this node ran for {short_peer_id(job.consumer)}: "
                "only its consumer can submit it again",
            )
        if job.state not in api.TERMINAL_STATES:
            raise EngineError(
                "not_finished",
                f"job {job.job_id} is still {job.state}: wait for its end or "
                f"`nunet-tui job cancel {job.job_id}`, then resubmit it",
            )
        spec = job.spec
        if notebooks.TOKEN_ENV in spec.env:
            # A notebook's token is one job's (its provider saw it): the new one gets its own.
            env = {**spec.env, notebooks.TOKEN_ENV: notebooks.new_token()}
            spec = msgspec.structs.replace(spec, env=env)
        return await self.submit(
            api.SubmitJob(spec=spec, peer_id=command.peer_id, submit_id=command.submit_id)
        )

    async def cancel(self, command: api.CancelJob) -> api.JobInfo:
        return await self._end(command.job_id, stop=False)

    async def stop(self, command: api.StopJob) -> api.JobInfo:
        """`job stop`: a service job's normal end (it ends "completed")."""
        job = self.ctx.store.get_job(command.job_id.strip())
        if job is not None and job.role == "consumer" and job.spec.kind != "service":
            raise EngineError(
                "invalid",
                f"job {job.job_id} is a batch job: `nunet-tui job cancel {job.job_id}` ends it "
                "(job stop is for service jobs)",
            )
        return await self._end(command.job_id, stop=True)

    async def _end(self, job_id: str, *, stop: bool) -> api.JobInfo:
        job = self.ctx.store.get_job(job_id.strip())
        if job is None or job.role != "consumer":
            raise EngineError("not_found", f"no job {job_id} of yours")
        if job.state in api.TERMINAL_STATES:
            raise EngineError(
                "ended", f"job {job.job_id} already ended ({job.state}): nothing to end"
            )
        if job.state == "queued":  # nothing locked, no provider told: it just leaves the queue
            return self._save(
                msgspec.structs.replace(
                    job, state="cancelled", finished_at=time.time(), reason="left the queue"
                )
            )
        if job.state in UNDECIDED:
            ended = await self._release(job)
            if ended is not None:
                return ended
            job = self.ctx.store.get_job(job.job_id) or job
        service = self._service()
        try:
            answer = await self._ask(service, job.provider, p.Cancel(job_id=job.job_id, stop=stop))
        except EngineError:
            raise
        except Exception as exc:  # no stream, a reset, no answer: said, never "internal error"
            what = "stop" if stop else "cancel"
            raise EngineError(
                "unreachable",
                f"provider {job.provider} did not take the {what} ({_why(exc)}): job "
                f"{job.job_id} goes on; try again",
            ) from None
        if isinstance(answer, p.Refusal):
            what = "stop" if stop else "cancel"
            raise EngineError("refused", f"the provider refused to {what}: {answer.reason}")
        # The provider answers at once and stops the job meanwhile (a container's stop may
        # take its grace time and more); its end comes in the job's Updates. A job not ended
        # by then is returned as it is: the caller says it is stopping.
        with trio.move_on_after(CANCEL_END_S):
            while (current := self.ctx.store.get_job(job.job_id)) is not None and (
                current.state not in api.TERMINAL_STATES
            ):
                await trio.sleep(0.05)
        return self.ctx.store.get_job(job.job_id) or job

    async def _release(self, job: api.JobInfo) -> api.JobInfo | None:
        """End a job its provider has not accepted yet: the provider's final answer to our
        Release. The job ended (cancelled, its lock refunded), or None when the provider had
        accepted it first (the caller then cancels it as a running job)."""
        answer = await self._final_answer(
            job, release=True, until=trio.current_time() + CANCEL_RELEASE_S
        )
        if answer is None:
            raise EngineError(
                "unreachable",
                f"provider {job.provider} did not answer within {CANCEL_RELEASE_S:g} s: job "
                f"{job.job_id} stays {job.state} until it does (asked again in the "
                "background); its lock comes back at the latest at its deadline",
            )
        current = self.ctx.store.get_job(job.job_id) or job
        if isinstance(answer, p.Refusal):
            if current.state in api.TERMINAL_STATES:
                return current
            return self._never_ran(
                current, "cancelled", "cancelled before the provider accepted it"
            )
        if current.state in UNDECIDED:
            self._save(msgspec.structs.replace(current, state="accepted", reason=""))
        self._follow_soon(job.job_id)
        return None


def _slots(peers: list[api.Peer], provider: str) -> int:
    """The provider's advertised job slots: the oracle counts its open jobs against them."""
    for peer in peers:
        if peer.peer_id == provider and peer.resources is not None:
            return peer.resources.slots
    return 1
