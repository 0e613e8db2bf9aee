"""Live usage (issue 22 §3): a real process job's CPU and RAM, sampled as its provider does
(engine/jobs/live_usage.py), and the samples' way over the wire, bounded."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing
from nacl.signing import SigningKey

from engine import api
from engine.api import jobs as jobs_api
from engine.identity import Identity
from engine.jobs import live_usage
from engine.jobs import protocol as p
from engine.jobs.executors.base import Limits, running
from engine.jobs.executors.process import ProcessExecutor
from tests.engine.test_jobs_process import new_run, spec

# A busy loop keeps a core busy (as much of one as the machine gives it) and 200 MB stay
# resident (each page written).
BURN = """
import time
block = bytearray(200 << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
print("allocated", flush=True)
end = time.time() + 120
while time.time() < end:
    sum(range(10000))
"""
LIMITS = Limits(memory_mb=1024, cpu_cores=1.0, timeout_s=120.0, pids=128)
IDENTITY = Identity(SigningKey(b"\x05" * 32))


def test_a_burning_process_shows_its_cores_and_its_memory(tmp_path: Path) -> None:
    executor = ProcessExecutor()
    run = new_run(tmp_path, spec(), LIMITS)
    ring = live_usage.UsageRing()
    seen: list[api.UsageSample] = []
    enough = trio.Event()

    def took(sample: api.UsageSample) -> None:
        seen.append(sample)
        if sample.cpu_cores >= 0.3 and sample.ram_mb >= 150:
            enough.set()

    async def main() -> None:
        async with running(executor), trio.open_nursery() as nursery:
            await executor.prepare(run, BURN.encode())
            await executor.start(run)
            nursery.start_soon(
                lambda: live_usage.watch(
                    lambda: executor.reading(run),
                    ring,
                    1.0,
                    ram_limit_mb=LIMITS.memory_mb,
                    on_sample=took,
                )
            )
            with trio.fail_after(60):
                await enough.wait()
            await executor.cancel(run)
            nursery.cancel_scope.cancel()

    trio.run(main)
    latest = ring.latest()
    assert latest is not None and latest is seen[-1]
    assert latest.cpu_cores >= 0.3 and latest.ram_mb >= 150
    assert latest.ram_limit_mb == 1024 and latest.gpus == 0 and latest.gpu_percent is None


def test_cores_are_cpu_seconds_over_wall_seconds() -> None:
    assert live_usage.cores_between((10.0, 4.0, 100.0), (12.0, 7.0, 120.0)) == 1.5
    assert live_usage.cores_between((10.0, 4.0, 100.0), (10.0, 5.0, 100.0)) is None
    # A late reading never makes CPU time go backwards into a negative figure.
    assert live_usage.cores_between((10.0, 4.0, 0.0), (11.0, 3.0, 0.0)) == 0.0
    sample = live_usage.sample_of(
        (0.0, 0.0, 0.0), (1.0, 1e9, 1e12), ram_limit_mb=1 << 30, gpus=500, at=1.0
    )
    assert sample is not None  # absurd readings are held within the wire's bounds
    assert sample.cpu_cores == jobs_api.MAX_SAMPLE_CORES and sample.ram_mb == jobs_api.MAX_SAMPLE_MB
    assert sample.gpus == jobs_api.MAX_SAMPLE_GPUS


def test_a_job_s_gpus_are_its_own_cards_averaged_and_summed() -> None:
    def card(index: int, uuid: str, load: float | None, used: int | None) -> api.GpuSnapshot:
        return api.GpuSnapshot(
            index=index, vendor="nvidia", name="RTX", uuid=uuid, utilization_gpu=load,
            memory_used_mb=used, memory_total_mb=24576,
        )  # fmt: skip

    status = api.GpuStatusReply(
        gpus=(card(0, "GPU-a", 40.0, 1000), card(1, "GPU-b", 80.0, 3000), card(2, "GPU-c", 5, 7))
    )
    mine = (
        api.GpuInfo(index=0, vendor="nvidia", name="RTX", vram_mb=24576, uuid="GPU-a"),
        api.GpuInfo(index=1, vendor="nvidia", name="RTX", vram_mb=24576, uuid="GPU-b"),
    )
    assert live_usage.gpu_figures(status, mine) == (60.0, 4000)
    by_index = (api.GpuInfo(index=2, vendor="nvidia", name="RTX", vram_mb=1),)
    assert live_usage.gpu_figures(status, by_index) == (5.0, 7)
    assert live_usage.gpu_figures(api.GpuStatusReply(), mine) == (None, None)


def test_the_consumer_keeps_new_samples_only_and_none_from_the_future() -> None:
    ring = live_usage.UsageRing(keep=3)
    now = 1_000.0
    first = [api.UsageSample(at=t) for t in (10.0, 20.0)]
    assert ring.take(first, now) == first[-1]
    # A reconnect sends the provider's ring again: nothing repeats.
    assert ring.take([*first, api.UsageSample(at=30.0)], now) == api.UsageSample(at=30.0)
    assert [s.at for s in ring.all()] == [10.0, 20.0, 30.0]
    # A sample ahead of our clock would hide every honest one after it: dropped.
    assert ring.take([api.UsageSample(at=now + 10 * live_usage.SKEW_S)], now) is None
    assert ring.take([api.UsageSample(at=40.0)], now) is not None
    assert [s.at for s in ring.all()] == [20.0, 30.0, 40.0]  # bounded
    assert [s.at for s in ring.since(25.0)] == [30.0, 40.0]


def test_jobs_rings_are_bounded_in_jobs_too() -> None:
    rings = live_usage.JobRings(jobs=2)
    for job in ("a", "b", "c"):
        rings.ring(job).add(api.UsageSample(at=1.0))
    assert rings.get("a") is None and rings.samples("c") == (api.UsageSample(at=1.0),)


def _update(**fields: object) -> dict[str, object]:
    return {"t": "update", "v": 1, "job_id": "0123456789ab", "state": "running", **fields}


def _sealed(payload: dict[str, object]) -> bytes:
    from engine.domain import wire

    return wire.seal_payload(IDENTITY, p.KIND, msgspec.msgpack.encode(payload))


def test_samples_cross_the_wire_signed_and_older_peers_skip_them() -> None:
    samples = tuple(
        api.UsageSample(at=float(t), cpu_cores=1.5, ram_mb=812, ram_limit_mb=4096, gpus=1,
                        gpu_percent=63.0, gpu_mem_mb=5200)
        for t in range(3)
    )  # fmt: skip
    sent = p.encode(IDENTITY, p.Update(job_id="0123456789ab", state="running", usage=samples))
    got, _ = p.decode(sent, IDENTITY.peer_id)
    assert isinstance(got, p.Update) and got.usage == samples

    class OlderUpdate(p.JobMessage, tag="update", frozen=True):  # a peer before issue 22
        state: str

    from engine.domain import wire

    old = msgspec.msgpack.decode(
        wire.open_payload(sent, p.MAX_MESSAGE_BYTES).payload, type=OlderUpdate
    )
    assert old.state == "running"
    # ... and what an older provider sends reads as no samples.
    got, _ = p.decode(_sealed(_update()), IDENTITY.peer_id)
    assert isinstance(got, p.Update) and got.usage == ()


@pytest.mark.parametrize(
    "usage",
    [
        [{"at": float(t)} for t in range(p.MAX_USAGE_SAMPLES + 1)],  # too many
        [{"at": 1.0, "cpu_cores": -1.0}],
        [{"at": 1.0, "cpu_cores": 1e9}],
        [{"at": 1.0, "ram_mb": 1 << 40}],
        [{"at": 1.0, "gpu_percent": 101.0}],
        [{"at": -5.0}],
        [{"at": 1.0, "gpus": 10_000}],
        [{"at": 1.0, "note": "x" * 1000}],  # a field no sample has
    ],
)
def test_out_of_bound_samples_are_refused_at_the_boundary(usage: object) -> None:
    with pytest.raises(p.ProtocolError):
        p.decode(_sealed(_update(usage=usage)), IDENTITY.peer_id)


def test_a_gpu_job_s_samples_carry_its_own_cards_from_the_gpu_sampler(tmp_path: Path) -> None:
    from engine.resources.gpu.sampler import GpuSampler
    from engine.resources.gpu.service import GpuService
    from tests.doubles.fake_pynvml import FakeNvml

    nvml = FakeNvml.with_gpus(2)
    nvml.gpus[1].utilization_gpu, nvml.gpus[1].memory_used = 63, 5200 << 20
    service = GpuService(
        lambda: GpuSampler(nvml, sysfs_root=tmp_path / "sys", kfd=tmp_path / "kfd",
                           proc_root=tmp_path, clock=trio.current_time),
        to_thread=_inline,
    )  # fmt: skip
    mine = (api.GpuInfo(index=1, vendor="nvidia", name="A100", vram_mb=81920,
                        uuid=nvml.gpus[1].uuid),)  # fmt: skip
    readings = iter([(0.0, 0.0, 100.0), (5.0, 10.0, 300.0)])
    ring = live_usage.UsageRing()

    async def main() -> None:
        with trio.move_on_after(30):
            await live_usage.watch(
                lambda: next(readings, None), ring, 5.0, ram_limit_mb=2048, gpus=mine,
                gpu_status=service.status,
            )  # fmt: skip

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    (only,) = ring.all()
    assert (only.cpu_cores, only.ram_mb, only.ram_limit_mb) == (2.0, 300, 2048)
    assert (only.gpus, only.gpu_percent, only.gpu_mem_mb) == (1, 63.0, 5200)


async def _inline(fn: object) -> object:
    return fn()  # type: ignore[operator]
