"""One interface for running a job, whatever runs it (a container, a local process).

The life of a run: ``prepare`` (code into the workspace, dependencies installed: the only step
that may use the network) -> ``start`` -> ``logs`` (live, from the first line) and ``wait``
(the ExitStatus) -> ``collect_results``. ``cancel`` ends it early; ``checkpoint`` snapshots the
workspace while it runs and ``restore`` puts a snapshot back before a new ``start``.

Executors run their background work (log pumps, samplers, the timeout, periodic checkpoints)
in their own nursery: ``await nursery.start(executor.serve)`` once, or ``async with
running(executor)`` in tests. Leaving ``serve`` stops every run it still has (outcome
"interrupted": the provider shut down).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal, Protocol
from urllib.parse import urlsplit

import trio

from engine.api import GpuInfo
from engine.domain import safe_paths
from engine.domain.fetch_policy import FetchPolicy
from engine.domain.spec import FRAMEWORKS, JobSpec
from engine.domain.tiers import estimate_resource
from engine.errors import EngineError
from engine.jobs.checkpoints import Checkpoint
from engine.jobs.executors import steps
from engine.jobs.logbuffer import LogBuffer, LogLine
from engine.jobs.metering import Meter, Usage
from engine.jobs.results import ResultArchive

__all__ = [
    "Checkpoint",
    "Executor",
    "ExitStatus",
    "JobRun",
    "Limits",
    "LogLine",
    "Outcome",
    "ResultArchive",
    "limits_for",
]

Outcome = Literal["completed", "failed", "oom", "timeout", "cancelled", "interrupted"]
TIMEOUT_FACTOR = 2.0  # a job may run this many times its expected time
MIN_TIMEOUT_S = 60.0
DEFAULT_MAX_FILES = 100_000  # [jobs] max_files (engine/config.py)
log = logging.getLogger("nunet.jobs.executors")


@dataclass(frozen=True)
class Limits:
    memory_mb: int
    cpu_cores: float
    timeout_s: float
    pids: int = 512
    tmp_mb: int = 512
    max_result_bytes: int = 1 << 30
    disk_mb: int | None = None  # the workspace's bound, from the spec (disk_quota.py)
    # Files and folders the workspace may hold (the provider's jobs.max_files; None: any).
    max_files: int | None = DEFAULT_MAX_FILES


UNFREEZE_S = 60.0  # the longest a resume after a checkpoint may take (dockerd under load)
# Ends a provider's jobs when the provider dies (SIGKILL included): run by path, with -I.
ORPHAN_GUARD = Path(__file__).with_name("orphan_guard.py")
_lifeline: tuple[int, int, int] | None = None  # (the pid that made it, read end, write end)
_lifeline_lock = threading.Lock()


def provider_lifeline() -> int:
    """The read end of this process's lifeline, for orphan_guard.py (pass it with pass_fds).

    A pipe nobody writes: its write end, close-on-exec, is held by this process alone, so
    the read end sees EOF exactly when this process ends, however it ends, and whichever of
    its threads started the reader. (``PR_SET_PDEATHSIG`` fired when the *thread* that
    started the guard exited: trio starts processes from worker threads that end after 10
    idle seconds, and every process job was killed then.) Made anew in a forked child."""
    global _lifeline
    with _lifeline_lock:
        if _lifeline is None or _lifeline[0] != os.getpid():
            read_end, write_end = os.pipe()  # both close-on-exec (PEP 446)
            _lifeline = (os.getpid(), read_end, write_end)
        return _lifeline[1]


def limits_for(
    spec: JobSpec, *, timeout_factor: float = TIMEOUT_FACTOR, min_timeout_s: float = MIN_TIMEOUT_S
) -> Limits:
    """The tier's maximums as enforced limits; timeout = expected time x factor."""
    res = estimate_resource(spec.tier, spec.device)
    timeout = max(min_timeout_s, spec.expected_minutes * 60 * timeout_factor)
    return Limits(memory_mb=res.max_ram_mb, cpu_cores=float(res.max_cores), timeout_s=timeout)


@dataclass(frozen=True)
class JobRun:
    """One run of one job. ``workspace`` is /workspace; its parent folder belongs to the run
    too (the process executor keeps the job's venv there)."""

    job_id: str
    spec: JobSpec
    workspace: Path
    limits: Limits
    node_id: str = ""
    gpus: tuple[GpuInfo, ...] = ()  # a GPU job's onboarded cards: all it may see
    # Where its code may be fetched from: the provider's jobs.fetch_allow_networks; the
    # default refuses loopback, LAN and metadata addresses.
    fetch_policy: FetchPolicy = field(default_factory=FetchPolicy)
    replica: str = ""  # one replica of a job's step ("2.0": step 2, index 0; steps.py)
    # The job's inputs by CID (issue 26): (a read-only file or folder on this machine, where
    # it appears relative to the workspace), mounted read-only by the executor.
    inputs: tuple[tuple[Path, str], ...] = ()


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int | None  # None: it never ran; a signal N reads as 128 + N, as shells say
    outcome: Outcome
    reason: str = ""


class Executor(Protocol):
    name: str

    async def serve(self, task_status: trio.TaskStatus[None] = ...) -> None: ...
    async def prepare(self, run: JobRun, script: bytes | None = None) -> None: ...
    async def start(self, run: JobRun) -> None: ...
    def logs(self, run: JobRun, from_seq: int = 0) -> AsyncIterator[LogLine]: ...
    def log_batches(self, run: JobRun, from_seq: int = 0) -> AsyncIterator[list[LogLine]]: ...
    async def wait(self, run: JobRun) -> ExitStatus: ...
    async def cancel(self, run: JobRun, reason: str = ...) -> None: ...
    async def checkpoint(self, run: JobRun, dest_dir: Path) -> Checkpoint: ...
    async def restore(self, run: JobRun, checkpoint: Checkpoint) -> None: ...
    async def collect_results(self, run: JobRun, dest_dir: Path) -> ResultArchive: ...
    def usage(self, run: JobRun) -> Usage: ...
    def reading(self, run: JobRun) -> tuple[float, float, float] | None: ...
    def release(self, run: JobRun) -> None: ...
    def frameworks(self) -> tuple[str, ...]: ...


class StderrTail:
    """The last lines of a job's stderr, for the failure reason.

    Chunks from a pipe end anywhere, also inside a line: the unfinished end is kept until
    its newline arrives, so "ValueError: ..." is never cut into two lines.
    """

    def __init__(self, keep: int = 50) -> None:
        self._keep = keep
        self._lines: list[str] = []
        self._partial = ""

    def feed(self, chunk: bytes) -> None:
        text = self._partial + chunk.decode("utf-8", "replace")
        *complete, self._partial = text.split("\n")
        self._partial = self._partial[-4096:]
        if complete:
            self._lines = (self._lines + [line.rstrip("\r") for line in complete])[-self._keep :]

    @property
    def lines(self) -> list[str]:
        return self._lines + ([self._partial] if self._partial else [])


@dataclass
class RunState:
    """What an executor knows about one run (in the trio thread only)."""

    run: JobRun
    logs: LogBuffer
    meter: Meter
    entry: str = ""  # the script to run, relative to the workspace
    started: bool = False
    done: trio.Event = field(default_factory=trio.Event)
    status: ExitStatus | None = None
    stop: tuple[Outcome, str] | None = None  # why we stopped it (cancel, shutdown)
    checkpoints: int = 0
    stderr_tail: StderrTail = field(default_factory=StderrTail)
    # A job with steps (steps.py): its replicas, each a run of its own; the job's own state
    # runs nothing itself. ``replica``: this state is one of them. ``command``: a replica's
    # shell command (None: ``entry``, a Python script).
    replicas: list[steps.Replica] = field(default_factory=list)
    replica: bool = False
    command: tuple[str, ...] | None = None
    on_change: Callable[[], object] | None = None  # a replica started or ended
    # A gang's replica started (issue 25 §2): its provider joins it to the gang's overlay;
    # what this raises fails the replica.
    on_gang_start: Callable[[JobRun], Awaitable[None]] | None = None

    def notify(self) -> None:
        if self.on_change is not None:
            self.on_change()


def script_name(url: str) -> str:
    """The file name a fetched script is saved as (its URL's, when sane)."""
    name = PurePosixPath(urlsplit(url).path).name
    return name if re.fullmatch(r"[A-Za-z0-9_.-]{1,100}\.py", name) else "main.py"


def signal_exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def last_error_line(lines: list[str]) -> str:
    """The exception line of a Python traceback ("RuntimeError: The size of tensor a ...")."""
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith(("File ", "^", "~")):
            return text[:500]
    return ""


def failure_reason(exit_code: int, stderr_tail: list[str]) -> str:
    error = last_error_line(stderr_tail)
    return f"exit code {exit_code}: {error}" if error else f"exit code {exit_code}"


class BaseExecutor:
    """The parts every executor shares: bookkeeping, sources, checkpoints, results."""

    name = "base"

    def __init__(self, *, mhz_per_core: float | None = None) -> None:
        from engine.jobs.metering import host_mhz_per_core

        self.mhz_per_core = mhz_per_core or host_mhz_per_core()
        self._runs: dict[str, RunState] = {}
        self._nursery: trio.Nursery | None = None

    # --- lifetime ----------------------------------------------------------------------

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._on_serve()
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                for state in list(self._runs.values()):
                    if state.started and not state.done.is_set():
                        await self._stop_run(state, "interrupted", "the provider shut down")
            self._on_served()

    def frameworks(self) -> tuple[str, ...]:
        """The frameworks its jobs find (an image per framework: every one)."""
        return FRAMEWORKS

    async def _on_serve(self) -> None:
        """Hook: cleanup after a crash (the Docker executor removes orphan containers)."""

    def _on_served(self) -> None:
        """Hook: serve has ended and every run is stopped (the Docker executor's reaper goes)."""

    def _spawn(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        if self._nursery is None:
            raise EngineError("executor", f"the {self.name} executor is not running (serve)")
        self._nursery.start_soon(self._guarded, fn, *args)

    async def _guarded(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        # One run's background task failing must not end this nursery: that cancelled every
        # other run, then the provider, then the whole engine (a periodic checkpoint that
        # raced a container's exit did exactly that).
        try:
            await fn(*args)
        except Exception:
            log.exception("%s executor: %s failed", self.name, getattr(fn, "__name__", fn))

    def state(self, run: JobRun) -> RunState:
        try:
            return self._runs[run.job_id]
        except KeyError:
            raise EngineError("job", f"job {run.job_id} was not prepared here") from None

    def _new_state(self, run: JobRun) -> RunState:
        gpus = 1 if run.spec.device == "gpu" else 0
        state = RunState(run, LogBuffer(), Meter(mhz_per_core=self.mhz_per_core, gpus=gpus))
        self._runs[run.job_id] = state
        return state

    def release(self, run: JobRun) -> None:
        """Forget a finished run (its files stay where they are), and its replicas."""
        state = self._runs.pop(run.job_id, None)
        for replica in state.replicas if state is not None else ():
            self._runs.pop(replica.run.job_id, None)

    def replicas(self, run: JobRun) -> list[steps.Replica]:
        """A job with steps: each replica of each step, as it stands (empty: no steps)."""
        state = self._runs.get(run.job_id)
        return state.replicas if state is not None else []

    def watch_replicas(self, run: JobRun, on_change: Callable[[], object]) -> None:
        """Call ``on_change`` whenever one of the job's replicas starts or ends."""
        self.state(run).on_change = on_change

    def watch_gang(self, run: JobRun, on_start: Callable[[JobRun], Awaitable[None]]) -> None:
        """Await ``on_start`` with a gang's replica's run once it has started (its overlay)."""
        self.state(run).on_gang_start = on_start

    # --- the interface -----------------------------------------------------------------

    async def prepare(self, run: JobRun, script: bytes | None = None) -> None:
        """Put the code in the workspace (``script`` as given, else fetched) and install the
        dependencies. Idempotent: after a restore it overwrites the script with the same."""
        previous = self._runs.get(run.job_id)
        if previous is not None and previous.started and not previous.done.is_set():
            raise EngineError("job", f"job {run.job_id} is running")
        # After a restore, keep its state: its log says "resumed from checkpoint N" and the
        # checkpoint numbers go on from N.
        state = previous if previous and not previous.started else self._new_state(run)
        state.run = run
        # Nothing we write, chown or mount may land outside the job's own folder.
        safe_paths.real_dir(run.workspace, what="the job's workspace")
        run.workspace.mkdir(parents=True, exist_ok=True)
        safe_paths.real_dir(run.workspace / "outputs", what="the job's outputs folder").mkdir(
            exist_ok=True
        )
        spec = run.spec
        if spec.git is not None:
            from engine.jobs.sources import clone_git

            src = run.workspace / "src"
            clone = functools.partial(
                clone_git, spec.git, src, run.fetch_policy, max_files=run.limits.max_files
            )
            await trio.to_thread.run_sync(clone)
            state.entry = f"src/{spec.git.entry}"
        else:
            if script is None:
                from engine.jobs.script_fetch import fetch_script

                assert spec.script_url is not None
                script = await trio.to_thread.run_sync(
                    functools.partial(fetch_script, spec.script_url, policy=run.fetch_policy)
                )
            name = script_name(spec.script_url or "")
            target = safe_paths.child(run.workspace, name, what="script name")
            target.write_bytes(script)
            state.entry = name
        if spec.deps:
            state.logs.append("system", f"installing {len(spec.deps)} dependencies")
            await self._install(state)

    async def _install(self, state: RunState) -> None:
        raise NotImplementedError

    async def start(self, run: JobRun) -> None:
        """Start the job: its script, or (a job with steps) its first step's replicas."""
        if not run.spec.subtasks:
            await self._start_one(run)
            return
        state = self.state(run)
        if state.started:
            raise EngineError("job", f"job {run.job_id} was already started")
        state.replicas = steps.replicas_of(run)
        state.started = True
        state.meter.start()
        self._spawn(steps.run_steps, self, state)
        self._watch_disk(state)

    async def _start_one(self, run: JobRun) -> None:
        raise NotImplementedError

    def logs(self, run: JobRun, from_seq: int = 0) -> AsyncIterator[LogLine]:
        """Every line from ``from_seq`` on (the backlog), then the live tail until the end."""
        return self.state(run).logs.follow(from_seq)

    def log_batches(self, run: JobRun, from_seq: int = 0) -> AsyncIterator[list[LogLine]]:
        """The same lines as ``logs``, in lists of whatever had arrived (bulk readers)."""
        return self.state(run).logs.follow_batches(from_seq)

    async def wait(self, run: JobRun) -> ExitStatus:
        state = self.state(run)
        await state.done.wait()
        assert state.status is not None
        return state.status

    async def cancel(self, run: JobRun, reason: str = "cancelled by the consumer") -> None:
        state = self.state(run)
        if state.done.is_set():
            return
        if not state.started:
            self._finish(state, ExitStatus(None, "cancelled", reason))
            return
        await self._stop_run(state, "cancelled", reason)

    async def _stop_run(self, state: RunState, outcome: Outcome, reason: str) -> None:
        if not state.replicas:
            await self._stop_one(state, outcome, reason)
            return
        await steps.stop_replicas(self, state, outcome, reason)
        await state.done.wait()

    async def _stop_one(self, state: RunState, outcome: Outcome, reason: str) -> None:
        raise NotImplementedError

    def _watch_disk(self, state: RunState) -> None:
        """Once a run started: stop it when its workspace holds more than its disk, or more
        files and folders than the provider allows a job."""
        disk_mb, max_files = state.run.limits.disk_mb, state.run.limits.max_files
        if state.replica or (not disk_mb and max_files is None):  # the job's watch is theirs
            return
        from engine.jobs.executors import disk_quota

        async def stop(reason: str) -> None:
            if not state.done.is_set() and state.stop is None:
                state.logs.append("system", f"stopped: {reason}")
                await self._stop_run(state, "failed", reason)

        self._spawn(disk_quota.watch, state.run.workspace, disk_mb, max_files, stop, state.done)

    async def _pause(self, state: RunState) -> None:
        """Freeze the job while a snapshot is taken (consistent files): each running replica
        of a job with steps."""
        for child in self._live_replicas(state) if state.replicas else [state]:
            if child is not state:
                child.meter.freeze()
            await self._pause_one(child)

    async def _resume(self, state: RunState) -> None:
        """Undo _pause."""
        for child in self._live_replicas(state) if state.replicas else [state]:
            await self._resume_one(child)
            if child is not state:
                child.meter.thaw()

    def _live_replicas(self, state: RunState) -> list[RunState]:
        """The states of a job's replicas running now."""
        return [
            self._runs[r.run.job_id]
            for r in state.replicas
            if r.state == "running" and r.run.job_id in self._runs
        ]

    def live_run(self, run: JobRun) -> JobRun:
        """The run a tunnel or shell reaches: the job's own, or (steps) its first running
        replica's."""
        state = self._runs.get(run.job_id)
        if state is None or not state.replicas:
            return run
        live = self._live_replicas(state)
        return live[0].run if live else run

    async def _pause_one(self, state: RunState) -> None:
        """Hook: freeze one run."""

    async def _resume_one(self, state: RunState) -> None:
        """Hook: undo _pause_one."""

    async def checkpoint(self, run: JobRun, dest_dir: Path) -> Checkpoint:
        from engine.jobs.checkpoints import snapshot

        state = self.state(run)
        running = state.started and not state.done.is_set()
        state.checkpoints += 1
        number = state.checkpoints
        if running:
            state.meter.freeze()
            try:
                await self._pause(state)
            except BaseException:
                await self._unfreeze(state)
                raise
        try:
            return await trio.to_thread.run_sync(snapshot, run.workspace, dest_dir, number)
        finally:
            if running:
                await self._unfreeze(state)

    async def _unfreeze(self, state: RunState) -> None:
        """Resume a job a checkpoint froze, whatever ended the checkpoint: shielded, as a
        cancelled checkpoint (its caller timed out) must never leave the job frozen."""
        with trio.CancelScope(shield=True):
            try:
                with trio.move_on_after(UNFREEZE_S):
                    await self._resume(state)
            finally:
                state.meter.thaw()

    def start_checkpoints(
        self,
        run: JobRun,
        dest_dir: Path,
        interval_s: float,
        on_checkpoint: Callable[[Checkpoint], object] | None = None,
    ) -> None:
        """Snapshot every ``interval_s`` while the run lasts (numbers keep counting up)."""
        self._spawn(self._checkpoint_loop, run, dest_dir, interval_s, on_checkpoint)

    async def _checkpoint_loop(
        self,
        run: JobRun,
        dest_dir: Path,
        interval_s: float,
        on_checkpoint: Callable[[Checkpoint], object] | None,
    ) -> None:
        state = self.state(run)
        while not state.done.is_set():
            with trio.move_on_after(interval_s):
                await state.done.wait()
            if state.done.is_set():
                return
            try:
                checkpoint = await self.checkpoint(run, dest_dir)
            except Exception as exc:  # the job goes on; the next interval tries again
                log.warning("job %s: checkpoint failed: %s", run.job_id, exc)
                continue
            if on_checkpoint is not None:
                on_checkpoint(checkpoint)

    async def restore(self, run: JobRun, checkpoint: Checkpoint) -> None:
        """Put ``checkpoint`` back into the workspace; then prepare + start resume the job."""
        from engine.jobs.checkpoints import restore

        state = self._runs.get(run.job_id)
        if state is not None and state.started and not state.done.is_set():
            raise EngineError("job", f"job {run.job_id} is running: cancel it before a restore")
        await trio.to_thread.run_sync(restore, checkpoint, run.workspace)
        state = self._new_state(run)
        state.checkpoints = checkpoint.number
        state.logs.append("system", f"resumed from checkpoint {checkpoint.number}")

    async def collect_results(self, run: JobRun, dest_dir: Path) -> ResultArchive:
        from engine.jobs.results import pack

        dest = safe_paths.child(dest_dir, f"{run.job_id}-results.tar.gz", what="results archive")
        # pack reads from directory fds, never by path, and as the workspace's owner: a link
        # the job made (``outputs/leak -> /``) is skipped and listed in ``archive.skipped``.
        archive = await trio.to_thread.run_sync(
            lambda: pack(
                run.workspace, run.spec.outputs, dest, max_bytes=run.limits.max_result_bytes
            )
        )
        for note in archive.skipped:
            log.info("job %s: results: %s", run.job_id, note)
        return archive

    def usage(self, run: JobRun) -> Usage:
        state = self.state(run)
        own = state.meter.usage()
        if not state.replicas:
            return own
        children = [
            self._runs[r.run.job_id].meter.usage()
            for r in state.replicas
            if r.run.job_id in self._runs
        ]
        return steps.summed(own, children)

    def reading(self, run: JobRun) -> tuple[float, float, float] | None:
        """The run's latest sample (Meter.reading); None before one, or once forgotten. A
        job with steps: its replicas' CPU seconds summed, and the RAM of those running."""
        state = self._runs.get(run.job_id)
        if state is None or not state.replicas:
            return state.meter.reading() if state is not None else None
        return steps.summed_reading(
            (self._runs[r.run.job_id].meter, r.state == "running")
            for r in state.replicas
            if r.run.job_id in self._runs
        )

    # --- shared by the subclasses --------------------------------------------------------

    def _finish(self, state: RunState, status: ExitStatus) -> None:
        if state.done.is_set():
            return
        state.status = status
        state.meter.stop()
        state.logs.append("system", f"{status.outcome}: {status.reason}".rstrip(": "))
        state.logs.close()
        state.done.set()

    def _timeout_reason(self, run: JobRun) -> str:
        minutes = run.spec.expected_minutes
        limit = run.limits.timeout_s
        shown = f"{limit / 60:g} min" if limit >= 60 else f"{math.ceil(limit)} s"
        return f"ran past its time limit of {shown} (expected {minutes:g} min)"


@asynccontextmanager
async def running(executor: BaseExecutor) -> AsyncIterator[BaseExecutor]:
    """``serve`` for the length of a block (tests, scripts)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(executor.serve)
        try:
            yield executor
        finally:
            nursery.cancel_scope.cancel()
