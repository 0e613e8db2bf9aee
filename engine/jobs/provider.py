"""The provider's side of the job protocol: quote, accept, run, stream, resume.

Admission (what a job needs, what it costs) follows the rules the consumer's matcher uses
(engine/jobs/admission.py), judged on the figures this provider advertises about itself.

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
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio

from engine import api, safe_paths
from engine.context import NodeContext
from engine.errors import EngineError
from engine.jobs import live_usage, runs
from engine.jobs import protocol as p
from engine.jobs import workspace_retention as wr
from engine.jobs.admission import Needs, Verdict, judge, max_minutes
from engine.jobs.checkpoints import latest
from engine.jobs.executors.base import (
    Executor,
    ExitStatus,
    JobRun,
    Limits,
    limits_for,
)
from engine.jobs.fetch_policy import FetchPolicy
from engine.jobs.joblog import JobLog, JobLogs
from engine.jobs.metering import metered_units
from engine.jobs.provider_offer import ProviderOffer
from engine.jobs.spec import JobSpec, fetch_script, validate_spec
from engine.jobs.tiers import estimate_resource
from engine.jobs.tunnel_provider import TunnelServer
from engine.network.ratelimit import PeerRateLimiter, ScopedStreamLimiter, remote_host
from engine.ports import Committed, EscrowPort, NetworkPort, OfferView
from engine.resources.specs import ResourceFile
from oracle_client.ntx import ntx_of

log = logging.getLogger("nunet.jobs.provider")

# A stream must bring its one request this soon; a peer that opens streams and says nothing
# has them reset (the consumer writes its request at once, and waits 10 s for the answer).
FIRST_FRAME_S = 10.0
WRITE_S = 10.0  # for one reply to be taken by the peer
# Fetching the script before quoting: well inside the consumer's wait for the answer (10 s).
OFFER_FETCH_S = 6.0
LINGER_S = 5.0  # for the peer to close its side after our last frame (then: reset)
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
# Unconfirmed quotes held (each keeps its offer, at most p.MAX_REQUEST_BYTES): per peer, all.
QUOTES_PER_PEER = 4
QUOTES_TOTAL = 64
REFUSALS_KEPT = 256  # Confirms refused lately, answered the same when repeated


@dataclass
class HeldQuote:
    """A quote waiting for its Confirm, with the signed offer and quote kept as evidence."""

    quote: p.Quote
    spec: JobSpec
    consumer: str
    offer_raw: bytes
    quote_raw: bytes
    # The script as fetched before quoting: the run uses these bytes, so what the consumer
    # locked NTX for is what runs (None: a git source, fetched when the job starts).
    script: bytes | None = None


@dataclass
class QuoteBook:
    """Unconfirmed quotes: dropped at their expiry, bounded per peer and in all."""

    per_peer: int = QUOTES_PER_PEER
    total: int = QUOTES_TOTAL
    _held: dict[str, HeldQuote] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._held)

    def get(self, job_id: str) -> HeldQuote | None:
        return self._held.get(job_id)

    def pop(self, job_id: str) -> HeldQuote | None:
        return self._held.pop(job_id, None)

    def evict_expired(self, now: float) -> int:
        expired = [job_id for job_id, h in self._held.items() if h.quote.expires_at <= now]
        for job_id in expired:
            del self._held[job_id]
        return len(expired)

    def no_room(self, consumer: str, now: float) -> str:
        """Why no new quote can be held for ``consumer`` now ("" when one can)."""
        self.evict_expired(now)
        mine = sum(1 for h in self._held.values() if h.consumer == consumer)
        if mine >= self.per_peer:
            return (
                f"you hold {mine} unconfirmed quotes here already: confirm one or let them "
                "expire, then ask again"
            )
        if len(self._held) >= self.total:
            return "busy: too many unconfirmed quotes here; ask again in a minute"
        return ""

    def add(self, held: HeldQuote) -> None:
        self._held[held.quote.job_id] = held


@dataclass
class ConfirmInFlight:
    """A Confirm whose lock is being checked: a repeat of it waits for its answer instead of
    checking again, and a Release that comes meanwhile makes that answer a refusal."""

    consumer: str
    done: trio.Event = field(default_factory=trio.Event)
    answer: p.Accepted | p.Refusal | None = None
    released: bool = False


FOLLOW_POLL_S = 0.1
# After an Update with lines, a running job's next lines wait this long and go together: a
# service that logs every request (the tunnels' common case) would otherwise cost both daemons
# a signed Update, its check and a store write per request, in the middle of its round trips.
LINES_GATHER_S = 0.1


class ProviderJobs:
    """``network``: the node's network (None: this engine runs without one); ``escrows``:
    the escrow of paid jobs (None: payments are off). Both are built on first use.
    ``logs``: the node's job logs (shared with its consumer side); ``capacity``: the
    machine's full capacity (provider_offer.py)."""

    def __init__(
        self,
        ctx: NodeContext,
        executors: dict[str, Executor],
        *,
        network: Callable[[], NetworkPort] | None = None,
        escrows: Callable[[], EscrowPort] | None = None,
        logs: JobLogs | None = None,
        capacity: Callable[[], api.Capacity] | None = None,
    ) -> None:
        self.ctx = ctx
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
        self._resources = ResourceFile(ctx.paths.resources_file)  # what is sold (issue 12)
        self._offer_view = ProviderOffer(ctx, executors, self._resources, self.committed, capacity)
        # Running jobs' live samples (live_usage.py), sent to their followers; the GPU
        # sampler is built when a GPU job first runs.
        self._usage: dict[str, live_usage.UsageRing] = {}
        self._gpu_service: Any = None

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

    def _quote_ttl(self) -> float:
        return float(self.ctx.settings.jobs.quote_ttl_s)

    # --- bookkeeping ---------------------------------------------------------------------

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

    # --- the stream handler ------------------------------------------------------------

    async def handle(self, stream: Any) -> None:
        peer = p.remote_peer(stream)
        lease = self._streams.acquire(peer, remote_host(stream), lambda: self.deals_with(peer))
        if lease is None:
            log.debug("job stream from %s refused: over its peer's, address's or subnet's", peer)
            await _reset(stream)
            return
        try:
            await self._serve_stream(stream, peer)
        finally:
            self._streams.release(lease)

    def deals_with(self, peer: str) -> bool:
        """A peer we have a job with, either side: its streams come from the reserve."""
        at, peers = self._job_peers
        now = time.monotonic()
        if now - at >= JOB_PEERS_TTL_S:
            peers = self.ctx.store.job_peers()
            self._job_peers = (now, peers)
        return peer in peers

    async def _serve_stream(self, stream: Any, peer: str) -> None:
        try:
            try:
                with trio.fail_after(FIRST_FRAME_S):
                    received = await p.receive(stream, peer, p.MAX_REQUEST_BYTES)
            except p.BadOffer as bad:
                refusal = self._offer_gate(bad.job_id, bad.consumer, peer) or p.refusal(
                    bad.job_id, bad.reason
                )
                await self._reply(stream, peer, refusal, keep=False)
                await p.finish(stream, LINGER_S)
                return
            if received is None:  # the peer closed without asking: close our side too
                await p.finish(stream, LINGER_S)
                return
            message, raw = received
            await self._dispatch(stream, peer, message, raw)
        except trio.TooSlowError:
            log.debug("job stream from %s: too slow (request or reply); reset", peer)
            await _reset(stream)
        except p.ProtocolError as exc:
            log.info("job protocol: rejected input from %s: %s", peer, exc)
            await _reset(stream)
        except Exception as exc:  # a peer's broken stream must never take the node down
            log.info("job stream from %s ended: %s", peer, exc)
            await _reset(stream)
        else:
            await p.finish(stream, LINGER_S)

    async def _dispatch(self, stream: Any, peer: str, message: p.AnyJobMessage, raw: bytes) -> None:
        if isinstance(message, p.Offer):
            # Never stored here: a quote keeps its offer until the Confirm makes a job.
            quoted = self._offer(message, peer, raw)
            if isinstance(quoted, p.Quote):
                quoted = await self._fetch_before_quoting(quoted)
            await self._reply(stream, peer, quoted, keep=False)
            return
        if isinstance(message, p.Confirm):
            answer, created = await self._confirm(message, peer, raw)
            await self._reply(stream, peer, answer, keep=created)
            return
        self._record(message.job_id, peer, "in", p.kind(message), raw)
        if isinstance(message, p.Countersign):
            await self._reply(stream, peer, self._countersigned(message, peer))
        elif isinstance(message, p.Release):
            await self._reply(stream, peer, self._released(message, peer))
        elif isinstance(message, p.Cancel):
            await self._reply(stream, peer, await self._cancel(message, peer))
        elif isinstance(message, p.Follow):
            await self._follow(stream, message, peer)
        elif isinstance(message, p.FetchResults):
            await self._send_results(stream, message, peer)
        elif isinstance(message, p.DeleteResults):  # notebook delete (helper D)
            await self._reply(stream, peer, await self._delete_results(message, peer))
        else:
            raise p.ProtocolError(f"unexpected {type(message).__name__}")

    def _record(self, job_id: str, consumer: str, direction: str, kind: str, raw: bytes) -> None:
        """Keep a signed message, but only one of ``consumer``'s own job on this provider."""
        job = self.ctx.store.get_job(job_id)
        if job is not None and job.role == "provider" and job.consumer == consumer:
            self.ctx.store.record_job_message(job_id, direction, kind, raw)

    async def _reply(
        self, stream: Any, consumer: str, message: p.JobMessage, *, keep: bool = True
    ) -> None:
        raw = p.encode(self.ctx.identity, message)
        if keep:
            self._record(message.job_id, consumer, "out", p.kind(message), raw)
        with trio.fail_after(WRITE_S):
            await stream.write(_frame(raw))

    # --- offer and confirm ---------------------------------------------------------------

    def _offer_gate(self, job_id: str, named: str, consumer: str) -> p.Refusal | None:
        """The checks every offer passes before its spec is looked at (a bad one's too)."""
        if not self._offers.allow(consumer):
            return p.refusal(job_id, f"too many offers from you: at most {OFFERS_PER_S:g} a second")
        if named != consumer:
            return p.refusal(job_id, "offer names another consumer")
        if self.ctx.store.get_job(job_id) is not None:
            return p.refusal(job_id, "job id already in use")
        return None

    def _offer(self, offer: p.Offer, consumer: str, raw: bytes) -> p.Quote | p.Refusal:
        job_id, spec = offer.job_id, offer.spec
        if refused := self._offer_gate(job_id, offer.consumer, consumer):
            return refused
        # Judged for the peer that signed the offer: a pool's specs are for its members, by
        # this provider's own pools (never what the consumer says of itself).
        verdict = self._admission(spec, consumer)
        if not verdict.ok:
            return p.refusal(job_id, verdict.reason)
        assert verdict.price_ntx_hour is not None and verdict.resource is not None
        now = time.time()
        if why := self._quotes.no_room(consumer, now):
            return p.refusal(job_id, why)
        payment_address = ""
        if self._escrows is not None:
            try:
                payment_address = self._escrows().payment_address()
            except EngineError:
                return p.refusal(job_id, "this provider has no wallet to be paid into yet")
        resource = verdict.resource
        quote = p.Quote(
            job_id=job_id,
            provider=self.ctx.identity.peer_id,
            price_ntx_hour=verdict.price_ntx_hour,
            # What the escrow locks and the Confirm repeats: the lock (the maximum time).
            total_ntx=ntx_of(verdict.lock_units),
            expires_at=now + self._quote_ttl(),
            executor=self._executor_for(spec) or "",
            payment_address=payment_address,
            spec_name=resource.name,
            price_units_hour=resource.price_units_hour,
            min_charge_units=resource.min_charge_units,
            estimate_units=verdict.estimate_units,
            lock_units=verdict.lock_units,
        )
        quote_raw = p.encode(self.ctx.identity, quote)
        self._quotes.add(HeldQuote(quote, spec, consumer, raw, quote_raw))
        return quote

    async def _fetch_before_quoting(self, quote: p.Quote) -> p.Quote | p.Refusal:
        """Fetch the job's script now, under the fetch policy: a script that cannot be had is
        a refusal before the consumer locks any NTX, not a paid job that fails at start."""
        held = self._quotes.get(quote.job_id)
        if held is None or held.spec.script_url is None:
            return quote
        policy = FetchPolicy.from_settings(self.ctx.settings.jobs.fetch_allow_networks)
        try:
            script = await trio.to_thread.run_sync(
                functools.partial(
                    fetch_script,
                    held.spec.script_url,
                    policy=policy,
                    timeout=OFFER_FETCH_S,
                    total_s=OFFER_FETCH_S,
                )
            )
        except EngineError as exc:
            self._quotes.pop(quote.job_id)
            return p.refusal(quote.job_id, f"cannot fetch the job's script: {exc.message}")
        # The quote's life starts once it can be had: a slow fetch must not hand the
        # consumer a quote that is already (nearly) stale.
        fresh = msgspec.structs.replace(quote, expires_at=time.time() + self._quote_ttl())
        raw = p.encode(self.ctx.identity, fresh)
        self._quotes.add(dataclasses.replace(held, quote=fresh, quote_raw=raw, script=script))
        return fresh

    def _refusal_reason(self, spec: JobSpec, consumer: str | None = None) -> str:
        return self._admission(spec, consumer).reason

    def _admission(self, spec: JobSpec, consumer: str | None = None) -> Verdict:
        """The verdict on ``spec`` here: the shared rules (admission.judge) on this provider's
        own figures, after what only the provider knows (onboarded, the spec's validity)."""
        onboarding = self.ctx.store.get_onboarding()
        if onboarding is None or onboarding.state != "active":
            return _refused("not accepting jobs (not onboarded or paused)")
        report = validate_spec(spec)
        if not report.ok:
            return _refused(*(problem.message for problem in report.problems))
        try:
            self._resources.load()
        except EngineError as exc:
            log.error("refusing offers: %s", exc.message)
            return _refused("this provider's resource specs do not read (its operator fixes them)")
        verdict = judge(
            Needs.of(spec),
            self.offer().resources,
            takes_payments=self._escrows is not None,
            consumer=consumer,
        )
        if verdict.ok and spec.device == "gpu":
            try:
                self._gpus_for(spec)
            except EngineError as exc:
                return _refused(exc.message)
        return verdict

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

    async def _confirm(
        self, confirm: p.Confirm, consumer: str, raw: bytes
    ) -> tuple[p.Accepted | p.Refusal, bool]:
        """The answer, and whether this Confirm made the job (then it and its offer and
        quote are stored). Every answer is final: a refusal spends the quote, so a repeat of
        the Confirm is refused too and never accepted later (the consumer has moved on)."""
        job_id = confirm.job_id
        flight = self._confirming.get(job_id)
        if flight is not None:
            if flight.consumer != consumer:
                return p.refusal(job_id, "job id already in use"), False
            # A repeat while the first is checking the lock: its answer, once it is known
            # (the first is bounded by CONFIRM_CHECK_S; the consumer waits longer).
            await flight.done.wait()
            if flight.answer is not None:
                return flight.answer, False
        if (refused := self._refused.get(job_id)) is not None and refused[0] == consumer:
            return refused[1], False
        held = self._quotes.get(job_id)
        flight = ConfirmInFlight(consumer)
        self._confirming[job_id] = flight
        try:
            answer, created = await self._confirmed(confirm, consumer, held, flight)
            flight.answer = answer
        finally:
            del self._confirming[job_id]
            flight.done.set()
        if held is not None and held.consumer == consumer:
            self._quotes.pop(job_id)  # accepted or refused: the quote is spent either way
        if isinstance(answer, p.Refusal):
            self._remember_refusal(job_id, consumer, answer)
        if created:
            assert held is not None
            self._record(job_id, consumer, "in", "offer", held.offer_raw)
            self._record(job_id, consumer, "out", "quote", held.quote_raw)
            self._record(job_id, consumer, "in", p.kind(confirm), raw)
        return answer, created

    def _remember_refusal(self, job_id: str, consumer: str, refusal: p.Refusal) -> None:
        self._refused[job_id] = (consumer, refusal)
        while len(self._refused) > REFUSALS_KEPT:
            self._refused.popitem(last=False)

    def _released(self, release: p.Release, consumer: str) -> p.Accepted | p.Refusal:
        """The consumer stopped waiting for its Confirm: the job's one outcome, made final."""
        job_id = release.job_id
        job = self.ctx.store.get_job(job_id)
        if job is not None and job.role == "provider":
            if job.consumer != consumer:
                return p.refusal(job_id, "no such job of yours")
            # Accepted before the release came: it runs (Cancel ends it, billed as usual).
            return p.Accepted(job_id=job_id)
        flight = self._confirming.get(job_id)
        if flight is not None and flight.consumer == consumer:
            flight.released = True  # its lock check ends in a refusal
        held = self._quotes.get(job_id)
        if held is not None and held.consumer == consumer:
            self._quotes.pop(job_id)
        refusal = p.refusal(job_id, "released by its consumer: this provider will not run it")
        if held is not None or flight is not None:
            self._remember_refusal(job_id, consumer, refusal)
        return refusal

    async def _confirmed(
        self,
        confirm: p.Confirm,
        consumer: str,
        held: HeldQuote | None,
        flight: ConfirmInFlight,
    ) -> tuple[p.Accepted | p.Refusal, bool]:
        """The answer, and True when this call made the job."""
        existing = self.ctx.store.get_job(confirm.job_id)
        if existing is not None:
            if existing.consumer != consumer:
                return p.refusal(confirm.job_id, "job id already in use"), False
            return p.Accepted(job_id=confirm.job_id), False  # a repeat: never run twice
        if held is None:
            return (
                p.refusal(
                    confirm.job_id,
                    "no quote for this job here (it expired, or this provider restarted): "
                    "ask again",
                ),
                False,
            )
        quote, spec = held.quote, held.spec
        if held.consumer != consumer:
            return p.refusal(confirm.job_id, "quote was made for another consumer"), False
        if time.time() > quote.expires_at:
            return p.refusal(confirm.job_id, "quote expired (ask again)"), False
        if abs(confirm.total_ntx - quote.total_ntx) > 1e-9:
            return p.refusal(confirm.job_id, "confirmed amount differs from quote"), False
        if self._escrows is not None and quote.total_ntx > 0:
            paid = confirm.escrow_tx or self.ctx.settings.payments.require_payment
            reason = ""
            if paid:
                with trio.move_on_after(p.CONFIRM_CHECK_S) as checking:
                    reason = await self._escrows().verify_lock(
                        confirm.job_id,
                        consumer,
                        quote.total_ntx,
                        confirm.escrow_terms,
                        confirm.escrow_tx,
                    )
                if checking.cancelled_caught:
                    reason = f"the lock was not seen on the chain within {p.CONFIRM_CHECK_S:g} s"
            if reason:
                return p.refusal(confirm.job_id, reason), False
        if flight.released:  # checked with no await before the job is made: never both
            return p.refusal(
                confirm.job_id, "released by its consumer while its lock was checked"
            ), False
        if self.running_jobs() >= self.ctx.settings.jobs.slots:
            return p.refusal(confirm.job_id, "busy: another consumer was first"), False
        now = time.time()
        job = api.JobInfo(
            job_id=confirm.job_id,
            role="provider",
            state="accepted",
            provider=self.ctx.identity.peer_id,
            consumer=consumer,
            spec=spec,
            price_ntx_hour=quote.price_ntx_hour,
            quoted_ntx=quote.total_ntx,
            resource_spec=quote.spec_name,
            price_units_hour=quote.price_units_hour,
            min_charge_units=quote.min_charge_units,
            estimate_units=quote.estimate_units,
            lock_units=quote.lock_units,
            executor=quote.executor,
            created_at=now,
        )
        self._save(job)
        assert self._nursery is not None
        self._nursery.start_soon(self._run, job, None, held.script)
        return p.Accepted(job_id=confirm.job_id), True

    def _countersigned(
        self, message: p.Countersign, consumer: str
    ) -> p.Accepted | p.Countersigned | p.Refusal:
        if self._escrows is None:
            return p.Refusal(job_id=message.job_id, reason="this provider takes no payments")
        escrows = self._escrows()
        reason = escrows.accept_countersigned(message.job_id, consumer, message.receipt)
        if reason:
            return p.refusal(message.job_id, reason)  # clipped to the schema's bound
        agreed = escrows.kept_receipt(message.job_id) or message.receipt
        job = self.ctx.store.get_job(message.job_id)
        if job is not None and job.receipt != agreed:
            self._save(msgspec.structs.replace(job, receipt=agreed))
        if agreed != message.receipt:  # the consumer's offer, now signed by us too
            return p.Countersigned(job_id=message.job_id, receipt=agreed)
        return p.Accepted(job_id=message.job_id)

    # --- running -----------------------------------------------------------------------

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
            book = self._resources.load()
            custom = next((c for c in book.customs if c.name == resource.gpu_resource), None)
            if custom is not None and custom.from_gpus is not None:
                cards = tuple(c for c in cards if c.index in set(custom.from_gpus))
        return cards[: resource.gpus]

    def _resource_of(self, job: api.JobInfo) -> api.ResourceSpec | None:
        """The provider-defined spec the job was quoted under (None: a default tier spec)."""
        if not job.resource_spec:
            return None
        try:
            book = self._resources.load()
        except EngineError:
            return None
        return next((s for s in book.specs if s.name == job.resource_spec), None)

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
        self._runs[job.job_id] = (executor, run)
        self._logs.use(job.job_id)
        try:
            if resume_from is not None:
                await executor.restore(run, resume_from)
            await executor.prepare(run, script)
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
        joblog.append(
            api.JobLogLine(seq=joblog.last_seq + 1 + i, stream="system", text=note, at=now)
            for i, note in enumerate(notes)
        )
        current = self.ctx.store.get_job(job.job_id) or job
        self._finish(current, status, executor.usage(run), results)

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
            if self._gpu_service is None:
                from engine.resources.gpu.service import GpuService

                self._gpu_service = GpuService(self.ctx.probes.gpu_sampler)
            gpu_status = self._gpu_service.status
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
        async for batch in executor.log_batches(run, 0):
            joblog.append(
                api.JobLogLine(seq=base + ln.seq, stream=ln.stream, text=ln.text, at=ln.at)
                for ln in batch
            )
            self._poke(run.job_id)
            await trio.sleep(0)  # a job that never stops printing must not starve the node

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
                cost_ntx=ntx_of(charge)
                if charge is not None
                else usage.cost(job.price_ntx_hour or 0.0),
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

    # --- following and results ---------------------------------------------------------

    async def _follow(self, stream: Any, follow: p.Follow, consumer: str) -> None:
        job = self.ctx.store.get_job(follow.job_id)
        if job is None or job.consumer != consumer:
            await self._reply(stream, consumer, p.refusal(follow.job_id, "no such job of yours"))
            return
        after = follow.after_seq
        joblog = self.job_log(follow.job_id)
        last_state: tuple[Any, ...] = ()
        sampled = -1.0  # the last live sample sent on this stream (a new follow: all kept)
        while True:
            changed = self._changed.setdefault(follow.job_id, trio.Event())
            job = self.ctx.store.get_job(follow.job_id) or job
            lines = _within_budget(joblog.read(after, p.MAX_LINES_PER_UPDATE))
            more = bool(lines) and bool(joblog.read(lines[-1].seq, 1))
            ring = self._usage.get(follow.job_id)
            usage = ring.since(sampled)[-p.MAX_USAGE_SAMPLES :] if ring is not None else ()
            # The end goes out with the last line: a consumer that sees "completed" has the
            # whole log, and it never follows a finished job again.
            shown = _before_the_end(job) if more and job.state in api.TERMINAL_STATES else job
            state = (shown.state, shown.checkpoint, shown.resumed_from, shown.reason)
            if lines or usage or state != last_state:
                await p.send(stream, self.ctx.identity, _update(shown, lines, usage))
                if lines:
                    after = lines[-1].seq
                if usage:
                    sampled = usage[-1].at
                last_state = state
                if more:
                    continue  # more backlog waiting
                if lines and job.state not in api.TERMINAL_STATES:
                    await trio.sleep(LINES_GATHER_S)
                    continue
            if job.state in api.TERMINAL_STATES and not joblog.read(after, 1):
                return
            with trio.move_on_after(FOLLOW_POLL_S * 10):
                await changed.wait()

    async def _delete_results(
        self, message: p.DeleteResults, consumer: str
    ) -> p.Accepted | p.Refusal:
        """`notebook delete`: the owner's finished job's files go (engine/jobs/notebooks.py)."""
        from engine.jobs.notebooks import delete_job_files, deletion_refusal

        job = self.ctx.store.get_job(message.job_id)
        if (why := deletion_refusal(job, consumer)) or job is None:
            return p.refusal(message.job_id, why)
        try:
            removed = await trio.to_thread.run_sync(delete_job_files, self.job_dir(job.job_id), job)
        except (EngineError, OSError) as exc:
            why = exc.message if isinstance(exc, EngineError) else str(exc)
            return p.refusal(message.job_id, f"could not delete job {job.job_id}'s files: {why}")
        log.info("job %s: its consumer deleted its files (%s)", job.job_id, ", ".join(removed))
        self._save(msgspec.structs.replace(job, results_dir=""))
        return p.Accepted(job_id=message.job_id)

    async def _send_results(self, stream: Any, fetch: p.FetchResults, consumer: str) -> None:
        job = self.ctx.store.get_job(fetch.job_id)
        if job is None or job.consumer != consumer:
            await self._reply(stream, consumer, p.refusal(fetch.job_id, "no such job of yours"))
            return
        if not job.results_dir or not Path(job.results_dir).exists():
            await self._reply(stream, consumer, p.refusal(fetch.job_id, "no results for this job"))
            return
        header = p.ResultsHeader(
            job_id=job.job_id, sha256=job.results_sha256, size=job.results_size
        )
        await p.send(stream, self.ctx.identity, header)
        with Path(job.results_dir).open("rb") as handle:
            while chunk := handle.read(p.RESULT_CHUNK):
                await stream.write(chunk)


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


def _within_budget(lines: list[api.JobLogLine]) -> list[api.JobLogLine]:
    """As many lines as fit one Update frame (long lines count by their size)."""
    used = 0
    for count, line in enumerate(lines):
        chars = min(len(line.text), p.MAX_LINE_CHARS)
        # Worst-case UTF-8 (4 bytes a character) unless ASCII, which most logs are: 4x for
        # every line made a flood of short lines take three times the Updates it needs.
        used += (chars if line.text.isascii() else chars * 4) + 48  # + framing
        if used > p.UPDATE_BUDGET_BYTES:
            return lines[: max(count, 1)]
    return lines


def _before_the_end(job: api.JobInfo) -> api.JobInfo:
    """A finished job as it looked while running: for the updates that carry its backlog."""
    return msgspec.structs.replace(
        job,
        state="running",
        reason="",
        exit_code=None,
        finished_at=None,
        metering=None,
        results_sha256="",
        results_size=0,
        receipt="",
    )


def _update(
    job: api.JobInfo,
    lines: list[api.JobLogLine],
    usage: tuple[api.UsageSample, ...] = (),
) -> p.Update:
    return p.Update(
        job_id=job.job_id,
        **{**p.progress_of(job), "reason": p.clip(job.reason)},
        receipt=job.receipt,
        usage=usage,
        lines=tuple(
            ln
            if len(ln.text) <= p.MAX_LINE_CHARS
            else msgspec.structs.replace(ln, text=ln.text[: p.MAX_LINE_CHARS])
            for ln in lines
        ),
    )


def _refused(*reasons: str) -> Verdict:
    return Verdict(tuple(reasons), None, 0.0)


async def _reset(stream: Any) -> None:
    with contextlib.suppress(Exception), trio.move_on_after(1.0):
        await stream.reset()


def _frame(raw: bytes) -> bytes:
    from engine.network.wire import frame

    return frame(raw)


def _taken_at(checkpoint: Any) -> float:
    """When a checkpoint was taken: its file's last write (the snapshot's end)."""
    try:
        return float(checkpoint.path.stat().st_mtime)
    except OSError:
        return time.time()
