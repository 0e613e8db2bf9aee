"""A job's steps and their replicas (issue 25 §1), run by any executor.

A job with ``subtasks`` runs each step in turn in its one workspace; a step's replicas run at
once, each as a run of its own on the same executor (a container, a process group), with
REPLICA_INDEX and REPLICAS in its environment. A replica that does not complete ends its step:
its siblings are stopped, later steps never start, and the job ends with that step and
replica named. Each replica's lines reach the job's log tagged ``[step#i] `` (i from 1), and
its own span (started, ended, frozen) is what bills (oracle_client/billing.py: one subtask
per step, one replica each); a replica that never started has none.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import msgspec
import trio

from engine.domain.gang import gang_command, gang_env

if TYPE_CHECKING:
    from engine import api
    from engine.jobs.executors.base import BaseExecutor, ExitStatus, JobRun, Outcome, RunState
    from engine.jobs.metering import Meter, Usage

ReplicaState = Literal["waiting", "running", "done", "failed", "stopped"]
# A replica's own log, drained at once into the job's: small, so 64 replicas cost little.
REPLICA_LOG_LINES = 10_000
REPLICA_LOG_BYTES = 1 << 20


@dataclass
class Replica:
    """One replica of one step: its run, and what became of it (wall clock, POSIX s)."""

    step: int  # 0-based
    index: int  # 0-based: REPLICA_INDEX
    count: int  # the step's replicas: REPLICAS
    name: str  # the step's
    run: JobRun
    state: ReplicaState = "waiting"
    started_at: float | None = None
    ended_at: float | None = None
    frozen_s: float = 0.0
    cpu_s: float = 0.0
    exit_code: int | None = None
    reason: str = ""
    distributed: bool = False  # a gang's replica: joins the gang's overlay once started

    @property
    def tag(self) -> str:
        return f"{self.name}#{self.index + 1}"


def replicas_of(run: JobRun) -> list[Replica]:
    """Every replica of every step of ``run``, waiting, each with a run of its own: the job's
    workspace and limits, its own id (``job.2.0``: step 2, replica 0), and its environment."""
    spec = run.spec
    replicas = []
    for number, step in enumerate(spec.subtasks):
        indexes: Iterable[int] = range(step.replicas)
        gang: dict[str, str] = {}
        if step.distributed and spec.gang is not None:
            # A gang's slot runs its own rank's replica only (issue 25 §2): the others run
            # on the gang's other providers.
            indexes = (spec.gang.rank,)
            gang = gang_env(spec.gang)
        for index in indexes:
            env = {
                **spec.env,
                "REPLICA_INDEX": str(index),
                "REPLICAS": str(step.replicas),
                **gang,
            }
            own = msgspec.structs.replace(spec, env=env, subtasks=(), gang=None)
            tag = f"{number + 1}.{index}"
            child = dataclasses.replace(run, job_id=f"{run.job_id}.{tag}", spec=own, replica=tag)
            replica = Replica(number, index, step.replicas, step.name, child)
            replica.distributed = bool(gang)
            replicas.append(replica)
    return replicas


def entry_of(parent: RunState, replica: Replica) -> tuple[str, tuple[str, ...] | None]:
    """What a replica runs: (its script relative to the workspace, or a command's words)."""
    step = parent.run.spec.subtasks[replica.step]
    if step.command is not None:
        # Split as a shell splits words, run without one: images need no shell (the test
        # image has none), and a command means the same in a container and in a sandbox.
        return parent.entry, tuple(shlex.split(step.command))
    if step.script is not None:
        root = "src/" if parent.run.spec.git is not None else ""
        return f"{root}{step.script}", None
    return parent.entry, None


async def run_steps(executor: BaseExecutor, parent: RunState) -> None:
    """Each step in turn, until one fails, the job is stopped, or its time is up; then the
    job's status (``executor._finish``)."""
    from engine.jobs.executors.base import ExitStatus

    run = parent.run
    status: ExitStatus | None = None
    try:
        with trio.move_on_after(run.limits.timeout_s) as scope:
            for number in range(len(run.spec.subtasks)):
                if parent.stop is not None:
                    break
                status = await _run_step(executor, parent, number)
                if status is not None:
                    break
        if scope.cancelled_caught:
            reason = executor._timeout_reason(run)
            with trio.CancelScope(shield=True):
                await stop_replicas(executor, parent, "timeout", reason)
            _close_open(parent, "failed", reason)
            status = ExitStatus(None, "timeout", reason)
        if parent.stop is not None:
            status = ExitStatus(None, *parent.stop)
        parent.logs.flush()
        executor._finish(parent, status or ExitStatus(0, "completed", ""))
    finally:
        if not parent.done.is_set():
            _close_open(parent, "stopped", "the provider shut down")
            executor._finish(parent, ExitStatus(None, "interrupted", "the provider shut down"))


def _close_open(parent: RunState, state: ReplicaState, reason: str) -> None:
    """Replicas whose own end was never seen (their step was cancelled: the job's time ran
    out, the provider shut down) end now, with the job's reason."""
    now = time.time()
    for replica in parent.replicas:
        if replica.state == "running":
            replica.state, replica.ended_at, replica.reason = state, now, reason
    parent.notify()


async def _run_step(executor: BaseExecutor, parent: RunState, number: int) -> ExitStatus | None:
    """The step's replicas, all at once; the status of the first that did not complete
    (its siblings then stopped), or None."""
    failed: list[tuple[Replica, ExitStatus]] = []
    replicas = [r for r in parent.replicas if r.step == number]
    async with trio.open_nursery() as nursery:
        for replica in replicas:
            nursery.start_soon(_run_replica, executor, parent, replica, failed)
    if not failed:
        return None
    from engine.jobs.executors.base import ExitStatus

    replica, status = failed[0]
    where = f"step {replica.name!r} replica {replica.index + 1}/{replica.count}"
    return ExitStatus(status.exit_code, status.outcome, f"{where}: {status.reason}".rstrip(": "))


async def _run_replica(
    executor: BaseExecutor,
    parent: RunState,
    replica: Replica,
    failed: list[tuple[Replica, ExitStatus]],
) -> None:
    from engine.errors import EngineError
    from engine.jobs.executors.base import ExitStatus
    from engine.jobs.logbuffer import LogBuffer

    child = executor._new_state(replica.run)
    child.logs = LogBuffer(max_lines=REPLICA_LOG_LINES, max_bytes=REPLICA_LOG_BYTES)
    child.replica = True
    child.entry, child.command = entry_of(parent, replica)
    if replica.distributed:  # it waits for the gang's network its provider gives it
        child.command = gang_command(
            child.command or ("python3", "-u", f"/workspace/{child.entry}")
        )
    if parent.stop is not None:
        return
    try:
        await executor._start_one(replica.run)
    except Exception as exc:
        message = exc.message if isinstance(exc, EngineError) else str(exc)
        status = ExitStatus(None, "failed", f"did not start: {message}")
        _ended(parent, replica, status, 0.0)
        await _failed(executor, parent, replica, status, failed)
        return
    replica.state, replica.started_at = "running", time.time()
    parent.notify()
    if parent.stop is not None:  # stopped while it was starting
        await executor._stop_one(child, *parent.stop)
    elif replica.distributed and parent.on_gang_start is not None:
        try:
            await parent.on_gang_start(replica.run)
        except Exception as exc:  # no overlay: the replica cannot reach its gang
            message = exc.message if isinstance(exc, EngineError) else str(exc)
            await executor._stop_one(child, "failed", f"the gang's overlay: {message}")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump, parent, child, replica.tag)
        status = await executor.wait(replica.run)
    usage = child.meter.usage()
    replica.frozen_s = usage.frozen_s
    _ended(parent, replica, status, usage.cpu_s)
    if status.outcome != "completed" and parent.stop is None:
        await _failed(executor, parent, replica, status, failed)


async def _failed(
    executor: BaseExecutor,
    parent: RunState,
    replica: Replica,
    status: ExitStatus,
    failed: list[tuple[Replica, ExitStatus]],
) -> None:
    """The first replica of a step to fail stops its siblings (the step has failed)."""
    failed.append((replica, status))
    if len(failed) == 1:
        why = f"{replica.tag} of step {replica.name!r} failed"
        await stop_replicas(executor, parent, "cancelled", why, keep_stop=True)


def _ended(parent: RunState, replica: Replica, status: ExitStatus, cpu_s: float) -> None:
    replica.ended_at = time.time() if replica.started_at is not None else None
    replica.exit_code, replica.reason, replica.cpu_s = status.exit_code, status.reason, cpu_s
    if status.outcome == "completed":
        replica.state = "done"
    elif status.outcome == "cancelled" and replica.started_at is not None:
        replica.state = "stopped"
    else:
        replica.state = "failed"
    parent.notify()


async def _pump(parent: RunState, child: RunState, tag: str) -> None:
    """The replica's lines into the job's log, tagged."""
    async for batch in child.logs.follow_batches(0):
        for line in batch:
            parent.logs.append(line.stream, f"[{tag}] {line.text}", line.at)


async def stop_replicas(
    executor: BaseExecutor,
    parent: RunState,
    outcome: Outcome,
    reason: str,
    *,
    keep_stop: bool = False,
) -> None:
    """Stop every replica running now (all at once). ``keep_stop``: a sibling failed; the job
    is not stopped, only this step's other replicas."""
    if not keep_stop:
        parent.stop = (outcome, reason)
    live = [
        executor._runs[r.run.job_id]
        for r in parent.replicas
        if r.state == "running" and r.run.job_id in executor._runs
    ]
    async with trio.open_nursery() as nursery:
        for child in live:
            if not child.done.is_set():
                nursery.start_soon(executor._stop_one, child, outcome, reason)


def summed(own: Usage, replicas: list[Usage]) -> Usage:
    """A job's usage from its replicas': its own wall and frozen time (the job's), their CPU,
    MTicks, MB-seconds, GPU seconds and bytes summed, their highest peak of RAM."""
    nets_rx = [u.net_rx_bytes for u in replicas if u.net_rx_bytes is not None]
    nets_tx = [u.net_tx_bytes for u in replicas if u.net_tx_bytes is not None]
    return dataclasses.replace(
        own,
        cpu_s=round(sum(u.cpu_s for u in replicas), 3),
        mticks=round(sum(u.mticks for u in replicas), 1),
        ram_mb_s=round(sum(u.ram_mb_s for u in replicas), 1),
        peak_ram_mb=max((u.peak_ram_mb for u in replicas), default=0.0),
        net_rx_bytes=sum(nets_rx) if nets_rx else None,
        net_tx_bytes=sum(nets_tx) if nets_tx else None,
        gpu_s=round(sum(u.gpu_s for u in replicas), 3),
        samples=sum(u.samples for u in replicas),
    )


def summed_reading(meters: Iterable[tuple[Meter, bool]]) -> tuple[float, float, float] | None:
    """(latest time, CPU seconds of every replica so far, RAM of the running ones): the
    CPU figure only grows, as a live reading's must (live_usage.py takes its differences)."""
    at, cpu, ram, any_reading = 0.0, 0.0, 0.0, False
    for meter, running in meters:
        reading = meter.reading()
        cpu += meter.cpu_s
        if reading is None:
            continue
        any_reading = True
        at = max(at, reading[0])
        ram += reading[2] if running else 0.0
    return (at, cpu, ram) if any_reading else None


def step_infos(spec_steps: Iterable[str], replicas: list[Replica]) -> tuple[api.StepInfo, ...]:
    """The job's steps as its record keeps them (api.StepInfo), replicas in order."""
    from engine import api

    return tuple(
        api.StepInfo(
            name=name,
            replicas=tuple(
                api.ReplicaInfo(
                    state=r.state,
                    started_at=r.started_at,
                    ended_at=r.ended_at,
                    frozen_s=round(r.frozen_s, 3),
                    exit_code=r.exit_code,
                    reason=r.reason[:500],
                )
                for r in replicas
                if r.step == number
            ),
        )
        for number, name in enumerate(spec_steps)
    )
