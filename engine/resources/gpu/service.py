"""The engine's GPU sampler service: 1 Hz samples and 5 minutes of history, only on demand.

Nothing runs until someone asks (``status()``: the GPU screen polls it once a second, the CLI
once, ``--watch`` every second). The first ask samples at once and starts a loop on the
engine's trio loop; each NVML/sysfs read runs in a worker thread (``trio.to_thread``). The
loop stops, and releases NVML, ``idle_stop_s`` after the last ask, so an idle node costs no
CPU. History is kept per GPU UUID in ring buffers (``deque(maxlen=...)``) of
(time, utilisation, memory %, temperature, power).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from engine.api import GpuHistory, GpuStatus, GpuStatusReply

log = logging.getLogger("nunet.gpu")

INTERVAL_S = 1.0
HISTORY_S = 300.0
IDLE_STOP_S = 30.0

Point = tuple[float, float | None, float | None, float | None, float | None]


class Sampler(Protocol):
    def sample(self) -> GpuStatus: ...

    def close(self) -> None: ...


class GpuService:
    def __init__(
        self,
        sampler_factory: Callable[[], Sampler],
        *,
        interval_s: float = INTERVAL_S,
        history_s: float = HISTORY_S,
        idle_stop_s: float = IDLE_STOP_S,
        to_thread: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
    ) -> None:
        self._factory = sampler_factory
        # Tests with a virtual clock run the (fake) sampler inline: trio's MockClock would
        # jump ahead while a worker thread runs.
        self._to_thread = to_thread or trio.to_thread.run_sync
        self.interval_s = interval_s
        self.history_s = history_s
        self.idle_stop_s = idle_stop_s
        self._points = max(1, math.ceil(history_s / interval_s))
        self._sampler: Sampler | None = None
        self._lock = trio.Lock()
        self._latest: GpuStatus | None = None
        self._history: dict[str, deque[Point]] = {}
        self._running = False
        self._last_interest = -math.inf
        self.samples_taken = 0

    @property
    def running(self) -> bool:
        return self._running

    async def status(self, history: bool = False) -> GpuStatusReply:
        """The latest sample (fresh if the loop was idle); keeps the loop alive."""
        self._last_interest = trio.current_time()
        if not self._running:
            await self._sample_once()
            self._start_loop()
        latest = self._latest or GpuStatus(reason="no sample yet")
        return GpuStatusReply(
            gpus=latest.gpus,
            reason=latest.reason,
            at=latest.at,
            interval_s=self.interval_s,
            history=self.history() if history else {},
        )

    def history(self) -> dict[str, GpuHistory]:
        result: dict[str, GpuHistory] = {}
        for uuid, points in self._history.items():
            columns = list(zip(*points, strict=True)) if points else [()] * 5
            result[uuid] = GpuHistory(
                at=tuple(columns[0]),
                utilization_gpu=tuple(columns[1]),
                memory_percent=tuple(columns[2]),
                temperature_c=tuple(columns[3]),
                power_w=tuple(columns[4]),
            )
        return result

    # --- the loop ------------------------------------------------------------------------------

    def _start_loop(self) -> None:
        if self._running:
            return
        self._running = True
        # A system task: it belongs to the engine's trio run (cancelled when the engine stops)
        # without needing a nursery from the node; it ends itself when nobody watches.
        trio.lowlevel.spawn_system_task(self._loop, name="gpu-sampler")

    async def _loop(self) -> None:
        try:
            next_tick = trio.current_time() + self.interval_s
            while trio.current_time() - self._last_interest < self.idle_stop_s:
                await trio.sleep_until(next_tick)
                await self._sample_once()
                next_tick += self.interval_s
                now = trio.current_time()
                if next_tick < now:  # we fell behind (suspend, slow driver): don't burst
                    next_tick = now + self.interval_s
        except trio.Cancelled:
            raise
        except Exception:
            log.exception("the GPU sampler loop failed; it restarts on the next request")
        finally:
            self._running = False
            self._close_sampler()

    async def _sample_once(self) -> None:
        async with self._lock:
            if self._sampler is None:
                self._sampler = await self._to_thread(self._factory)
            status = await self._to_thread(self._sampler.sample)
            self.samples_taken += 1
        self._latest = status
        self._record(status)

    def _close_sampler(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            try:
                sampler.close()  # nvmlShutdown: quick, and nothing else is sampling now
            except Exception:
                log.exception("closing the GPU sampler failed")

    def _record(self, status: GpuStatus) -> None:
        seen = set()
        for gpu in status.gpus:
            seen.add(gpu.uuid)
            points = self._history.get(gpu.uuid)
            if points is None:
                points = self._history[gpu.uuid] = deque(maxlen=self._points)
            points.append(
                (
                    status.at,
                    gpu.utilization_gpu,
                    gpu.memory_percent,
                    gpu.temperature_c,
                    gpu.power_draw_w,
                )
            )
        # A GPU that is gone keeps its history until it has aged out of the window.
        for uuid in [u for u in self._history if u not in seen]:
            points = self._history[uuid]
            if not points or status.at - points[-1][0] > self.history_s:
                del self._history[uuid]
