"""The consumer's side of the job protocol: match, offer, confirm, follow, fetch results.

A submitted job is committed to the store before the provider is asked to run it; a follower
task per unfinished job keeps its log and state current, reconnecting with the last sequence
number it has (backlog, then the live tail) until the job ends; then the results archive is
fetched, its sha256 checked against the provider's signed header, and kept for ``job results``.
A provider silent for three heartbeats (no heartbeat, no update) is shown as unreachable; one
still silent ``[jobs] provider_grace_s`` later has its job ended interrupted, and a paid job's
refund is asked for at once (payments/escrow.py ``provider_vanished``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import trio

from engine import api
from engine.api import ResourceSpec, notebooks
from engine.context import NodeContext
from engine.domain import safe_paths
from engine.domain.admission import budget_units, max_minutes, quote_units
from engine.domain.matching import NoMatch, match
from engine.domain.peer_info import MISSED_HEARTBEATS
from engine.domain.ratelimit import PeerRateLimiter
from engine.domain.spec import JobSpec, validate_spec
from engine.errors import EngineError
from engine.identity import short_peer_id
from engine.jobs import protocol as p
from engine.jobs.joblog import JobLog, JobLogs
from engine.jobs.live_usage import JobRings
from engine.jobs.results import safe_unpack, sha256_file, verify
from engine.ports import EscrowPort, NetworkPort, PeerLink
from oracle_client.ntx import ESTIMATE, LOCKED, UNITS_PER_NTX, format_ntx, ntx_of

log = logging.getLogger("nunet.jobs.consumer")

ASK_TIMEOUT_S = 10.0
MAX_RESULTS_BYTES = 2 << 30
# Results (issue 20 §8): a provider that stops sending is given up on after RESULT_CHUNK_S
# without a byte, a whole transfer after RESULT_TRANSFER_S plus a second per RESULT_MIN_RATE
# bytes, and the fetch is tried RESULT_TRIES times before the job keeps the reason for good.
RESULT_CHUNK_S = 60.0
RESULT_TRANSFER_S = 120.0
RESULT_MIN_RATE = 256 * 1024  # bytes/s: 2 GiB in about 2 h 20 min at the most
RESULT_TRIES = 5
RETRY_S = (0.5, 1.0, 2.0, 5.0)
MAX_CANDIDATES = 5
# Providers known from relayed adverts only (never talked to) asked per submit: fakes cost an
# attacker nothing, and each one asked is a dial and an offer's wait (issue 21).
MAX_UNVERIFIED_CANDIDATES = 2
# Longer than this waiting for our own pace to a provider: the next candidate instead.
MAX_OFFER_WAIT_S = 5.0
PROVIDER_UNREACHABLE = "provider unreachable"
# A submit's own time (issue 20 §1), inside the client's wait for it (api.SUBMIT_WAIT_S): a
# provider whose final answer to the Confirm has not come by then keeps the job, "confirming",
# asked again in the background; no other provider is asked while the first may still accept.
SUBMIT_S = api.SUBMIT_WAIT_S - 30.0
CONFIRM_RETRY_S = (1.0, 2.0, 5.0, 10.0)  # between tries of a Confirm or a Release
# `job cancel` of a job not yet accepted: its Release's time, then the Cancel's, then 5 s to
# see it end, inside the client's wait (api.CANCEL_WAIT_S).
CANCEL_RELEASE_S = api.CANCEL_WAIT_S - 3 * ASK_TIMEOUT_S - 15.0
# How long `job cancel` waits for a cancelled running job's end after the provider took it.
CANCEL_END_S = 20.0
assert CANCEL_RELEASE_S + ASK_TIMEOUT_S + CANCEL_END_S < api.CANCEL_WAIT_S
# A job is "pending" until its Confirm goes out (then "confirming" until the final answer).
UNDECIDED = ("pending", "confirming")
USAGE_JOBS = 64  # jobs whose live samples are kept (in memory)


def quoted_units(quote: p.Quote, spec: JobSpec) -> tuple[int, int, str]:
    """(estimate, lock, why not) of a provider's quote, in base units, checked here: the lock
    must be the quoted price for the job's maximum time (a provider may not lock more than
    its own price says) and within the budget. A provider of before issue 12 quotes only
    ``total_ntx`` (its price for the expected time): that is both estimate and lock."""
    if quote.price_units_hour <= 0 and quote.lock_units <= 0:
        lock = round(quote.total_ntx * UNITS_PER_NTX)
        estimate = lock
    else:
        resource = ResourceSpec(
            name="quoted",
            cpu_cores=1,
            ram_mb=1,
            price_units_hour=quote.price_units_hour,
            min_charge_units=quote.min_charge_units,
        )
        estimate, lock = quote_units(resource, spec)
        if (quote.estimate_units, quote.lock_units) != (estimate, lock):
            return (
                0,
                0,
                (
                    f"quoted {quote.lock_units} base units locked, {quote.estimate_units} "
                    f"estimated: its price for this job's times is {lock} and {estimate}"
                ),
            )
        if abs(quote.total_ntx - ntx_of(lock)) > 1e-9:
            return 0, 0, "quoted a total that is not its lock"
    budget = budget_units(spec)
    if budget is not None and lock > budget:
        return 0, 0, f"quote {format_ntx(lock, LOCKED)} is above the budget of {format_ntx(budget)}"
    return estimate, lock, ""


@dataclass
class _Heard:
    """When a followed job's provider was last heard from (POSIX seconds)."""

    at: float


@contextlib.contextmanager
def _waiting(seconds: float, what: str) -> Iterator[None]:
    """``trio.fail_after`` whose TooSlowError says what it waited for, and how long (only
    its own deadline's: one nested inside it keeps its own words)."""
    with trio.move_on_after(seconds) as scope:
        yield
    if scope.cancelled_caught:
        raise trio.TooSlowError(f"no reply: waited {seconds:g} s {what}")


def _why(exc: BaseException) -> str:
    """One line for a failed ask (a timeout's own text is empty)."""
    if isinstance(exc, trio.TooSlowError):
        return str(exc) or f"no answer within {ASK_TIMEOUT_S:g} s"
    return str(exc) or type(exc).__name__


class ConsumerJobs:
    """``network``: the node's network; ``escrows``: the escrow of paid jobs (None: payments
    are off). Both are built on first use."""

    def __init__(
        self,
        ctx: NodeContext,
        *,
        network: Callable[[], NetworkPort],
        escrows: Callable[[], EscrowPort] | None = None,
        logs: JobLogs | None = None,
    ) -> None:
        self.ctx = ctx
        self._network = network
        self._escrows = escrows if ctx.payments_enabled else None
        self._following: set[str] = set()
        # Our offers to each provider, paced under the rate it answers (protocol.py), with a
        # margin for the network's jitter: a script submitting many jobs waits its turn
        # instead of being refused "too many offers".
        self._offer_pace = PeerRateLimiter(p.OFFERS_PER_S * 0.9, p.OFFER_BURST - 1)
        # Open logs: a followed job's stays; of the others only the last few read.
        self._logs = logs if logs is not None else JobLogs(ctx.paths.state_dir / "jobs")
        self._nursery: trio.Nursery | None = None
        self._fetch_failures: dict[str, int] = {}  # results fetches failed in a row, by job
        # The providers' live samples of our jobs, the last few minutes' of each of the jobs
        # followed last (memory only: after a restart a job's history starts again; its
        # latest sample stays in its record, JobInfo.usage).
        self._usage = JobRings(jobs=USAGE_JOBS)

    def job_dir(self, job_id: str) -> Path:
        return safe_paths.job_dir(self.ctx.paths.state_dir / "jobs", job_id)

    def job_path(self, job_id: str, name: str) -> Path:
        """A file of the job's own (its log, its results archive)."""
        return safe_paths.child(self.job_dir(job_id), name, what=f"job {job_id}'s")

    def job_log(self, job_id: str) -> JobLog:
        return self._logs.get(job_id)

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for job in self.ctx.store.list_jobs():
                if job.role == "consumer" and (
                    job.state not in api.TERMINAL_STATES or self._results_missing(job)
                ):
                    self._follow_soon(job.job_id)
            task_status.started()
            await trio.sleep_forever()

    def _service(self) -> PeerLink:
        return self._network().require_service("job submit")

    def _save(self, job: api.JobInfo) -> api.JobInfo:
        job = msgspec.structs.replace(job, updated_at=time.time())
        self.ctx.store.save_job(job)
        self.ctx.emit(api.JobChanged(at=job.updated_at, job=job))
        return job

    # --- submit ------------------------------------------------------------------------

    def _progress(
        self, command: api.SubmitJob, began: float, step: api.SubmitStep, detail: str
    ) -> None:
        """One step of a submit, for the caller that named it (the app, `job submit`)."""
        if command.submit_id:
            self.ctx.emit(
                api.SubmitProgress(
                    at=time.time(),
                    submit_id=command.submit_id,
                    step=step,
                    detail=detail,
                    elapsed_s=round(time.monotonic() - began, 2),
                )
            )

    async def submit(self, command: api.SubmitJob) -> api.JobInfo:
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
        job_id = secrets.token_hex(6)
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
                refusals.append((provider, quote.reason))
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
                    price_ntx_hour=quote.price_ntx_hour,
                    quoted_ntx=quote.total_ntx,
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
                        ntx_of(lock),
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
                refusals.append((provider, job.reason))
                self._progress(command, began, "refused", f"{who}: {job.reason}")
                job_id = secrets.token_hex(6)
                continue
            job = self._save(msgspec.structs.replace(job, state="accepted", reason=""))
            self._progress(command, began, "accepted", f"{who}: job {job_id} accepted")
            self._follow_soon(job_id)
            return job
        raise NoMatch(refusals)

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

    async def _ask(
        self,
        service: PeerLink,
        provider: str,
        message: p.JobMessage,
        answer_s: float = ASK_TIMEOUT_S,
    ) -> p.AnyJobMessage:
        """``answer_s``: how long the answer may take once the request is sent."""
        stream = await self._open(service, provider)
        try:
            with _waiting(ASK_TIMEOUT_S, "for the provider to take the request"):
                raw = await p.send(stream, self.ctx.identity, message)
            self.ctx.store.record_job_message(message.job_id, "out", p.kind(message), raw)
            with _waiting(answer_s, "for the answer"):
                # Only a short answer may come (Quote, Refusal, Accepted): bounded to fit.
                received = await p.receive(stream, provider, p.MAX_ANSWER_BYTES)
            if received is None:
                raise p.ProtocolError("the provider closed the stream without answering")
            answer, raw_answer = received
            if answer.job_id != message.job_id:
                raise p.ProtocolError("the provider answered about another job")
            self.ctx.store.record_job_message(message.job_id, "in", p.kind(answer), raw_answer)
            return answer
        finally:
            with contextlib.suppress(Exception):
                await stream.close()

    async def _final_answer(
        self, job: api.JobInfo, *, release: bool, until: float
    ) -> p.Accepted | p.Refusal | None:
        """The provider's final answer about ``job``: its Confirm (the same job id, the same
        lock: idempotent) or, with ``release``, a Release; asked again after a lost stream or
        a slow answer until ``until`` (trio time). None: no answer by then."""
        terms, lock_tx = ("", "")
        if self._escrows is not None:
            terms, lock_tx = self._escrows().lock_of(job.job_id)
        message: p.JobMessage = (
            p.Release(job_id=job.job_id)
            if release
            else p.Confirm(
                job_id=job.job_id,
                total_ntx=job.quoted_ntx or 0.0,
                escrow_tx=lock_tx,
                escrow_terms=terms,
            )
        )
        what = "release" if release else "confirmation"
        for attempt in itertools.count():
            left = until - trio.current_time()
            if left <= 0:
                return None
            with trio.move_on_after(left):
                try:
                    answer = await self._ask(
                        self._service(), job.provider, message, answer_s=p.CONFIRM_ANSWER_S
                    )
                except Exception as exc:  # the network down, a stream libp2p could not open
                    log.info("job %s: no answer to the %s yet: %s", job.job_id, what, _why(exc))
                else:
                    if isinstance(answer, (p.Accepted, p.Refusal)):
                        return answer
                    log.info("job %s: %s answered with %s", job.job_id, what, p.kind(answer))
            pause = CONFIRM_RETRY_S[min(attempt, len(CONFIRM_RETRY_S) - 1)]
            await trio.sleep(max(0.0, min(pause, until - trio.current_time())))
        return None  # pragma: no cover (the loop returns)

    def _never_ran(self, job: api.JobInfo, state: str, reason: str) -> api.JobInfo:
        """The provider's final answer was no: the job ends ``state`` and its lock is asked
        back now (the escrow first: after a crash between the two, the job is asked about
        again and its refund is not asked twice)."""
        refunding = False
        if self._escrows is not None:
            try:
                refunding = self._escrows().never_ran(job)
            except Exception as exc:  # the refund is retried by the settle loop's deadline
                log.warning("job %s: cannot ask for the refund now: %s", job.job_id, exc)
        if refunding:
            reason += " (its locked NTX are refunded now)"
        return self._save(
            msgspec.structs.replace(
                job, state=state, reason=reason, finished_at=job.finished_at or time.time()
            )
        )

    async def _settle_confirm(self, job: api.JobInfo) -> None:
        """A job whose Confirm has no final answer yet (a submit that ran out of time, a
        restart): its Confirm again, until the provider answers; raises to be retried."""
        answer = await self._final_answer(
            job, release=False, until=trio.current_time() + p.CONFIRM_ANSWER_S
        )
        current = self.ctx.store.get_job(job.job_id) or job
        if answer is None or current.state not in UNDECIDED:
            if answer is None:
                raise trio.TooSlowError()
            return  # decided meanwhile (a cancel)
        if isinstance(answer, p.Refusal):
            self._never_ran(current, "refused", answer.reason)
            return
        self._save(msgspec.structs.replace(current, state="accepted", reason=""))

    async def _open(self, service: PeerLink, provider: str) -> Any:
        with _waiting(ASK_TIMEOUT_S, "for a stream to the provider"):
            return await service.open_stream(provider, p.JOB_PROTOCOL)

    # --- following -----------------------------------------------------------------------

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

    # --- a provider that vanishes ----------------------------------------------------------

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
        changed = msgspec.structs.replace(
            job, **update.progress(), log_lines=len(joblog), **seen, **seen_usage
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

    # --- results -----------------------------------------------------------------------

    def _results_missing(self, job: api.JobInfo) -> bool:
        return bool(job.results_sha256) and not job.results_dir and not job.results_error

    async def _fetch_results_tried(self, job: api.JobInfo) -> None:
        """One more try of the results; after RESULT_TRIES failures in a row the job keeps the
        reason for good (shown by `job show`; `job results` tries again). Raises to be
        retried on the follower's schedule."""
        try:
            await self._fetch_results(job)
        except Exception as exc:
            why = _why(exc)
            tries = self._fetch_failures.get(job.job_id, 0) + 1
            self._fetch_failures[job.job_id] = tries
            current = self.ctx.store.get_job(job.job_id) or job
            if tries >= RESULT_TRIES:
                self._fetch_failures.pop(job.job_id, None)
                self._save(
                    msgspec.structs.replace(current, results_error=f"{why} (tried {tries} times)")
                )
                log.warning(
                    "job %s: results not fetched after %d tries: %s", job.job_id, tries, why
                )
                return
            raise
        self._fetch_failures.pop(job.job_id, None)

    async def _fetch_results(self, job: api.JobInfo) -> None:
        if job.results_size > MAX_RESULTS_BYTES:
            self._save(
                msgspec.structs.replace(
                    job,
                    results_error=f"results of {job.results_size} bytes: this node fetches "
                    f"at most {MAX_RESULTS_BYTES} bytes",
                )
            )
            return
        service = self._service()
        stream = await self._open(service, job.provider)
        target = self.job_path(job.job_id, "results.tar.gz")
        try:
            await p.send(stream, self.ctx.identity, p.FetchResults(job_id=job.job_id))
            with _waiting(RESULT_CHUNK_S, "for the results' header"):
                received = await p.receive(stream, job.provider)
            if received is None or not isinstance(received[0], p.ResultsHeader):
                raise p.ProtocolError("the provider did not send results")
            header = received[0]
            # Before a byte is written: the size and checksum the provider signed at the end of
            # the job bound what we accept (a header may not announce more).
            if header.sha256 != job.results_sha256 or header.size != job.results_size:
                raise p.ProtocolError("results header does not match the job's checksum and size")
            partial = target.with_suffix(".part")
            partial.parent.mkdir(parents=True, exist_ok=True)
            got = 0
            transfer_s = RESULT_TRANSFER_S + header.size / RESULT_MIN_RATE
            with (
                _waiting(transfer_s, f"for {header.size} bytes of results"),
                partial.open("wb") as handle,
            ):
                while got < header.size:
                    with _waiting(RESULT_CHUNK_S, "for the next bytes of the results"):
                        chunk = await stream.read(min(p.RESULT_CHUNK, header.size - got))
                    if not chunk:
                        break
                    got += len(chunk)
                    handle.write(chunk)
        finally:
            with contextlib.suppress(Exception):
                await stream.close()
        verify(partial, header.sha256, header.size)  # raises with a clear message
        partial.replace(target)
        current = self.ctx.store.get_job(job.job_id) or job
        self._save(msgspec.structs.replace(current, results_dir=str(target), results_error=""))

    async def results(self, command: api.FetchJobResults) -> api.JobResults:
        job = self.ctx.store.get_job(command.job_id.strip())
        if job is None:
            raise EngineError("not_found", f"no job {command.job_id!r}; `nunet-tui job list`")
        if job.role != "consumer":
            raise EngineError("invalid", "results are fetched by the job's consumer")
        if job.results_error:  # given up on in the background: once more, now
            try:
                await self._fetch_results(job)
            except Exception as exc:
                raise EngineError(
                    "no_results",
                    f"the results of {job.job_id} could not be fetched: {_why(exc)} "
                    f"(before: {job.results_error})",
                ) from None
            job = self._save(
                msgspec.structs.replace(self.ctx.store.get_job(job.job_id) or job, results_error="")
            )
        if not job.results_dir:
            state = "still running" if job.state not in api.TERMINAL_STATES else job.state
            raise EngineError("no_results", f"job {job.job_id} has no results yet ({state})")
        archive = Path(job.results_dir)
        out = Path(command.out_dir).expanduser()
        return await trio.to_thread.run_sync(_unpack, job, archive, out)

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

    async def delete_results(self, command: api.DeleteJobResults) -> api.Done:
        """`notebook delete`: a finished job's files removed on its provider (helper D;
        engine/jobs/notebooks.py). Our own fetched copy stays for `job results`."""
        job = self.ctx.store.get_job(command.job_id.strip())
        if job is None or job.role != "consumer":
            raise EngineError(
                "not_found", f"no job {command.job_id!r} of yours; `nunet-tui job list`"
            )
        if job.state not in api.TERMINAL_STATES:
            raise EngineError(
                "not_finished", f"job {job.job_id} is {job.state}: stop it first (notebook stop)"
            )
        if self._results_missing(job):  # never delete the only copy
            raise EngineError("not_fetched", f"job {job.job_id}'s files are not fetched yet")
        answer = await self._ask(self._service(), job.provider, p.DeleteResults(job_id=job.job_id))
        if not isinstance(answer, p.Accepted):
            why = answer.reason if isinstance(answer, p.Refusal) else "an unexpected answer"
            raise EngineError("refused", f"the provider did not delete the files: {why}")
        return api.Done(message=f"job {job.job_id}'s files were deleted on its provider")

    async def _end(self, job_id: str, *, stop: bool) -> api.JobInfo:
        job = self.ctx.store.get_job(job_id.strip())
        if job is None or job.role != "consumer":
            raise EngineError("not_found", f"no job {job_id} of yours")
        if job.state in api.TERMINAL_STATES:
            raise EngineError(
                "ended", f"job {job.job_id} already ended ({job.state}): nothing to end"
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


def _unpack(job: api.JobInfo, archive: Path, out: Path) -> api.JobResults:
    """Off the trio loop: hashing and unpacking a large archive takes a while."""
    if sha256_file(archive) != job.results_sha256:
        raise EngineError("corrupt", f"the stored results of {job.job_id} are damaged")
    # Each call unpacks into a new folder (name, name-2, ...): runs never overwrite.
    try:
        directory = safe_unpack(archive, out, job.job_id)
    except EngineError as exc:
        if exc.code != "unsafe_archive":
            raise
        raise EngineError(
            "unsafe_archive",
            f"the results of {job.job_id} from its provider were refused (nothing was "
            f"written): {exc.message.removeprefix('the archive was refused: ')}",
        ) from None
    files = sorted(str(f.relative_to(directory)) for f in directory.rglob("*") if f.is_file())
    return api.JobResults(
        job_id=job.job_id,
        directory=str(directory),
        files=tuple(files),
        sha256=job.results_sha256,
        size=job.results_size,
    )
