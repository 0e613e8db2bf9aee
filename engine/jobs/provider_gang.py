"""A gang's slot on its provider (issue 25 §2; docs/cluster-overlay.md): accepted like any
job (quote, lock, Confirm), then held without starting until its consumer's ``GangStart``
names the gang's members; then run, its distributed replica with RANK, WORLD_SIZE and
MASTER_* in its environment (executors/steps.py) and joined, once its container runs, to the
gang's overlay (the ``OverlayJoin`` path, called here rather than by hand).

States, on this side: ``accepted`` without ``gang_members`` (held), ``accepted`` with them
(started: its run begins), then the usual ones. A repeated start with the same members is
answered ``Accepted`` and changes nothing; a start for an ended slot is refused with its end.
A slot whose start never comes ends ``failed`` after ``[jobs] gang_start_wait_s`` (600 s),
never started (nothing billed), saying what it waited for."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import msgspec
import trio

from engine import api
from engine.domain.gang import address_of, members_problem, subnet_of
from engine.errors import EngineError
from engine.jobs import protocol as p
from engine.jobs.executors.base import Executor, ExitStatus, JobRun
from engine.jobs.provider_runs import ProviderRuns

log = logging.getLogger("nunet.jobs.provider")

JoinOverlay = Callable[[api.OverlayJoin], Awaitable[object]]


class ProviderGang(ProviderRuns):
    """``join_overlay``: the jobs room's ``JobOverlays.join`` (set by NodeJobs)."""

    join_overlay: JoinOverlay | None = None
    _gang_events: dict[str, trio.Event]

    def _gang_event(self, job_id: str) -> trio.Event:
        events = self.__dict__.setdefault("_gang_events", {})
        return events.setdefault(job_id, trio.Event())

    async def _hold_for_gang(self, job: api.JobInfo, script: bytes | None) -> None:
        """An accepted slot waits for its start (bounded), then runs."""
        assert job.spec.gang is not None
        event = self._gang_event(job.job_id)
        wait_s = self.ctx.settings.jobs.gang_start_wait_s
        try:
            if not job.gang_members:
                with trio.move_on_after(wait_s):
                    await event.wait()
        finally:
            self._gang_events.pop(job.job_id, None)
        current = self.ctx.store.get_job(job.job_id) or job
        if current.state in api.TERMINAL_STATES:  # cancelled while it waited
            return
        if not current.gang_members:
            reason = (
                f"never started: the consumer's start of gang {job.spec.gang.gang_id} (its "
                f"members' peer ids) did not come within {wait_s:g} s"
            )
            log.info("job %s: %s", job.job_id, reason)
            self._finish(current, ExitStatus(exit_code=None, outcome="failed", reason=reason))
            return
        await self._run(current, None, script)

    def _gang_started(self, start: p.GangStart, consumer: str) -> p.Accepted | p.Refusal:
        job = self.ctx.store.get_job(start.job_id)
        if job is None or job.role != "provider" or job.consumer != consumer:
            return p.refusal(start.job_id, "no such job of yours")
        slot = job.spec.gang
        if slot is None or slot.gang_id != start.gang_id:
            return p.refusal(start.job_id, f"job {job.job_id} is no slot of gang {start.gang_id}")
        if job.gang_members:
            if job.gang_members == start.members:
                return p.Accepted(job_id=job.job_id)  # a repeat: started once only
            return p.refusal(start.job_id, "the gang was started already, with other members")
        if job.state in api.TERMINAL_STATES:
            return p.refusal(start.job_id, f"the slot ended ({job.state}): {job.reason}")
        why = members_problem(slot, start.members, self.ctx.identity.peer_id)
        if why:
            return p.refusal(start.job_id, why)
        self._save(msgspec.structs.replace(job, gang_members=start.members))
        self._gang_event(job.job_id).set()
        self._poke(job.job_id)
        return p.Accepted(job_id=job.job_id)

    def _watch_gang(self, executor: Executor, job: api.JobInfo, run: JobRun) -> None:
        async def joined(replica: JobRun) -> None:
            await self._join_gang(executor, job, replica)

        executor.watch_gang(run, joined)  # type: ignore[attr-defined]

    async def _join_gang(self, executor: Executor, job: api.JobInfo, replica: JobRun) -> None:
        """The replica's container joins the gang's overlay: its address ``.rank+1`` in the
        gang's /24, the members' by rank. The overlay ends with the container."""
        slot = job.spec.gang
        assert slot is not None
        if self.join_overlay is None:
            raise EngineError("overlay", "this provider carries no overlay")
        container_ref = getattr(executor, "container_ref", None)
        if container_ref is None:
            raise EngineError("overlay", "a gang's replica needs a container of its own")
        members = tuple(
            api.OverlayMember(peer_id=peer, address=address_of(slot.gang_id, rank))
            for rank, peer in enumerate(job.gang_members)
        )
        await self.join_overlay(
            api.OverlayJoin(
                job_id=slot.gang_id,
                container=container_ref(replica),
                subnet=subnet_of(slot.gang_id),
                address=address_of(slot.gang_id, slot.rank),
                members=members,
            )
        )
