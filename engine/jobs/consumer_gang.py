"""A distributed step's gang, placed by its consumer (issue 25 §2; docs/cluster-overlay.md).

The gang is N ordinary jobs, one a slot, each on its own provider and carrying its slot
(``JobSpec.gang``: gang id, rank, world size), so quotes, locks, Confirms, metering,
receipts and settlement are each job's usual paths. All or none: every slot is quoted,
locked and accepted before any starts; a slot that finds no provider cancels those placed
(their locks come back by the usual rules: a job that never ran costs nothing). Then each
slot's provider gets the ``GangStart`` (the members' peer ids by rank) and runs its replica.
A slot that ends without completing fails the gang: the consumer cancels the others, each
provider paid its own machine time."""

from __future__ import annotations

import logging
import secrets

import msgspec
import trio

from engine import api
from engine.domain.gang import gang_size, slot_spec
from engine.domain.matching import NoMatch
from engine.domain.spec import JobSpec
from engine.errors import EngineError
from engine.identity import short_peer_id
from engine.jobs import protocol as p
from engine.jobs.consumer_base import _why
from engine.jobs.consumer_follow import ConsumerFollow

log = logging.getLogger("nunet.jobs.consumer")

# A slot in these states was never accepted by its provider: its gang was not placed whole.
UNPLACED = ("pending", "confirming", "queued", "refused")
# A slot that ended so (placed, then not completed) fails its gang.
FAILED_ENDS = tuple(state for state in api.TERMINAL_STATES if state not in ("completed", *UNPLACED))
START_TRIES = 3  # a GangStart lost on the way is sent again (a repeat is harmless)
START_RETRY_S = 2.0  # then 4 s: well inside a held slot's bound ([jobs] gang_start_wait_s)
CANCEL_GANG_S = 60.0  # for the slots' cancels when the submit itself is cancelled


class ConsumerGang(ConsumerFollow):
    async def _offer_to(
        self,
        command: api.SubmitJob,
        began: float,
        spec: JobSpec,
        candidates: list[str],
        refusals: list[tuple[str, str]],
        job_id: str,
    ) -> api.JobInfo | None:
        raise NotImplementedError  # consumer.py

    async def _end(self, job_id: str, *, stop: bool) -> api.JobInfo:
        raise NotImplementedError  # consumer.py

    def gang_of(self, job: api.JobInfo) -> list[api.JobInfo]:
        """The consumer's jobs of ``job``'s gang, by rank (just ``job`` when not a gang's)."""
        slot = job.spec.gang
        if slot is None:
            return [job]
        slots = [
            other
            for other in self.ctx.store.list_jobs(limit=100_000)
            if other.role == "consumer"
            and other.spec.gang is not None
            and other.spec.gang.gang_id == slot.gang_id
        ]
        return sorted(slots, key=lambda other: other.spec.gang.rank if other.spec.gang else 0)

    def gang_view(self, job: api.JobInfo) -> tuple[api.GangMember, ...]:
        """``job``'s gang as `job show` lists it: each rank, its job, provider and state."""
        return tuple(
            api.GangMember(
                rank=slot.spec.gang.rank if slot.spec.gang else 0,
                job_id=slot.job_id,
                provider=slot.provider,
                state=slot.state,
                reason=slot.reason,
            )
            for slot in self.gang_of(job)
        )

    async def _submit_gang(
        self,
        command: api.SubmitJob,
        began: float,
        spec: JobSpec,
        candidates: list[str],
        refusals: list[tuple[str, str]],
    ) -> api.JobInfo:
        gang_id = secrets.token_hex(6)
        placed: list[api.JobInfo] = []
        try:
            return await self._place_gang(
                command, began, spec, candidates, refusals, gang_id, placed
            )
        except trio.Cancelled:
            # The submit itself was cancelled midway: no slot placed so far is left held.
            with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_GANG_S):
                await self._cancel_gang(placed, f"gang {gang_id}: its submit was interrupted")
            raise

    async def _place_gang(
        self,
        command: api.SubmitJob,
        began: float,
        spec: JobSpec,
        candidates: list[str],
        refusals: list[tuple[str, str]],
        gang_id: str,
        placed: list[api.JobInfo],
    ) -> api.JobInfo:
        world = gang_size(spec)
        for rank in range(world):
            free = [c for c in candidates if c not in {job.provider for job in placed}]
            self._progress(
                command, began, "matching", f"gang {gang_id}: placing rank {rank} of {world}"
            )
            job = await self._offer_to(
                command, began, slot_spec(spec, gang_id, rank), free, refusals, secrets.token_hex(6)
            )
            if job is None or job.state != "accepted":
                if job is not None:
                    placed.append(job)
                why = (
                    f"rank {rank}: provider {short_peer_id(job.provider)} gave no final answer "
                    "in time"
                    if job is not None
                    else f"rank {rank}: no provider took it"
                )
                await self._cancel_gang(placed, f"gang {gang_id} not placed: {why}")
                if job is None:
                    raise NoMatch(refusals)
                raise EngineError(
                    "gang", f"gang {gang_id} not placed ({why}): its {len(placed)} jobs cancelled"
                )
            placed.append(job)
        members = tuple(job.provider for job in placed)
        for job in placed:
            answer, _refused = await self._start_slot(job, gang_id, members)
            if answer:
                await self._cancel_gang(placed, f"gang {gang_id} not started: {answer}")
                raise EngineError(
                    "gang", f"gang {gang_id} not started ({answer}): its jobs are cancelled"
                )
        self._progress(command, began, "accepted", f"gang {gang_id}: {world} slots started")
        return self.ctx.store.get_job(placed[0].job_id) or placed[0]

    async def _start_slot(
        self, job: api.JobInfo, gang_id: str, members: tuple[str, ...]
    ) -> tuple[str, bool]:
        """Send the slot its ``GangStart`` (kept first: a restart knows it was started): ("",
        False) once accepted, else why not and whether the provider refused it (not merely
        unreachable)."""
        job = self._save(msgspec.structs.replace(job, gang_members=members))
        why = ""
        for attempt in range(START_TRIES):
            if attempt:  # a link that just dropped (or a network still starting) gets time
                await trio.sleep(START_RETRY_S * attempt)
            try:
                answer = await self._ask(
                    self._service(),
                    job.provider,
                    p.GangStart(job_id=job.job_id, gang_id=gang_id, members=members),
                )
            except Exception as exc:  # no stream, a reset, no answer: sent again
                why = f"provider {short_peer_id(job.provider)} unreachable: {_why(exc)}"
                continue
            if isinstance(answer, p.Accepted):
                return "", False
            if isinstance(answer, p.Refusal):
                return f"provider {short_peer_id(job.provider)} refused: {answer.reason}", True
            why = "the provider answered the start with something else"
        return why, False

    async def _cancel_gang(self, slots: list[api.JobInfo], reason: str) -> None:
        """End every slot not ended yet (each by its usual cancel: its lock's refund)."""
        for slot in slots:
            current = self.ctx.store.get_job(slot.job_id) or slot
            if current.state in api.TERMINAL_STATES:
                continue
            log.info("%s: cancelling slot %s", reason, current.job_id)
            try:
                await self._end(current.job_id, stop=False)
            except EngineError as exc:  # its follow goes on; the provider's own bound ends it
                log.info("gang slot %s: not cancelled yet: %s", current.job_id, exc.message)

    async def resume_gangs(self) -> None:
        """After a restart: each gang with slots not ended is started again when it was
        placed whole (every rank accepted or further: the start, sent again, is harmless to a
        slot that has it), else its placement was cut short and its slots are cancelled."""
        gangs: dict[str, list[api.JobInfo]] = {}
        for job in self.ctx.store.list_jobs(limit=100_000):
            if job.role == "consumer" and job.spec.gang is not None:
                gangs.setdefault(job.spec.gang.gang_id, []).append(job)
        for gang_id, slots in gangs.items():
            slots.sort(key=lambda job: job.spec.gang.rank if job.spec.gang else 0)
            open_slots = [job for job in slots if job.state not in api.TERMINAL_STATES]
            if not open_slots:
                continue
            world = open_slots[0].spec.gang.world_size if open_slots[0].spec.gang else 0
            placed = len(slots) == world and all(job.state not in UNPLACED for job in slots)
            if not placed:
                await self._cancel_gang(open_slots, f"gang {gang_id}: a restart cut its placement")
                continue
            failed = next((job for job in slots if job.state in FAILED_ENDS), None)
            if failed is not None:  # ended while we were away: the gang has failed
                await self._slot_ended(failed)
                continue
            members = tuple(job.provider for job in slots)
            for job in open_slots:
                if job.state != "accepted":
                    continue  # running: it had its start
                why, refused = await self._start_slot(job, gang_id, members)
                # Refused: the gang cannot form. Unreachable: its follow and the provider's
                # bound end it if it stays so (a cancel would not get through either).
                if refused:
                    await self._cancel_gang(open_slots, f"gang {gang_id} not started: {why}")
                    break

    async def _slot_ended(self, job: api.JobInfo) -> None:
        """A gang's slot ended: when not completed, the gang has failed: its other slots are
        cancelled (the provider of each is paid its own machine time by the usual rules)."""
        slot = job.spec.gang
        if slot is None or job.state == "completed":
            return
        others = [
            other
            for other in self.gang_of(job)
            if other.job_id != job.job_id and other.state not in api.TERMINAL_STATES
        ]
        if not others:
            return
        why = f"gang {slot.gang_id} failed: rank {slot.rank} ({job.job_id}) ended {job.state}"
        if job.reason:
            why += f": {job.reason}"
        log.info("%s; cancelling its %d other slots", why, len(others))
        with trio.CancelScope(shield=True):
            await self._cancel_gang(others, why)
