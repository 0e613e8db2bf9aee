"""The provider's side of the job protocol: quote, accept, run, stream, resume.

Admission (what a job needs, what it costs) follows the rules the consumer's matcher uses
(engine/domain/admission.py), judged on the figures this provider advertises about itself.

Strangers are bounded: a stream must bring its request within ``FIRST_FRAME_S`` and within
``p.MAX_REQUEST_BYTES``; a peer holds at most ``STREAMS_PER_PEER`` job streams; offers are
rate-limited per peer; unconfirmed quotes are dropped after their TTL and are bounded per
peer and in all. Nothing a stranger sends is stored until it belongs to a job that exists:
the offer and its quote are kept in memory and stored when the Confirm creates the job;
Follow, Cancel, Countersign and FetchResults are stored only for the sender's own job.

Every state change is committed before it is announced. ``Confirm`` is idempotent: a repeated
one is answered ``Accepted`` again and never starts the job twice. Only the job's consumer may
follow it, cancel it or fetch its results. After a restart, jobs that were running resume from
their last checkpoint (or end as "interrupted" when there is none).

``ProviderJobs`` is the last of its layers, one concern a module: its state and bookkeeping
(provider_base.py), its offer (provider_offer.py, composed), its runs (provider_runs.py), its
quotes (provider_quotes.py) and the streams it serves (provider_streams.py); this module
starts it and the tasks that keep it. The names tests and tools import stay exported here.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import trio

from engine.errors import EngineError
from engine.jobs import workspace_retention as wr
from engine.jobs.provider_base import (
    OFFER_BURST,
    OFFERS_PER_S,
    STREAMS_PER_ADDRESS,
    STREAMS_PER_PEER,
)
from engine.jobs.provider_streams import FIRST_FRAME_S, LINES_GATHER_S, ProviderStreams
from engine.jobs.quote_book import QUOTES_PER_PEER, HeldQuote, QuoteBook

__all__ = [
    "FIRST_FRAME_S",
    "LINES_GATHER_S",
    "OFFERS_PER_S",
    "OFFER_BURST",
    "QUOTES_PER_PEER",
    "STREAMS_PER_ADDRESS",
    "STREAMS_PER_PEER",
    "HeldQuote",
    "ProviderJobs",
    "QuoteBook",
]

log = logging.getLogger("nunet.jobs.provider")


class ProviderJobs(ProviderStreams):
    """The provider's side of the job protocol, as the node runs it: its layers (see
    provider_base.py) and the tasks that keep it (expired quotes dropped, finished jobs'
    workspaces swept, interrupted jobs resumed)."""

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for executor in self.executors.values():
                await nursery.start(executor.serve)
            for job in self.ctx.store.list_jobs(states=("accepted", "running")):
                if job.role == "provider":
                    nursery.start_soon(self._resume, job)
            nursery.start_soon(self._drop_expired_quotes)
            nursery.start_soon(self._sweep_workspaces)
            task_status.started()
            await trio.sleep_forever()

    async def _drop_expired_quotes(self) -> None:
        """Quotes nobody confirmed are dropped at their expiry, even if no offer comes."""
        while True:
            await trio.sleep(max(0.5, min(self._quote_ttl() / 4, 30.0)))
            if dropped := self._quotes.evict_expired(time.time()):
                log.debug("dropped %d expired quote(s)", dropped)

    async def _sweep_workspaces(self) -> None:
        """Finished jobs' workspaces go after the retention time: at the start (after the
        jobs to resume were taken up) and then periodically (workspace_retention.py)."""
        settings = self.ctx.settings.jobs
        retention = wr.Retention.from_settings(
            settings.workspace_keep_hours, settings.notebook_keep_days
        )
        root = self.ctx.paths.state_dir / "jobs"
        while True:
            try:
                await self.sweep_workspaces(root, retention)
            except Exception:  # a sweep that failed is tried again at the next interval
                log.exception("sweeping finished jobs' workspaces failed")
            await trio.sleep(retention.interval_s())

    async def sweep_workspaces(self, root: Path, retention: wr.Retention) -> list[str]:
        """One sweep; returns the ids of the jobs whose workspaces went."""
        folders = await trio.to_thread.run_sync(wr.folders_with_workspaces, root)
        # The records are read here, in the trio thread (the store's only one); a job being
        # run here now is left alone whatever its record says.
        found = wr.due(folders, self.ctx.store.get_job, retention, self._runs, time.time())
        removed: list[wr.Due] = []
        for entry in found:
            if entry.job_id in self._runs:  # started meanwhile (a resume): in use
                continue
            try:
                await trio.to_thread.run_sync(wr.remove, root, entry.job_id)
            except (EngineError, OSError) as exc:
                why = exc.message if isinstance(exc, EngineError) else str(exc)
                log.warning("job %s: its workspace was not removed: %s", entry.job_id, why)
                continue
            removed.append(entry)
        if removed:
            log.info(wr.note(removed))
        return [entry.job_id for entry in removed]
