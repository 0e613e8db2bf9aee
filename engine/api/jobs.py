"""Jobs (issue 5): their records, logs and results, and the commands that run them.

Data and commands of engine/jobs/; handlers in engine/jobs/service.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from engine.api.base import Command, Done, Event, Record
from engine.domain.spec import JobSpec

JobState = Literal[
    "queued",  # consumer: no provider could take it yet; offered again as providers free up
    "pending",  # consumer: created, looking for a provider
    "confirming",  # consumer: locked and confirmed; the provider's final answer not in yet
    "accepted",  # both sides agreed; the provider prepares it
    "running",
    "completed",
    "failed",  # the script failed (exit code and traceback kept)
    "oom",
    "timeout",
    "cancelled",
    "interrupted",  # the provider shut down and there was no checkpoint to resume from
    "refused",
]
# How long a client waits for ``SubmitJob``: the daemon answers within it (a provider's final
# answer, or the job left "confirming": engine/jobs/consumer.py SUBMIT_S).
SUBMIT_WAIT_S = 180.0
# ... and for ``CancelJob``/``StopJob``: a job not yet accepted is released first (consumer.py
# CANCEL_RELEASE_S), then cancelled at its provider.
CANCEL_WAIT_S = 90.0
TERMINAL_STATES: tuple[str, ...] = (
    "completed",
    "failed",
    "oom",
    "timeout",
    "cancelled",
    "interrupted",
    "refused",
)


class RunSpan(Record, frozen=True):
    """One run of a job on its provider (wall clock): the first, or one resumed from a
    checkpoint after a restart. ``ended_at`` None: running now."""

    started_at: float
    ended_at: float | None = None
    # Of it, the time checkpoints held the job frozen: it ran nothing then, and is not billed.
    frozen_s: float = 0.0


ReplicaState = Literal["waiting", "running", "done", "failed", "stopped"]
# Bounded where decoded (a provider's Update, the store): a hostile provider's steps cost
# the consumer no more than a spec's own (engine/domain/spec.py MAX_STEPS, billing's replicas).
MAX_JOB_STEPS = 16
MAX_STEP_REPLICAS = 64
_Time = Annotated[float, msgspec.Meta(ge=0, le=1e11)]


class ReplicaInfo(Record, frozen=True):
    """One replica of a job's step (issue 25 §1): its state and its span on the provider's
    clock (POSIX s); ``frozen_s`` of it checkpoints held it frozen. Never started: no span,
    and it bills nothing."""

    state: ReplicaState = "waiting"
    started_at: _Time | None = None
    ended_at: _Time | None = None
    frozen_s: Annotated[float, msgspec.Meta(ge=0, le=1e9)] = 0.0
    exit_code: Annotated[int, msgspec.Meta(ge=-1, le=1 << 16)] | None = None
    reason: Annotated[str, msgspec.Meta(max_length=500)] = ""

    def span_ms(self, end: float) -> tuple[int, int, int] | None:
        """(start, end, frozen) in ms, what bills; an open one ends at ``end``; None: it
        never started."""
        if self.started_at is None:
            return None
        start_ms = int(self.started_at * 1000)
        stop = self.ended_at if self.ended_at is not None else end
        end_ms = max(start_ms, int(stop * 1000))
        return start_ms, end_ms, min(end_ms - start_ms, max(0, int(self.frozen_s * 1000)))


class GangMember(Record, frozen=True):
    """One slot of a gang as its consumer sees it (issue 25 §2): a job of its own."""

    rank: int
    job_id: str
    provider: str
    state: str
    reason: str = ""


class StepInfo(Record, frozen=True):
    """One step of a job and its replicas, in order."""

    name: Annotated[str, msgspec.Meta(max_length=40)]
    replicas: Annotated[tuple[ReplicaInfo, ...], msgspec.Meta(max_length=MAX_STEP_REPLICAS)] = ()


class Measured(Record, frozen=True):
    """What a provider measured of a job's run (its Updates carry this much:
    engine/jobs/protocol.py ``WireMetering``)."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    mticks: float = 0.0
    ram_mb_s: float = 0.0
    peak_ram_mb: float = 0.0
    net_rx_bytes: int | None = None
    net_tx_bytes: int | None = None
    gpu_s: float = 0.0


class JobMetering(Measured, frozen=True):
    # The job's metered charge in NTX base units as this node worked it out (the provider:
    # the receipt's charge; None: not known). Never read from a peer: a consumer works its
    # own out from its record (engine/domain/charges.py ``metered_units``).
    cost_units: int | None = None


# A live sample's bounds (issue 22 §3): checked wherever one is decoded, from a provider's
# Update or from the store. Cores: the largest machines have a few hundred; MB: 16 TiB.
MAX_SAMPLE_CORES = 4096.0
MAX_SAMPLE_MB = 1 << 24
MAX_SAMPLE_GPUS = 64
Cores = Annotated[float, msgspec.Meta(ge=0, le=MAX_SAMPLE_CORES)]
SampleMb = Annotated[int, msgspec.Meta(ge=0, le=MAX_SAMPLE_MB)]


class UsageSample(Record, frozen=True):
    """What a running job uses at one moment, as its provider samples it every few seconds
    (``[jobs] usage_interval_s``): CPU in cores (1.5: one and a half cores busy), resident
    RAM and its limit in MB, and with GPUs their mean utilisation and summed memory."""

    at: Annotated[float, msgspec.Meta(ge=0, le=1e11)]  # the provider's clock (POSIX)
    cpu_cores: Cores = 0.0
    ram_mb: SampleMb = 0
    ram_limit_mb: SampleMb = 0  # 0: not known
    gpus: Annotated[int, msgspec.Meta(ge=0, le=MAX_SAMPLE_GPUS)] = 0  # the job's GPUs
    gpu_percent: Annotated[float, msgspec.Meta(ge=0, le=100)] | None = None  # None: not read
    gpu_mem_mb: SampleMb | None = None


class JobInfo(Record, frozen=True):
    job_id: str
    role: Literal["consumer", "provider"]
    state: JobState
    provider: str  # peer id of the provider (this node's own id on the provider side)
    consumer: str
    spec: JobSpec
    reason: str = ""
    exit_code: int | None = None
    # Billing (issue 12), base units: the provider's resource spec the job runs under, its
    # price per machine-hour and minimum charge, the estimate (price x expected time x
    # replicas) and the lock (price x maximum time x replicas: the budget cap).
    resource_spec: str = ""
    price_units_hour: int | None = None
    min_charge_units: int = 0
    estimate_units: int | None = None
    lock_units: int | None = None
    executor: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    checkpoint: int = 0
    resumed_from: int | None = None
    # Each run's own span (issue 20 §7): what machine time bills, never the downtime between
    # a crash and the resume nor the work redone after the checkpoint resumed from. Empty in
    # records from before runs were kept: one span, started_at to finished_at.
    runs: tuple[RunSpan, ...] = ()
    # A job with steps (issue 25 §1): each step's replicas as the provider tells them; their
    # spans, not ``runs``, are what bills (one subtask per step, one replica each).
    steps: Annotated[tuple[StepInfo, ...], msgspec.Meta(max_length=MAX_JOB_STEPS)] = ()
    # A gang's slot (issue 25 §2, spec.gang): the gang's providers by rank, once its consumer
    # started it (both sides keep them: a repeated start is recognised, a restart knows them).
    gang_members: Annotated[tuple[str, ...], msgspec.Meta(max_length=64)] = ()
    # `job show` of a gang's slot, on its consumer: every slot of the gang by rank (filled
    # when shown, never stored: each slot's own record holds its state).
    gang: Annotated[tuple[GangMember, ...], msgspec.Meta(max_length=64)] = ()
    log_lines: int = 0
    metering: JobMetering | None = None
    results_sha256: str = ""
    results_size: int = 0
    results_dir: str = ""
    # Consumer, queued jobs (issue 27 §1): when it stops waiting (POSIX seconds).
    queued_until: float | None = None
    # The results archive's CID when the spec asked them published (issue 26): a CIDv1 of
    # sha2-256 in base32, checked at decode on the consumer; "": not published.
    results_cid: Annotated[str, msgspec.Meta(pattern=r"^(b[a-z2-7]{58})?$")] = ""
    # Consumer: when this node saw the job start and end, on its own clock, as it happened
    # (an Update on a follow that had already shown the state before); None: not seen live.
    # What a receipt may bill is bounded by it (payments/escrow_receipts.py), never by the times the
    # provider reports.
    seen_started_at: float | None = None
    seen_finished_at: float | None = None
    # Consumer: why the results could not be fetched, after the last of its tries ("": none
    # failed for good); `job results` tries once more.
    results_error: str = ""
    # Paid jobs, once ended: the receipt (JSON) with the signatures gathered so far.
    receipt: str = ""
    # Consumer: the provider's latest live sample while it ran (None: none came); its recent
    # history is kept in memory only (``GetJobUsage``).
    usage: UsageSample | None = None
    # `job show` of a job not ended (issue 24; never stored): how this node reaches the other
    # side now, "direct" or "via relay <short id>" ("": no connection).
    path: str = ""

    def run_spans(self) -> tuple[RunSpan, ...]:
        """Its runs (a record from before runs were kept: one, from its start)."""
        if self.runs or self.started_at is None:
            return self.runs
        return (RunSpan(started_at=self.started_at, ended_at=self.finished_at),)

    def run_spans_ms(self, now: float) -> list[tuple[int, int, int]]:
        """Each run's (start, end, frozen) in ms (POSIX for the first two), what machine time
        bills: its span less its frozen time. An open run ends at the job's end, or ``now``.
        A job with steps: each replica that started, every step's in turn."""
        return [span for group in self.subtask_spans_ms(now) for span in group]

    def subtask_spans_ms(self, now: float) -> list[list[tuple[int, int, int]]]:
        """``run_spans_ms`` per subtask of the receipt: a job with steps, one per step that
        started (its replicas' spans); any other, one with each run."""
        end = self.finished_at or now
        if any(r.started_at is not None for step in self.steps for r in step.replicas):
            groups = [
                [span for r in step.replicas if (span := r.span_ms(end)) is not None]
                for step in self.steps
            ]
            return [group for group in groups if group]
        spans = []
        for run in self.run_spans():
            start_ms = int(run.started_at * 1000)
            end_ms = max(start_ms, int((run.ended_at if run.ended_at is not None else end) * 1000))
            frozen_ms = min(end_ms - start_ms, max(0, int(run.frozen_s * 1000)))
            spans.append((start_ms, end_ms, frozen_ms))
        return [spans] if spans else []


class JobList(Record, frozen=True):
    jobs: tuple[JobInfo, ...] = ()


class JobLogLine(Record, frozen=True):
    seq: int
    stream: Literal["stdout", "stderr", "system"]
    text: str
    at: float


class JobLogs(Record, frozen=True):
    job_id: str
    lines: tuple[JobLogLine, ...] = ()
    next_seq: int = 0
    done: bool = False


class JobResults(Record, frozen=True):
    job_id: str
    directory: str
    files: tuple[str, ...] = ()
    sha256: str = ""
    size: int = 0
    # How they came from the provider (issue 24): "direct" or "via relay <short id>" (of the
    # last part), and in how many parts (a relay's circuit ends at its data cap and the
    # transfer resumes by offset over a new one); "" and 0: fetched before this daemon
    # started.
    path: str = ""
    parts: int = 0


class SubmitJob(Command, tag="job_submit", frozen=True):
    reply = JobInfo
    spec: JobSpec  # its fields' types checked where it is decoded; validate_spec by the engine
    peer_id: str | None = None  # pick the provider by hand
    # The caller's name for this submit: each step then arrives as a SubmitProgress event
    # with it (a submit waits on providers and the chain for up to a minute: say on what).
    submit_id: Annotated[str, msgspec.Meta(max_length=64)] = ""
    # When no provider can take it now: wait in this node's queue (issue 27 §1), offered again
    # as providers free up or appear, for at most ``queue_timeout_s``; False: refused at once.
    queue: bool = False
    queue_timeout_s: Annotated[float, msgspec.Meta(ge=1, le=7 * 86400)] = 3600.0
    # Only providers whose record with us scores at least this (issue 27 §2;
    # engine/domain/reputation.py); one with no history with us is passed over too.
    min_score: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None


class ResubmitJob(Command, tag="job_resubmit", frozen=True):
    """Submit a finished job's spec again as a new job (a new job id); the old one stays as
    it ended. ``peer_id``: this provider (None: matching chooses, as for a new submit)."""

    reply = JobInfo
    job_id: str
    peer_id: str | None = None
    submit_id: Annotated[str, msgspec.Meta(max_length=64)] = ""  # as SubmitJob's


SubmitStep = Literal["matching", "asking", "quoted", "locking", "confirming", "refused", "accepted"]


class SubmitProgress(Event, tag="submit_progress", frozen=True):
    """One step of a submit (``SubmitJob.submit_id``), as it happens."""

    submit_id: str
    step: SubmitStep
    detail: str  # "provider 12D3…xyz9: 0.05 NTX/h", "lock tx 3f2a…", a refusal's reason
    elapsed_s: float  # since the submit began


class ListJobs(Command, tag="job_list", frozen=True):
    reply = JobList


class GetJob(Command, tag="job_show", frozen=True):
    reply = JobInfo
    job_id: str


class GetJobLogs(Command, tag="job_logs", frozen=True):
    reply = JobLogs
    job_id: str
    after_seq: int = -1
    limit: int = 10_000
    newest: bool = False  # the last ``limit`` lines after ``after_seq`` (a live tail)


class JobUsage(Record, frozen=True):
    """A job's recent live samples, oldest first (at most the last few minutes': memory only,
    so empty after a restart) and how often its provider samples."""

    job_id: str
    samples: tuple[UsageSample, ...] = ()
    interval_s: float = 0.0


class GetJobUsage(Command, tag="job_usage", frozen=True):
    reply = JobUsage
    job_id: str


class CancelJob(Command, tag="job_cancel", frozen=True):
    reply = JobInfo
    job_id: str


class StopJob(Command, tag="job_stop", frozen=True):
    """End a service job normally (it ends "completed"); ``CancelJob`` is for batch jobs."""

    reply = JobInfo
    job_id: str


class FetchJobResults(Command, tag="job_results", frozen=True):
    reply = JobResults
    job_id: str
    out_dir: str


class DeleteJobResults(Command, tag="job_delete_results", frozen=True):
    """``notebook delete``: a finished job's files removed on its provider (owner only)."""

    reply = Done
    job_id: str


class JobChanged(Event, tag="job_changed", frozen=True):
    job: JobInfo


class JobLogEvent(Event, tag="job_log", frozen=True):
    job_id: str
    lines: tuple[JobLogLine, ...]
