"""The provider's runs: starting an accepted job on its executor (with its spec's limits
and GPUs), following it while it runs (its log lines, live usage samples, checkpoints, the
oracle's liveness reports), ending it with its metering and signed receipt, cancelling or
stopping it for its consumer, and resuming the jobs a restart interrupted."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from pathlib import Path
from typing import Any

import msgspec
import trio

from engine import api
from engine.domain import safe_paths
from engine.domain.admission import max_minutes
from engine.domain.charges import metered_units
from engine.domain.fetch_policy import FetchPolicy
from engine.errors import EngineError
from engine.jobs import live_usage, runs
from engine.jobs import protocol as p
from engine.jobs.checkpoints import latest
from engine.jobs.executors.base import Executor, ExitStatus, JobRun, Limits, limits_for
from engine.jobs.log_events import LogEvents
from engine.jobs.provider_base import ProviderBase

log = logging.getLogger("nunet.jobs.provider")


class ProviderRuns(ProviderBase):
    """Jobs running here: started by a Confirm (provider_quotes.py) or a resume."""

    def _run_for(self, job: api.JobInfo) -> tuple[Executor, JobRun]:
        spec = job.spec
        executor = self.executors[job.executor]
        run = JobRun(
            job_id=job.job_id,
            spec=spec,
            workspace=self.job_path(job.job_id, "workspace"),
            limits=self._limits(job),
            node_id=self.ctx.identity.peer_id,
            gpus=self._spec_gpus(job, self._gpus_for(spec)),
            fetch_policy=FetchPolicy.from_settings(self.ctx.settings.jobs.fetch_allow_networks),
        )
        return executor, run

    def _limits(self, job: api.JobInfo) -> Limits:
        """What the job may use: its resource spec's cores, RAM and disk (a tier's maximums
        when it runs under NuNet's default specs), for at most its maximum time
        (``max_minutes``, what the lock covers); without one, a batch job gets twice its
        expected time and a service its expected time (what was quoted)."""
        spec = job.spec
        limits = (
            limits_for(spec, timeout_factor=1.0) if spec.kind == "service" else limits_for(spec)
        )
        limits = dataclasses.replace(limits, max_files=self.ctx.settings.jobs.max_files)
        resource = self._resource_of(job)
        if resource is not None:
            limits = dataclasses.replace(
                limits,
                memory_mb=resource.ram_mb,
                cpu_cores=float(resource.cpu_cores),
                disk_mb=resource.disk_mb or None,  # 0: the spec sells no particular disk
            )
        if spec.max_minutes is not None:
            limits = dataclasses.replace(limits, timeout_s=max(60.0, spec.max_minutes * 60))
        return limits

    def _spec_gpus(
        self, job: api.JobInfo, cards: tuple[api.GpuInfo, ...]
    ) -> tuple[api.GpuInfo, ...]:
        """A job under a provider-defined spec sees as many GPUs as the spec sells (those its
        custom resource regroups, when it names one), never every onboarded card."""
        resource = self._resource_of(job)
        if resource is None or not cards or resource.gpus <= 0:
            return cards
        if resource.gpu_resource is not None:
            book = self._machine.resource_book()
            custom = next((c for c in book.customs if c.name == resource.gpu_resource), None)
            if custom is not None and custom.from_gpus is not None:
                cards = tuple(c for c in cards if c.index in set(custom.from_gpus))
        return cards[: resource.gpus]

    async def _run(self, job: api.JobInfo, resume_from: Any, script: bytes | None = None) -> None:
        try:
            executor, run = self._run_for(job)
            checkpoints = self.job_path(job.job_id, "checkpoints")
        except EngineError as exc:  # its folder or GPUs are not what they were: never run
            log.warning("job %s cannot run: %s", job.job_id, exc.message)
            self._finish(job, ExitStatus(exit_code=None, outcome="failed", reason=exc.message))
            return
        if resume_from is not None:
            # The run the provider died in ends at the checkpoint this one starts from.
            job = self._save(
                msgspec.structs.replace(job, runs=runs.resuming(job, _taken_at(resume_from)))
            )
            if len(job.runs) >= p.MAX_RUNS:
                reason = f"resumed {len(job.runs) - 1} times: not resumed again"
                self._finish(job, ExitStatus(exit_code=None, outcome="interrupted", reason=reason))
                return
        self._logs.use(job.job_id)
        if job.spec.inputs:
            try:
                run = await self._inputs(job, run)
            except EngineError as exc:  # never started: nothing billed, the lock refunded
                log.info("job %s: inputs: %s", job.job_id, exc.message)
                reason = f"inputs: {exc.message}"
                self._finish(job, ExitStatus(exit_code=None, outcome="failed", reason=reason))
                return
        self._runs[job.job_id] = (executor, run)
        try:
            if resume_from is not None:
                await executor.restore(run, resume_from)
            await executor.prepare(run, script)
            if job.spec.subtasks:  # each replica's start and end goes into the record
                executor.watch_replicas(  # type: ignore[attr-defined]
                    run, functools.partial(self._replicas_changed, executor, run)
                )
            if job.spec.gang is not None:
                self._watch_gang(executor, job, run)
            await executor.start(run)
        except Exception as exc:
            message = exc.message if isinstance(exc, EngineError) else str(exc)
            log.info("job %s could not start: %s", job.job_id, message)
            self._finish(job, ExitStatus(exit_code=None, outcome="failed", reason=message))
            return
        now = time.time()
        job = self._save(
            msgspec.structs.replace(
                job,
                state="running",
                started_at=job.started_at or now,
                runs=runs.started(job.run_spans(), now),
                resumed_from=resume_from.number if resume_from is not None else job.resumed_from,
            )
        )
        interval = self.ctx.settings.jobs.checkpoint_interval_s
        if interval > 0:
            executor.start_checkpoints(  # type: ignore[attr-defined]
                run, checkpoints, interval, lambda c: self._checkpointed(job.job_id, c.number)
            )
        async with trio.open_nursery() as alive:
            if self._escrows is not None:
                # The oracle's own evidence that we are still here while a paid job runs.
                alive.start_soon(self._escrows().report_liveness, job.job_id)
            if self.ctx.settings.jobs.usage_interval_s > 0:
                alive.start_soon(self._sample_usage, executor, run)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump_logs, executor, run)
                status = await executor.wait(run)
            alive.cancel_scope.cancel()
        status = self._service_end(job, status)
        results = None
        notes: tuple[str, ...] = ()
        try:
            results = await executor.collect_results(run, self.job_dir(job.job_id))
            notes = results.skipped  # links, FIFOs... the job left in its outputs
        except Exception as exc:  # the job's outcome stands; the consumer learns why, in its log
            notes = (f"no results: {exc.message if isinstance(exc, EngineError) else exc}",)
        joblog, now = self.job_log(job.job_id), time.time()
        if written := joblog.append(
            api.JobLogLine(seq=joblog.last_seq + 1 + i, stream="system", text=note, at=now)
            for i, note in enumerate(notes)
        ):
            self.ctx.emit(api.JobLogEvent(at=now, job_id=job.job_id, lines=tuple(written)))
        current = self.ctx.store.get_job(job.job_id) or job
        if job.spec.publish_results and results is not None:
            current = msgspec.structs.replace(
                current, results_cid=await self._publish(job.job_id, results.path)
            )
        if job.spec.subtasks:
            current = msgspec.structs.replace(current, steps=_steps_of(executor, run))
        self._finish(current, status, executor.usage(run), results)

    def _watch_gang(self, executor: Executor, job: api.JobInfo, run: JobRun) -> None:
        """A gang's slot: its replica joins the gang's overlay (provider_gang.py)."""
        raise EngineError("job", "this provider cannot run a gang's slot")

    async def _inputs(self, job: api.JobInfo, run: JobRun) -> JobRun:
        """The job's inputs by CID (issue 26), fetched from its consumer first (then the DHT's
        providers), verified, and made ready to mount read-only; each said in its log. Before
        the run starts: fetching is not machine time."""
        if self._data is None:
            raise EngineError("inputs", "this provider has no data store to fetch inputs with")
        mounts: list[tuple[Path, str]] = []
        for item in job.spec.inputs:
            began = time.monotonic()
            source, size, cached = await self._data().materialize(item.cid, [job.consumer])
            if source.is_dir():
                target = item.path.rstrip("/")
            else:
                target = f"{item.path}{item.cid}" if item.path.endswith("/") else item.path
            where = safe_paths.inside(run.workspace, target, what="an input's path")
            where.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                where.mkdir(exist_ok=True)  # the mount point
            else:
                where.touch(exist_ok=True)
            took = "here already" if cached else f"fetched in {time.monotonic() - began:.1f} s"
            self._system_line(job.job_id, f"input {item.cid}: {size:,} bytes at {target} ({took})")
            mounts.append((source, target))
        return dataclasses.replace(run, inputs=tuple(mounts))

    async def _publish(self, job_id: str, archive: Path) -> str:
        """The results archive by CID (issue 26), said in the job's log; "" when it cannot be
        (the results are still fetched from us as always)."""
        if self._data is None:
            return ""
        try:
            cid = await self._data().publish(archive)
        except EngineError as exc:
            self._system_line(job_id, f"results not published: {exc.message}")
            return ""
        self._system_line(job_id, f"results published as {cid}")
        return cid

    def _system_line(self, job_id: str, text: str) -> None:
        joblog, now = self.job_log(job_id), time.time()
        if written := joblog.append(
            [api.JobLogLine(seq=joblog.last_seq + 1, stream="system", text=text, at=now)]
        ):
            self.ctx.emit(api.JobLogEvent(at=now, job_id=job_id, lines=tuple(written)))

    def _replicas_changed(self, executor: Executor, run: JobRun) -> None:
        """A replica of the job started or ended: its record (and followers) say so."""
        job = self.ctx.store.get_job(run.job_id)
        if job is not None and job.state not in api.TERMINAL_STATES:
            self._save(msgspec.structs.replace(job, steps=_steps_of(executor, run)))
            self._poke(run.job_id)

    def _service_end(self, job: api.JobInfo, status: ExitStatus) -> ExitStatus:
        """A service stopped by its consumer, or at its maximum time, ended normally."""
        if job.job_id in self._stopping:
            self._stopping.discard(job.job_id)
            return ExitStatus(status.exit_code, "completed", "stopped by the consumer")
        if job.spec.kind == "service" and status.outcome == "timeout":
            minutes = max_minutes(job.spec)
            return ExitStatus(
                status.exit_code,
                "completed",
                f"the service reached its maximum time ({minutes:g} min)",
            )
        return status

    def _checkpointed(self, job_id: str, number: int) -> None:
        job = self.ctx.store.get_job(job_id)
        running = self._runs.get(job_id)
        if job is not None and job.state == "running":
            # The time checkpoints held it frozen is not billed: kept with its run now, so a
            # run the provider dies in still leaves it out.
            ran = job.runs
            if running is not None:
                ran = runs.frozen(ran, running[0].usage(running[1]).frozen_s)
            self._save(msgspec.structs.replace(job, checkpoint=number, runs=ran))

    async def _sample_usage(self, executor: Executor, run: JobRun) -> None:
        """The job's live use, every ``usage_interval_s`` while it runs (live_usage.py)."""
        ring = self._usage.setdefault(run.job_id, live_usage.UsageRing())
        gpu_status = None
        if run.gpus:
            gpu_status = self._machine.gpu_status()
        await live_usage.watch(
            functools.partial(executor.reading, run),
            ring,
            self.ctx.settings.jobs.usage_interval_s,
            ram_limit_mb=run.limits.memory_mb,
            gpus=run.gpus,
            gpu_status=gpu_status,
            on_sample=lambda _: self._poke(run.job_id),
        )

    def usage(self, job_id: str) -> tuple[api.UsageSample, ...]:
        """A job running here: its recent live samples, oldest first (none once it ended)."""
        ring = self._usage.get(job_id)
        return ring.all() if ring is not None else ()

    def _poke(self, job_id: str) -> None:
        """Wake the job's followers: something new to send."""
        self._changed.setdefault(job_id, trio.Event()).set()
        self._changed[job_id] = trio.Event()

    async def _pump_logs(self, executor: Executor, run: JobRun) -> None:
        """Executor lines to the job's log file, in batches of whatever arrived meanwhile."""
        joblog = self.job_log(run.job_id)
        # Each run (the first, or one resumed after a restart) numbers its lines from 0; the
        # job's log goes on from where the last run's ended.
        base = joblog.last_seq + 1
        # Views on this node get the lines as events too, batched (log_events.py).
        events = LogEvents(self.ctx.emit, run.job_id)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(events.run)
            async for batch in executor.log_batches(run, 0):
                events.add(
                    joblog.append(
                        api.JobLogLine(seq=base + ln.seq, stream=ln.stream, text=ln.text, at=ln.at)
                        for ln in batch
                    )
                )
                self._poke(run.job_id)
                await trio.sleep(0)  # a job that never stops printing must not starve the node
            events.close()

    def _finish(
        self,
        job: api.JobInfo,
        status: ExitStatus,
        usage: Any = None,
        results: Any = None,
    ) -> None:
        metering = None
        finished_at = time.time()
        # A run that is not live here (the provider died in it, and it is not resumed) ended
        # at the last moment it was known to run: its record's last save.
        ran = job.run_spans()
        if usage is not None:
            ran = runs.frozen(ran, usage.frozen_s)
        ran = runs.ended(ran, finished_at if job.job_id in self._runs else job.updated_at)
        # Its tunnels close with it; the bytes they carried are its network traffic (a
        # container has no other route: network_mode none).
        self.tunnels.close_job(job.job_id)
        if usage is not None:
            # The cost is the receipt's charge (issue 20 §9: price x the sampled wall time,
            # without the minimum charge or the cap, said another figure than the escrow).
            charge = metered_units(msgspec.structs.replace(job, finished_at=finished_at, runs=ran))
            usage = _with_tunnel_bytes(usage, self.tunnels.take_traffic(job.job_id), job.executor)
            metering = api.JobMetering(
                wall_s=usage.wall_s,
                cpu_s=usage.cpu_s,
                mticks=usage.mticks,
                ram_mb_s=usage.ram_mb_s,
                peak_ram_mb=usage.peak_ram_mb,
                net_rx_bytes=usage.net_rx_bytes,
                net_tx_bytes=usage.net_tx_bytes,
                gpu_s=usage.gpu_s,
                cost_units=charge,
            )
        ended = msgspec.structs.replace(
            job,
            state=status.outcome,
            reason=status.reason,
            exit_code=status.exit_code,
            finished_at=finished_at,
            runs=ran,
            metering=metering,
            log_lines=self._log_lines(job.job_id),
            results_sha256=results.sha256 if results else "",
            results_size=results.size if results else 0,
            results_dir=str(results.path) if results else "",
        )
        if self._escrows is not None:
            # Signed before the end is announced: the last Update carries it to the consumer.
            receipt = self._escrows().provider_receipt(ended)
            ended = msgspec.structs.replace(ended, receipt=receipt)
        self._save(ended)
        self._release(job.job_id)

    def _release(self, job_id: str) -> None:
        """A finished job keeps nothing in memory: its executor state (with its log buffer,
        up to ~47 MB of lines) is dropped, and its log is closed once others are read; its
        files (log, results, checkpoints) stay on disk, where `job logs` reads them."""
        running = self._runs.pop(job_id, None)
        if running is not None:
            executor, run = running
            executor.release(run)
        self._logs.done(job_id)
        self._usage.pop(job_id, None)
        self._changed.pop(job_id, None)  # followers still reading hold their own

    def _log_lines(self, job_id: str) -> int:
        try:
            return len(self.job_log(job_id))
        except EngineError:  # an unsafe id has no log on disk, and never gets one
            return 0

    async def _resume(self, job: api.JobInfo) -> None:
        try:
            checkpoint = latest(self.job_path(job.job_id, "checkpoints"))
            if job.executor in self.executors:
                executor, run = self._run_for(job)
                kill_orphan = getattr(executor, "kill_orphan", None)
                if kill_orphan is not None and kill_orphan(run):
                    log.info("ended job %s's processes left over from a crash", job.job_id)
        except EngineError as exc:  # e.g. a job stored by an older version with an unsafe id
            log.warning("job %s cannot resume: %s", job.job_id, exc.message)
            self._finish(job, ExitStatus(exit_code=None, outcome="interrupted", reason=exc.message))
            return
        if job.spec.subtasks:
            # Its replicas' spans so far are its record's (they bill); a resumed run would
            # start its steps again over them.
            reason = "the provider restarted; a job with steps is not resumed from a checkpoint"
            self._finish(job, ExitStatus(exit_code=None, outcome="interrupted", reason=reason))
            return
        if checkpoint is None or job.executor not in self.executors:
            reason = "the provider restarted and the job had no checkpoint to resume from"
            self._finish(job, ExitStatus(exit_code=None, outcome="interrupted", reason=reason))
            return
        log.info("resuming job %s from checkpoint %d", job.job_id, checkpoint.number)
        await self._run(job, checkpoint)

    async def _cancel(self, cancel: p.Cancel, consumer: str) -> p.Accepted | p.Refusal:
        job = self.ctx.store.get_job(cancel.job_id)
        if job is None or job.consumer != consumer:
            return p.Refusal(job_id=cancel.job_id, reason="no such job of yours")
        if cancel.stop and job.spec.kind != "service":
            return p.Refusal(
                job_id=cancel.job_id,
                reason="job stop ends service jobs; a batch job is ended with job cancel",
            )
        if job.state in api.TERMINAL_STATES:
            return p.Accepted(job_id=cancel.job_id)
        running = self._runs.get(cancel.job_id)
        if running is not None:
            executor, run = running
            if cancel.stop:
                self._stopping.add(cancel.job_id)
            reason = "stopped by the consumer" if cancel.stop else "cancelled by the consumer"
            if self._nursery is None:
                await executor.cancel(run, reason)
            elif cancel.job_id not in self._cancelling:
                # Answered now, stopped in the background: a container's stop (its grace
                # time, a thaw, a loaded Docker) may take longer than the consumer waits
                # for an answer; the end reaches it in the job's Updates.
                self._cancelling.add(cancel.job_id)
                self._nursery.start_soon(self._stop_job, executor, run, reason)
        else:
            self._finish(job, ExitStatus(None, "cancelled", "cancelled by the consumer"))
        return p.Accepted(job_id=cancel.job_id)

    async def _stop_job(self, executor: Executor, run: JobRun, reason: str) -> None:
        try:
            await executor.cancel(run, reason)
        except Exception:  # the run's own supervisor still ends it; this is said, not raised
            log.exception("job %s: stopping it failed", run.job_id)
        finally:
            self._cancelling.discard(run.job_id)


def _steps_of(executor: Executor, run: JobRun) -> tuple[api.StepInfo, ...]:
    from engine.jobs.executors.steps import step_infos

    replicas = executor.replicas(run)  # type: ignore[attr-defined]
    return step_infos((step.name for step in run.spec.subtasks), replicas)


def _with_tunnel_bytes(usage: Any, traffic: tuple[int, int] | None, executor: str) -> Any:
    """``usage`` with the tunnels' bytes in its network figures. A container has no network
    but its tunnels, so its figures are exact (0 without one); a local process may use the
    network directly, so without a tunnel its figures stay unknown (None)."""
    if traffic is None and executor != "docker":
        return usage
    into, out = traffic or (0, 0)
    return dataclasses.replace(
        usage,
        net_rx_bytes=(usage.net_rx_bytes or 0) + into,
        net_tx_bytes=(usage.net_tx_bytes or 0) + out,
    )


def _taken_at(checkpoint: Any) -> float:
    """When a checkpoint was taken: its file's last write (the snapshot's end)."""
    try:
        return float(checkpoint.path.stat().st_mtime)
    except OSError:
        return time.time()
