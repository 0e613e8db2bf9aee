"""The consumer's jobs, first layer: its state, its constants, and asking a provider (one
signed request, one answer; the Confirm's final answer, retried). consumer_results.py,
consumer_follow.py and consumer.py build on it, in that order.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import trio

from engine import api
from engine.api import ResourceSpec
from engine.context import NodeContext
from engine.domain import safe_paths
from engine.domain.admission import budget_units, quote_units
from engine.domain.ratelimit import PeerRateLimiter
from engine.domain.spec import JobSpec
from engine.errors import EngineError
from engine.jobs import protocol as p
from engine.jobs.joblog import JobLog, JobLogs
from engine.jobs.live_usage import JobRings
from engine.ports import EscrowPort, NetworkPort, PeerLink
from oracle_client.ntx import LOCKED, format_ntx, ntx_of, units_of

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
# Parts one fetch resumes across (issue 24): a relay ends a circuit after relay_circuit_mb
# (16 MiB by default) and the transfer goes on from its offset over a new one; each part must
# bring new bytes. 2 GiB through 16 MiB circuits is 128 parts.
RESULT_PARTS = 256
# Parts in a row that brought nothing (a relay still counting the circuits that ended
# against the peer's share, a connection not yet replaced), waited for 1 then 2 s.
RESULT_STALLS = 3
RESULT_STALL_S = 1.0
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
    ``total_ntx`` (its price for the expected time): that is both estimate and lock, and must
    be a whole number of base units (the one place a decimal from the wire is read)."""
    if quote.price_units_hour <= 0 and quote.lock_units <= 0:
        lock = units_of(quote.total_ntx)
        if ntx_of(lock) != quote.total_ntx or lock < 0:
            return 0, 0, "quoted a total that is not a whole number of base units"
        estimate = lock
    else:
        resource = ResourceSpec(
            name="quoted",
            cpu_cores=1,
            ram_mb=1,
            price_units_hour=quote.price_units_hour,
            min_charge_units=quote.min_charge_units,
        )
        estimate, lock = quote_units(resource, spec, spec.most_replicas())
        if (quote.estimate_units, quote.lock_units) != (estimate, lock):
            return (
                0,
                0,
                (
                    f"quoted {quote.lock_units} base units locked, {quote.estimate_units} "
                    f"estimated: its price for this job's times is {lock} and {estimate}"
                ),
            )
        if units_of(quote.total_ntx) != lock:
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


class ConsumerBase:
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
        # How each job's results came (issue 24): the path ("direct", "via relay …") of the
        # last part and how many parts (a relay's circuit ends at its cap: resumed by offset).
        self._results_paths: dict[str, tuple[str, int]] = {}
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

    def _service(self) -> PeerLink:
        return self._network().require_service("job submit")

    def path_to(self, peer_id: str) -> str:
        """ "direct", "via relay <short id>" or "" (no connection, or no network): issue 24."""
        with contextlib.suppress(EngineError):
            return self._network().require_service("job show").path(peer_id)
        return ""

    def _save(self, job: api.JobInfo) -> api.JobInfo:
        job = msgspec.structs.replace(job, updated_at=time.time())
        self.ctx.store.save_job(job)
        self.ctx.emit(api.JobChanged(at=job.updated_at, job=job))
        return job

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

    async def _open(self, service: PeerLink, provider: str) -> Any:
        with _waiting(ASK_TIMEOUT_S, "for a stream to the provider"):
            return await service.open_stream(provider, p.JOB_PROTOCOL)

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
                total_ntx=ntx_of(job.lock_units or 0),
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
