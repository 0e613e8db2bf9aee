"""The consumer's queue (issue 27 §1): a job no provider can take now waits here instead of
failing, persisted as state "queued" in the job's record (so it survives a restart), and is
offered again every ``RETRY_S`` (sooner when woken: a job of ours ended, a provider freed a
slot) until it is placed or its ``queued_until`` passes. Nothing is locked while it waits: the
placement is the submit's own (quote, lock, confirm), run again with the job's id. Oldest
first; each record says what it waits for and its place in the queue.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
import trio

from engine import api
from engine.domain.matching import NoMatch
from engine.errors import EngineError

log = logging.getLogger("nunet.jobs.queue")

RETRY_S = 10.0
# Each pass offers every queued job again: a bound on what one node asks of the market.
MAX_QUEUED = 100
MAX_REASON = 600  # the stored "what it waits for": the first providers' reasons


class JobRefused(str):
    """A provider's refusal of the job itself (not "busy: …"): asking again would get the
    same answer, so such a job is not queued."""

    __slots__ = ()


def refusal_of(reason: str) -> str:
    """A provider's refusal reason, marked when it is about the job rather than the moment."""
    return reason if reason.startswith("busy") else JobRefused(reason)


class JobQueue:
    """``place``: the submit's placement of a stored job (raises NoMatch when no provider
    takes it); ``save``: the job's record."""

    def __init__(
        self,
        store: object,
        place: Callable[[api.JobInfo], Awaitable[api.JobInfo]],
        save: Callable[[api.JobInfo], api.JobInfo],
    ) -> None:
        self._store = store
        self._place = place
        self._save = save
        self._wake = trio.Event()

    def wake(self) -> None:
        self._wake.set()

    def queued(self) -> list[api.JobInfo]:
        jobs = self._store.list_jobs(states=("queued",), limit=10_000)  # type: ignore[attr-defined]
        return sorted((j for j in jobs if j.role == "consumer"), key=lambda j: j.created_at)

    def enqueue(self, job: api.JobInfo, no_match: NoMatch, timeout_s: float) -> api.JobInfo:
        if len(self.queued()) >= MAX_QUEUED:
            raise EngineError(
                "queue_full",
                f"{MAX_QUEUED} jobs wait in the queue already: {no_match.message} "
                "(`nunet-tui job list` shows them; `job cancel` one, or submit with --no-queue)",
            )
        queued = self._save(
            msgspec.structs.replace(
                job, state="queued", queued_until=time.time() + timeout_s, reason=""
            )
        )
        queued = self._waiting(queued, no_match, len(self.queued()))
        self.wake()
        return queued

    async def run(self) -> None:
        while True:
            with trio.move_on_after(RETRY_S):
                await self._wake.wait()
            self._wake = trio.Event()
            for place, job in enumerate(self.queued(), start=1):
                if job.queued_until is not None and time.time() > job.queued_until:
                    waited = (time.time() - job.created_at) / 60
                    self._save(
                        msgspec.structs.replace(
                            job,
                            state="refused",
                            finished_at=time.time(),
                            reason=f"no provider took it in {waited:.0f} min in the queue "
                            f"(its queue timeout); last: {job.reason}",
                        )
                    )
                    continue
                try:
                    await self._place(job)
                except NoMatch as exc:
                    self._waiting(job, exc, place)
                except EngineError as exc:  # a lock that failed, a spec no longer valid
                    log.info("queued job %s refused: %s", job.job_id, exc.message)
                    self._save(
                        msgspec.structs.replace(
                            job, state="refused", finished_at=time.time(), reason=exc.message
                        )
                    )

    def _waiting(self, job: api.JobInfo, no_match: NoMatch, place: int) -> api.JobInfo:
        current = self._store.get_job(job.job_id)  # type: ignore[attr-defined]
        if current is None or current.state != "queued":
            return current or job  # cancelled meanwhile
        until = time.strftime("%H:%M", time.localtime(current.queued_until or time.time()))
        why = no_match.message.removeprefix("no matching peer: ")
        reason = f"queued, {_ordinal(place)} in line until {until}: waiting for a provider ({why}"
        reason = (reason[: MAX_REASON - 2] + "…" if len(reason) > MAX_REASON else reason) + ")"
        return self._save(msgspec.structs.replace(current, reason=reason))


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
