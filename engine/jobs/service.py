"""The node's jobs: both roles, their commands, and the job protocol's stream handler.

Reading commands (list, show, logs, results of a finished job) work from the store alone, so
they answer even in a one-shot CLI engine; submitting and cancelling need the running node.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec
import trio

from engine import api
from engine.context import NodeContext
from engine.domain.charges import metered_units
from engine.errors import EngineError
from engine.jobs.consumer import ConsumerJobs
from engine.jobs.executors.base import Executor
from engine.jobs.joblog import MB, JobLogs, LogLimits
from engine.jobs.overlay_join import JobOverlays
from engine.jobs.provider import ProviderJobs
from engine.jobs.tunnel_consumer import ConsumerTunnels
from engine.ports import (
    ContainerHost,
    EscrowPort,
    JobData,
    MachinePort,
    NetworkPort,
    OfferView,
    OverlayCarriage,
    PeerLink,
)

log = logging.getLogger("nunet.jobs")

LOG_SWEEP_S = 3600.0  # besides after every job's end: the age rule needs no job to end


def _no_overlay() -> OverlayCarriage:
    raise EngineError("no_network", "the overlay needs the network: this engine runs without it")


async def _container_pid(executors: Mapping[str, Executor], ref: str) -> int:
    # The Docker executor's (by name: importing it here would load it for every command).
    container_pid = getattr(executors.get("docker"), "container_pid", None)
    if container_pid is None:
        raise EngineError(
            "invalid", 'the overlay joins Docker containers: add "docker" to [jobs] executors'
        )
    pid: int = await container_pid(ref)
    return pid


def build_executors(ctx: NodeContext, *, container_host: ContainerHost) -> dict[str, Executor]:
    """The executors [jobs] executors names; ``container_host``: the host's container engine and
    GPUs, as the Docker executor asks for them."""
    executors: dict[str, Executor] = {}
    for name in ctx.settings.jobs.executors:
        if name == "process":
            from engine.jobs.executors.process import ProcessExecutor

            process = ProcessExecutor(
                python=ctx.settings.jobs.process_python or sys.executable,
                sandbox_mode=ctx.settings.jobs.process_sandbox,
            )
            status = process.sandbox_status()
            required = ctx.settings.jobs.process_sandbox == "require"
            if status.usable:
                log.info("the process executor runs each job in a sandbox: %s", status.detail)
                executors[name] = process
                continue
            log.warning(
                "THE PROCESS EXECUTOR CANNOT SANDBOX JOBS HERE (%s): %s (jobs.executors, "
                "jobs.process_sandbox in config)",
                status.detail,
                'it is not offered, as jobs.process_sandbox = "require"'
                if required
                else "its jobs run as this user and can read what it can read; use it "
                "only on trusted local networks and for the demo",
            )
            if not required:  # required: neither advertised nor accepted
                executors[name] = process
        elif name == "docker":
            from engine.jobs.executors.docker import DockerExecutor, images_from_settings

            # The images onboard-ml pulled ([ml_images]), not the built-in defaults.
            images = images_from_settings(ctx.settings.ml_images.as_map())
            executors[name] = DockerExecutor(
                container_host=container_host, node_id=ctx.identity.peer_id, images=images
            )
        else:
            raise EngineError(
                "config", f"jobs.executors: unknown executor {name!r} (docker or process)"
            )
    return executors


class NodeJobs:
    """Both roles of the job protocol and their commands. ``network``: the node's network,
    built on first use; ``escrows``: the escrow of paid jobs (None: payments are off);
    ``capacity``: the machine's full capacity, what the provider's offer is cut from;
    ``machine``: what the provider reads of its machine and ``container_host``: what the Docker
    executor asks of its container engine and GPUs (both the resources room's facts)."""

    def __init__(
        self,
        ctx: NodeContext,
        network: Callable[[], NetworkPort],
        escrows: Callable[[], EscrowPort] | None,
        executors: dict[str, Executor] | None = None,
        capacity: Callable[[], api.Capacity] | None = None,
        *,
        machine: MachinePort,
        container_host: ContainerHost,
        overlay: Callable[[], OverlayCarriage] | None = None,
        data: Callable[[], JobData] | None = None,
    ) -> None:
        self.ctx = ctx
        if executors is None:
            executors = build_executors(ctx, container_host=container_host)
        settings = ctx.settings.jobs
        limits = LogLimits(
            job_bytes=settings.log_job_mb * MB,
            total_bytes=settings.log_total_mb * MB,
            keep_s=settings.log_keep_days * 86400.0,
        )
        # One set of logs for both roles: they share the jobs folder the sweep keeps in bounds.
        self.logs = JobLogs(ctx.paths.state_dir / "jobs", limits, ended=self._ended)
        self.provider = ProviderJobs(
            ctx,
            executors,
            network=network,
            escrows=escrows,
            logs=self.logs,
            capacity=capacity,
            machine=machine,
            data=data,
        )
        self.consumer = ConsumerJobs(ctx, network=network, escrows=escrows, logs=self.logs)
        # job forward / job shell (the provider's side: .provider.tunnels)
        self.tunnels = ConsumerTunnels(ctx, network)
        # A job's private network across providers (issue 25 §2): the network room carries it.
        self.overlays = JobOverlays(
            overlay or _no_overlay, functools.partial(_container_pid, executors)
        )
        # A gang's slot joins its overlay itself once its replica runs (provider_gang.py).
        self.provider.join_overlay = self.overlays.join

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.provider.serve)
            await nursery.start(self.consumer.serve)
            await nursery.start(self.tunnels.serve)
            await nursery.start(self.overlays.serve)
            nursery.start_soon(self._sweep_logs)
            task_status.started()

    def _ended(self, job_id: str) -> bool:
        job = self.ctx.store.get_job(job_id)
        return job is None or job.state in api.TERMINAL_STATES

    async def _sweep_logs(self) -> None:
        while True:
            self.logs.sweep()  # stats, and a tail read per removed log: quick, and no race
            await trio.sleep(LOG_SWEEP_S)

    def attach(self, link: PeerLink) -> None:
        """Called each time the network (re)starts: serve the job protocol on its host."""
        from engine.domain.tunnel_frames import TUNNEL_PROTOCOL
        from engine.jobs.protocol import JOB_PROTOCOL

        link.set_stream_handler(JOB_PROTOCOL, self.provider.handle)
        link.set_stream_handler(TUNNEL_PROTOCOL, self.provider.tunnels.handle)

    def offer(self) -> OfferView:
        return self.provider.offer()

    def job_totals(self, escrowed: Mapping[tuple[str, str], int] | None = None) -> dict[str, Any]:
        """What this node ran and bought, and the metered NTX of its ended jobs: the figure
        each job's own views show (issue 20 §9), its escrow's (the signed receipt's charge,
        ``escrowed`` by role and job id) where it has one, else its own record's
        (domain/charges.py ``metered_units``)."""
        escrowed = escrowed or {}
        totals: dict[str, Any] = {"jobs_run": 0, "cpu_mticks_run": 0.0, "jobs_bought": 0}
        run = bought = 0
        for job in self.ctx.store.list_jobs(states=api.TERMINAL_STATES, limit=100_000):
            units = escrowed.get((job.role, job.job_id))
            if units is None:
                units = metered_units(job)
            if job.metering is None and units is None:
                continue
            if job.role == "provider":
                totals["jobs_run"] += 1
                totals["cpu_mticks_run"] += job.metering.mticks if job.metering else 0.0
                run += units or 0
            else:
                totals["jobs_bought"] += 1
                bought += units or 0
        totals.update(metered_run_units=run, metered_bought_units=bought)
        return totals

    def commands(self) -> dict[type[api.Command], Callable[[Any], Awaitable[Any]]]:
        return {
            api.SubmitJob: self.consumer.submit,
            api.ResubmitJob: self.consumer.resubmit,
            api.ListJobs: self._list,
            api.GetJob: self._show,
            api.GetJobLogs: self._logs,
            api.GetJobUsage: self._usage,
            api.CancelJob: self.consumer.cancel,
            api.FetchJobResults: self.consumer.results,
            api.JobForward: self.tunnels.forward,
            api.JobForwardClose: self.tunnels.close_forward,
            api.ListForwards: self.tunnels.list_forwards,
            api.JobShell: self.tunnels.shell,
            api.StopJob: self.consumer.stop,
            api.DeleteJobResults: self.consumer.delete_results,
            api.OverlayJoin: self.overlays.join,
            api.OverlayLeave: self.overlays.leave,
            api.OverlayStatus: self.overlays.status,
        }

    async def _list(self, command: api.ListJobs) -> api.JobList:
        return api.JobList(jobs=tuple(self.ctx.store.list_jobs()))

    def _job(self, job_id: str) -> api.JobInfo:
        job = self.ctx.store.get_job(job_id.strip())
        if job is None:
            raise EngineError("not_found", f"no job {job_id!r} here; `nunet-tui job list`")
        return job

    async def _show(self, command: api.GetJob) -> api.JobInfo:
        job = self._job(command.job_id)
        if job.role == "provider" and (samples := self.provider.usage(job.job_id)):
            # A job running here: its latest live sample (not stored: it moves every few s).
            job = msgspec.structs.replace(job, usage=samples[-1])
        if job.state not in api.TERMINAL_STATES:  # through a relay or direct (issue 24)
            other = job.provider if job.role == "consumer" else job.consumer
            job = msgspec.structs.replace(job, path=self.consumer.path_to(other))
        if job.role == "consumer" and job.spec.gang is not None:
            job = msgspec.structs.replace(job, gang=self.consumer.gang_view(job))
        return job

    async def _usage(self, command: api.GetJobUsage) -> api.JobUsage:
        job = self._job(command.job_id)
        if job.role == "provider":
            samples = self.provider.usage(job.job_id)
            interval = self.ctx.settings.jobs.usage_interval_s
        else:  # the provider's own interval, as its last samples show it
            samples = self.consumer.usage(job.job_id)
            interval = round(samples[-1].at - samples[-2].at, 1) if len(samples) > 1 else 0.0
        return api.JobUsage(job_id=job.job_id, samples=samples, interval_s=max(interval, 0.0))

    async def _logs(self, command: api.GetJobLogs) -> api.JobLogs:
        job = self._job(command.job_id)
        joblog = (
            self.consumer.job_log(job.job_id)
            if job.role == "consumer"
            else self.provider.job_log(job.job_id)
        )
        lines = joblog.read(
            command.after_seq, max(1, min(command.limit, 50_000)), newest=command.newest
        )
        next_seq = lines[-1].seq if lines else command.after_seq
        done = job.state in api.TERMINAL_STATES and not joblog.read(next_seq, 1)
        return api.JobLogs(job_id=job.job_id, lines=tuple(lines), next_seq=next_seq, done=done)
