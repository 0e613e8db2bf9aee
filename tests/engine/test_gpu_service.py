"""The GPU sampler service on a trio loop: on demand, 1 Hz, 5-minute history, idle stop."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing

from engine import api
from engine.resources.gpu.sampler import GpuSampler
from engine.resources.gpu.service import GpuService
from tests.doubles.fake_pynvml import FakeNvml


async def inline(fn: Callable[[], Any]) -> Any:
    return fn()


def make_service(
    tmp_path: Path, nvml: FakeNvml, *, threads: bool = False, **kwargs: float
) -> GpuService:
    def factory() -> GpuSampler:
        return GpuSampler(
            nvml,
            sysfs_root=tmp_path / "sys",
            kfd=tmp_path / "kfd",
            proc_root=tmp_path,
            clock=trio.current_time if not threads else __import__("time").time,
        )

    return GpuService(factory, to_thread=None if threads else inline, **kwargs)


def run(fn: object) -> None:
    trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))  # type: ignore[arg-type]


def test_nothing_runs_until_asked_then_it_stops_when_nobody_watches(tmp_path: Path) -> None:
    nvml = FakeNvml.with_gpus(2)
    service = make_service(tmp_path, nvml, interval_s=1.0, idle_stop_s=30.0)

    async def main() -> None:
        await trio.sleep(100)
        assert service.samples_taken == 0 and nvml.init_calls == 0
        reply = await service.status()
        assert len(reply.gpus) == 2 and reply.reason is None and reply.history == {}
        assert service.running and nvml.initialised == 1
        await trio.sleep(10.5)
        assert service.samples_taken == 11  # the first one, then one a second
        await trio.sleep(25)  # 35.5 s after the last ask: stopped, NVML released
        assert not service.running
        assert nvml.initialised == 0
        taken = service.samples_taken
        await trio.sleep(60)
        assert service.samples_taken == taken
        assert 29 <= taken <= 32
        # Asking again samples at once and starts over.
        await service.status()
        assert service.running and service.samples_taken == taken + 1

    run(main)


def test_history_is_five_minutes_of_columns_per_gpu(tmp_path: Path) -> None:
    nvml = FakeNvml.with_gpus(1)
    service = make_service(tmp_path, nvml, interval_s=1.0, history_s=300.0, idle_stop_s=30.0)
    uuid = nvml.gpus[0].uuid

    async def main() -> None:
        for second in range(400):  # a screen polling once a second for 400 s
            nvml.gpus[0].utilization_gpu = second % 101
            await service.status()
            await trio.sleep(1)
        reply = await service.status(history=True)
        history = reply.history[uuid]
        assert isinstance(history, api.GpuHistory)
        assert len(history.at) == 300
        assert history.at == tuple(float(t) for t in range(100, 400))
        assert len(history.utilization_gpu) == len(history.temperature_c) == 300
        assert history.power_w[-1] == 215.0 and history.temperature_c[-1] == 61.0
        assert history.memory_percent[-1] is not None
        assert history.utilization_gpu[-1] == float(399 % 101)

    run(main)


def test_a_vanished_gpu_keeps_its_history_until_it_ages_out(tmp_path: Path) -> None:
    nvml = FakeNvml.with_gpus(2)
    gone = nvml.gpus[1].uuid
    service = make_service(tmp_path, nvml, interval_s=1.0, history_s=20.0, idle_stop_s=1000.0)

    async def main() -> None:
        await service.status()
        await trio.sleep(5)
        del nvml.gpus[1]
        await trio.sleep(5)
        reply = await service.status(history=True)
        assert [g.uuid for g in reply.gpus] == [nvml.gpus[0].uuid]
        assert gone in reply.history
        await trio.sleep(30)
        assert gone not in (await service.status(history=True)).history

    run(main)


def test_sampling_runs_in_a_worker_thread(tmp_path: Path) -> None:
    import threading

    threads: set[str] = set()

    class Spy(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            threads.add(threading.current_thread().name)
            return super().nvmlDeviceGetCount()

    service = make_service(tmp_path, Spy.with_gpus(1), threads=True)

    async def main() -> None:
        await service.status()
        threads.discard("")
        assert threading.current_thread().name not in threads
        assert threads

    trio.run(main)
