"""The provider's state and bookkeeping, which every part of it reads: the runs, quotes,
stream bounds and logs it holds, a job's folder and log, saving a job (committed before it is
announced), what running jobs hold, and its offer (provider_offer.py).

The provider is built in layers, each a module of one concern: this base, its runs
(provider_runs.py), its quotes (provider_quotes.py), the streams it serves
(provider_streams.py), and ``ProviderJobs`` (provider.py), which starts them.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import trio

from engine import api
from engine.context import NodeContext
from engine.domain import safe_paths
from engine.domain.ratelimit import PeerRateLimiter, ScopedStreamLimiter
from engine.domain.spec import JobSpec
from engine.domain.tiers import estimate_resource
from engine.errors import EngineError
from engine.jobs import live_usage
from engine.jobs import protocol as p
from engine.jobs.executors.base import Executor, JobRun
from engine.jobs.joblog import JobLog, JobLogs
from engine.jobs.provider_offer import ProviderOffer
from engine.jobs.quote_book import ConfirmInFlight, QuoteBook
from engine.jobs.tunnel_provider import TunnelServer
from engine.ports import Committed, EscrowPort, JobData, MachinePort, NetworkPort, OfferView

log = logging.getLogger("nunet.jobs.provider")

# Job streams served at once: a consumer needs one per job it follows plus a few short asks.
# Identities are free (issue 21): 20 of them x 16 idle streams filled the node's 256, so
# strangers are also counted per address and subnet, and a quarter is kept for consumers we
# have jobs with.
STREAMS_PER_PEER = 16
STREAMS_PER_ADDRESS = 48
STREAMS_PER_SUBNET = 96
STREAMS_TOTAL = 256
STREAMS_RESERVED = 64
JOB_PEERS_TTL_S = 5.0  # who we have jobs with, read again at most this often
OFFERS_PER_S = p.OFFERS_PER_S  # per peer (protocol.py)
OFFER_BURST = p.OFFER_BURST
REFUSALS_KEPT = 256  # Confirms refused lately, answered the same when repeated


class ProviderBase:
    """``network``: the node's network (None: this engine runs without one); ``escrows``:
    the escrow of paid jobs (None: payments are off). Both are built on first use.
    ``logs``: the node's job logs (shared with its consumer side); ``capacity``: the
    machine's full capacity (provider_offer.py); ``data``: the data room, for a job's inputs by
    CID (None: a job with inputs cannot run here)."""

    def __init__(
        self,
        ctx: NodeContext,
        executors: dict[str, Executor],
        *,
        network: Callable[[], NetworkPort] | None = None,
        escrows: Callable[[], EscrowPort] | None = None,
        logs: JobLogs | None = None,
        capacity: Callable[[], api.Capacity] | None = None,
        machine: MachinePort,
        data: Callable[[], JobData] | None = None,
    ) -> None:
        self.ctx = ctx
        self._data = data
        self._network = network if ctx.network_enabled else None
        self._escrows = escrows if ctx.payments_enabled else None
        self.executors = executors
        self._quotes = QuoteBook()
        self._confirming: dict[str, ConfirmInFlight] = {}  # bounded by the quote book
        # The last refusals of Confirms, so that a repeat gets the same reason (bounded).
        self._refused: collections.OrderedDict[str, tuple[str, p.Refusal]] = (
            collections.OrderedDict()
        )
        self._streams = ScopedStreamLimiter(
            STREAMS_PER_PEER,
            STREAMS_PER_ADDRESS,
            STREAMS_PER_SUBNET,
            STREAMS_TOTAL,
            STREAMS_RESERVED,
        )
        self._job_peers: tuple[float, set[str]] = (-JOB_PEERS_TTL_S, set())
        self._offers = PeerRateLimiter(OFFERS_PER_S, OFFER_BURST)
        self._runs: dict[str, tuple[Executor, JobRun]] = {}
        self._changed: dict[str, trio.Event] = {}
        # Open logs: a running job's stays; of finished ones only the last few read (the
        # rest are opened again from their files by `job logs`, a follow, results).
        self._logs = logs if logs is not None else JobLogs(ctx.paths.state_dir / "jobs")
        self._nursery: trio.Nursery | None = None
        self._cancelling: set[str] = set()  # jobs being stopped now (one stop each)
        self.tunnels = TunnelServer(ctx, self.running)  # /nunet/tunnel/1.0.0 into running jobs
        self._stopping: set[str] = set()  # service jobs their consumer stopped (`job stop`)
        self._machine = machine  # the machine's facts and what is sold (issue 12)
        self._offer_view = ProviderOffer(ctx, executors, machine, self.committed, capacity)
        # Running jobs' live samples (live_usage.py), sent to their followers; the GPU
        # sampler is built when a GPU job first runs.
        self._usage: dict[str, live_usage.UsageRing] = {}

    def running(self, job_id: str) -> tuple[Executor, JobRun] | None:
        """The executor and run of a job running here now (None otherwise)."""
        return self._runs.get(job_id)

    def job_dir(self, job_id: str) -> Path:
        return safe_paths.job_dir(self.ctx.paths.state_dir / "jobs", job_id)

    def job_path(self, job_id: str, name: str) -> Path:
        """A file or folder of the job's own (its log, workspace, checkpoints)."""
        return safe_paths.child(self.job_dir(job_id), name, what=f"job {job_id}'s")

    def job_log(self, job_id: str) -> JobLog:
        return self._logs.get(job_id)

    def _quote_ttl(self) -> float:
        return float(self.ctx.settings.jobs.quote_ttl_s)

    def _save(self, job: api.JobInfo) -> api.JobInfo:
        job = msgspec.structs.replace(job, updated_at=time.time())
        before = self.ctx.store.get_job(job.job_id)
        self.ctx.store.save_job(job)
        if (before is None or before.state != job.state) and self._network is not None:
            self._network().beat_now()  # free slots and resources changed: say so at once
        self._changed.setdefault(job.job_id, trio.Event()).set()
        self._changed[job.job_id] = trio.Event()
        self.ctx.emit(api.JobChanged(at=job.updated_at, job=job))
        return job

    def committed(self) -> Committed:
        """What running jobs hold (their spec's RAM, or their tiers' maximums): subtracted from
        free in heartbeats."""
        used = Committed()
        for job in self.ctx.store.list_jobs(states=("accepted", "running")):
            if job.role != "provider":
                continue
            need = estimate_resource(job.spec.tier, job.spec.device)
            resource = self._resource_of(job)
            used.jobs += 1
            used.cpu_mhz += need.max_cpu_mhz
            used.memory_mb += resource.ram_mb if resource is not None else need.max_ram_mb
            if job.spec.device == "gpu":
                used.gpus += max(1, resource.gpus) if resource is not None else 1
                used.vram_mb += need.max_vram_mb
        return used

    def running_jobs(self) -> int:
        return sum(
            1
            for job in self.ctx.store.list_jobs(states=("accepted", "running"))
            if job.role == "provider"
        )

    def _record(self, job_id: str, consumer: str, direction: str, kind: str, raw: bytes) -> None:
        """Keep a signed message, but only one of ``consumer``'s own job on this provider."""
        job = self.ctx.store.get_job(job_id)
        if job is not None and job.role == "provider" and job.consumer == consumer:
            self.ctx.store.record_job_message(job_id, direction, kind, raw)

    def offer(self) -> OfferView:
        """What this provider offers now: what admission judges, and what the advert and
        heartbeats carry (one view, provider_offer.py)."""
        return self._offer_view.view()

    def own_resources(self) -> api.PeerResources:
        """What this provider advertises and beats about itself, as a consumer sees it."""
        return self.offer().resources

    def _gpus_for(self, spec: JobSpec) -> tuple[api.GpuInfo, ...]:
        return self._offer_view.gpus_for(spec)

    def frameworks(self) -> tuple[str, ...]:
        """The frameworks some executor of this provider's can run now."""
        return self._offer_view.frameworks()

    def _executor_for(self, spec: JobSpec) -> str | None:
        return self._offer_view.executor_for(spec)

    def _resource_of(self, job: api.JobInfo) -> api.ResourceSpec | None:
        """The provider-defined spec the job was quoted under (None: a default tier spec)."""
        if not job.resource_spec:
            return None
        try:
            book = self._machine.resource_book()
        except EngineError:
            return None
        return next((s for s in book.specs if s.name == job.resource_spec), None)
