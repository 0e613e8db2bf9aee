"""A running job's live CPU, RAM and GPU use (issue 22 §3): sampled by its provider every
``[jobs] usage_interval_s``, kept in a bounded ring and sent in the job's signed Updates; its
consumer keeps the last ones per job (memory only) for the job view's sparklines.

Where the figures come from: the executors already read every run about once a second for
its metering (engine/jobs/metering.py ``Meter``). Docker: the container's *streaming* stats,
read in a worker thread; a one-shot ``stats(stream=False)`` took 1.0-2.0 s here (dockerd
waits for a second reading to work out the CPU delta), while the stream gives one reading a
second and is read for the metering anyway. Process executor: /proc of the job's process
tree (psutil). This module takes two of those readings ``usage_interval_s`` apart: CPU cores
are the CPU seconds between them over the seconds between them, RAM the latest resident
figure. GPUs are read per device, for the job's own cards (``JobRun.gpus``), from the node's
GPU sampler (NVML and friends): a job holds its cards for its whole run, and a container's
processes have pids of its own namespace that NVML's per-process figures would not match.
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable

import trio

from engine import api
from engine.api.jobs import MAX_SAMPLE_CORES, MAX_SAMPLE_GPUS, MAX_SAMPLE_MB
from engine.jobs.protocol import MAX_USAGE_SAMPLES

log = logging.getLogger("nunet.jobs.usage")

KEEP = MAX_USAGE_SAMPLES  # samples per job, on both sides: ten minutes at the default 5 s
MIN_INTERVAL_S = 1.0  # the executors read about once a second: no finer figure exists
READ_S = 1.0  # before the first reading: how often to look for it
# A sample its consumer takes as new must not be ahead of the consumer's clock by more than
# this (clock skew): one far in the future would hide every honest sample after it.
SKEW_S = 300.0

Reading = tuple[float, float, float]  # (monotonic time, cumulative CPU s, RAM MB)
GpuStatusRead = Callable[[], Awaitable[api.GpuStatusReply]]


class UsageRing:
    """The last ``keep`` samples of one job, oldest first."""

    def __init__(self, keep: int = KEEP) -> None:
        self._samples: collections.deque[api.UsageSample] = collections.deque(maxlen=keep)

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, sample: api.UsageSample) -> None:
        self._samples.append(sample)

    def latest(self) -> api.UsageSample | None:
        return self._samples[-1] if self._samples else None

    def since(self, at: float) -> tuple[api.UsageSample, ...]:
        """The samples taken after ``at`` (all of them for -1: a new follow)."""
        return tuple(s for s in self._samples if s.at > at)

    def all(self) -> tuple[api.UsageSample, ...]:
        return tuple(self._samples)

    def take(self, samples: Iterable[api.UsageSample], now: float) -> api.UsageSample | None:
        """Consumer: keep the samples newer than the last kept and not from the future (a
        repeat after a reconnect, a provider's clock far ahead); the newest kept, else None."""
        newest = None
        last = self._samples[-1].at if self._samples else -math.inf
        for sample in samples:
            if last < sample.at <= now + SKEW_S:
                self._samples.append(sample)
                last = sample.at
                newest = sample
        return newest


class JobRings:
    """Rings of several jobs, at most ``jobs`` of them (the least recently fed goes)."""

    def __init__(self, jobs: int = 256, keep: int = KEEP) -> None:
        self._jobs, self._keep = jobs, keep
        self._rings: collections.OrderedDict[str, UsageRing] = collections.OrderedDict()

    def get(self, job_id: str) -> UsageRing | None:
        return self._rings.get(job_id)

    def ring(self, job_id: str) -> UsageRing:
        ring = self._rings.get(job_id)
        if ring is None:
            ring = self._rings[job_id] = UsageRing(self._keep)
            while len(self._rings) > self._jobs:
                self._rings.popitem(last=False)
        self._rings.move_to_end(job_id)
        return ring

    def drop(self, job_id: str) -> None:
        self._rings.pop(job_id, None)

    def samples(self, job_id: str) -> tuple[api.UsageSample, ...]:
        ring = self._rings.get(job_id)
        return ring.all() if ring is not None else ()


def cores_between(before: Reading, after: Reading) -> float | None:
    """CPU cores busy between two readings (None: no time passed between them)."""
    seconds = after[0] - before[0]
    if seconds <= 0:
        return None
    return round(max(0.0, after[1] - before[1]) / seconds, 2)


def gpu_figures(
    status: api.GpuStatusReply, gpus: tuple[api.GpuInfo, ...]
) -> tuple[float | None, int | None]:
    """The job's cards' mean utilisation (%) and summed memory in use (MB), as the node's
    sampler read them; None for what no card of the job reported."""
    wanted_uuids = {g.uuid for g in gpus if g.uuid}
    wanted_index = {(g.vendor, g.index) for g in gpus if not g.uuid}
    cards = [
        s for s in status.gpus if s.uuid in wanted_uuids or (s.vendor, s.index) in wanted_index
    ]
    loads = [s.utilization_gpu for s in cards if s.utilization_gpu is not None]
    memory = [s.memory_used_mb for s in cards if s.memory_used_mb is not None]
    load = round(min(100.0, max(0.0, sum(loads) / len(loads))), 1) if loads else None
    used = min(sum(memory), MAX_SAMPLE_MB) if memory else None
    return load, used


def sample_of(
    before: Reading,
    after: Reading,
    *,
    ram_limit_mb: int,
    gpus: int = 0,
    gpu: tuple[float | None, int | None] = (None, None),
    at: float | None = None,
) -> api.UsageSample | None:
    """One sample from two of the executor's readings, within the wire's bounds."""
    cores = cores_between(before, after)
    if cores is None:
        return None
    return api.UsageSample(
        at=time.time() if at is None else at,
        cpu_cores=min(cores, MAX_SAMPLE_CORES),
        ram_mb=min(max(0, round(after[2])), MAX_SAMPLE_MB),
        ram_limit_mb=min(max(0, ram_limit_mb), MAX_SAMPLE_MB),
        gpus=min(gpus, MAX_SAMPLE_GPUS),
        gpu_percent=gpu[0],
        gpu_mem_mb=gpu[1],
    )


async def watch(
    read: Callable[[], Reading | None],
    ring: UsageRing,
    interval_s: float,
    *,
    ram_limit_mb: int,
    gpus: tuple[api.GpuInfo, ...] = (),
    gpu_status: GpuStatusRead | None = None,
    on_sample: Callable[[api.UsageSample], object] | None = None,
) -> None:
    """Sample a running job into ``ring`` until cancelled (its run's end): a first reading
    as soon as the executor has one, then one sample per ``interval_s``."""
    interval_s = max(interval_s, MIN_INTERVAL_S)
    before: Reading | None = None
    while True:
        await trio.sleep(READ_S if before is None else interval_s)
        after = read()
        if after is None:
            continue
        if before is None:
            before = after
            continue
        gpu: tuple[float | None, int | None] = (None, None)
        if gpus and gpu_status is not None:
            try:
                gpu = gpu_figures(await gpu_status(), gpus)
            except Exception as exc:  # no GPU figure this time: the CPU and RAM still go
                log.debug("usage: reading the GPUs failed: %s", exc)
        sample = sample_of(before, after, ram_limit_mb=ram_limit_mb, gpus=len(gpus), gpu=gpu)
        if sample is None:
            continue  # the executor read nothing new meanwhile (a stalled stats stream)
        before = after
        ring.add(sample)
        if on_sample is not None:
            on_sample(sample)


__all__: list[str] = [
    "KEEP",
    "JobRings",
    "UsageRing",
    "cores_between",
    "gpu_figures",
    "sample_of",
    "watch",
]
