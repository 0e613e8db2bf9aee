"""Live GPU widgets: the history they share (``GpuFeed``), a card per GPU and a summary.

``GpuFeed`` turns GetGpuStatus replies into per-GPU history columns: the first reply brings
the engine's last 5 minutes (``history=True``), later ones append their one sample (the same
sample twice is kept once). ``GpuCard`` draws one GPU as four metric rows (bar, value, history
sparkline); ``GpuSummary`` is the one-line-per-GPU form on the provider dashboard.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from textual import work
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from engine.api import GetGpuStatus, GpuInfo, GpuSnapshot, GpuStatusReply
from engine.errors import EngineError
from nunet_tui.format import level_style, meter_bar, percent, safe, spark, thousands

HISTORY_S = 300.0
TEMP_WARN, TEMP_ERROR = 0.9, 0.97  # of the slowdown threshold
POWER_WARN, POWER_ERROR = 0.9, 0.98  # of the enforced power limit
DEFAULT_TEMP_TOP = 100.0


@dataclass
class Trace:
    utilization: deque[float | None]
    memory: deque[float | None]
    temperature: deque[float | None]
    power: deque[float | None]


@dataclass
class GpuFeed:
    """The latest GPU reply and each GPU's history, newest last, at most 5 minutes."""

    interval_s: float = 1.0
    latest: GpuStatusReply | None = None
    traces: dict[str, Trace] = field(default_factory=dict)
    _last_at: float | None = None

    @property
    def window(self) -> int:
        return max(1, math.ceil(HISTORY_S / max(self.interval_s, 0.05)))

    def take(self, reply: GpuStatusReply) -> None:
        self.interval_s = reply.interval_s or 1.0
        self.latest = reply
        if reply.history:
            for uuid, history in reply.history.items():
                trace = self._trace(uuid)
                for column, values in (
                    (trace.utilization, history.utilization_gpu),
                    (trace.memory, history.memory_percent),
                    (trace.temperature, history.temperature_c),
                    (trace.power, history.power_w),
                ):
                    column.clear()
                    column.extend(values)
            self._last_at = reply.at
            return
        if reply.at == self._last_at:
            return  # the engine has not sampled since the last look
        self._last_at = reply.at
        for gpu in reply.gpus:
            trace = self._trace(gpu.uuid)
            trace.utilization.append(gpu.utilization_gpu)
            trace.memory.append(gpu.memory_percent)
            trace.temperature.append(gpu.temperature_c)
            trace.power.append(gpu.power_draw_w)

    def trace(self, uuid: str) -> Trace:
        return self._trace(uuid)

    def _trace(self, uuid: str) -> Trace:
        trace = self.traces.get(uuid)
        if trace is None or trace.utilization.maxlen != self.window:
            n = self.window
            trace = self.traces[uuid] = Trace(
                deque(maxlen=n), deque(maxlen=n), deque(maxlen=n), deque(maxlen=n)
            )
        return trace


def short_gpu_name(name: str) -> str:
    """``NVIDIA GeForce RTX 3090`` → ``RTX 3090``: the vendor is said elsewhere."""
    for prefix in ("NVIDIA GeForce ", "NVIDIA ", "AMD Radeon ", "AMD ", "Intel(R) ", "Intel "):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def heat(gpu: GpuSnapshot) -> str:
    """The stronger of the temperature and power warnings ("" when all is well)."""
    styles = (
        level_style(gpu.temperature_c, gpu.temperature_limit_c, warn=TEMP_WARN, error=TEMP_ERROR),
        level_style(gpu.power_draw_w, gpu.power_limit_w, warn=POWER_WARN, error=POWER_ERROR),
    )
    if any("error" in s for s in styles):
        return "error"
    if any("warning" in s for s in styles):
        return "warning"
    return ""


class GpuCard(Widget):
    """One GPU: utilisation, memory, temperature and power as bar, value and history."""

    DEFAULT_CSS = """
    GpuCard {
        height: auto;
        border: round $primary 60%;
        border-title-style: bold;
        border-title-color: $text;
        border-subtitle-color: $text-muted;
        padding: 0 1;
        &.-warning { border: round $warning; }
        &.-error { border: round $error; }
    }
    """

    version: reactive[int] = reactive(0, layout=False)

    def __init__(self, feed: GpuFeed, gpu: GpuSnapshot, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.feed = feed
        self.gpu = gpu
        self._apply_titles()

    def update_gpu(self, gpu: GpuSnapshot) -> None:
        self.gpu = gpu
        self._apply_titles()
        self.version += 1

    def _apply_titles(self) -> None:
        gpu = self.gpu
        self.border_title = f"{gpu.index} · {safe(gpu.name)}"
        facts = []
        if gpu.compute_capability:
            facts.append(f"CC {safe(gpu.compute_capability)}")
        count = len(gpu.processes)
        facts.append(f"{count} process{'es' if count != 1 else ''}")
        self.border_subtitle = " · ".join(facts)
        level = heat(gpu)
        self.set_class(level == "warning", "-warning")
        self.set_class(level == "error", "-error")

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return 4

    def render(self) -> Content:
        gpu = self.gpu
        trace = self.feed.trace(gpu.uuid)
        window = self.feed.window
        width = self.size.width
        label_w, value_w = 5, 15
        rest = width - label_w - value_w - 2
        show_spark = rest >= 16
        bar_w = max(4, rest * 2 // 5) if show_spark else max(4, rest)
        spark_w = rest - bar_w if show_spark else 0

        def row(
            label: str,
            used: float,
            total: float,
            value: str,
            history: deque[float | None],
            top: float,
            style: str = "",
        ) -> Content:
            parts: list[Content | str | tuple[str, str]] = [
                (label.ljust(label_w), "bold"),
                meter_bar(round(used), round(total), bar_w),
                (value.rjust(value_w), style or "bold"),
            ]
            if show_spark:
                parts.append("  ")
                parts.append((spark(history, spark_w, top, window=window), style or "$accent"))
            return Content.assemble(*parts)

        util = gpu.utilization_gpu
        mem_total = gpu.memory_total_mb or 0
        mem_used = gpu.memory_used_mb or 0
        temp, temp_limit = gpu.temperature_c, gpu.temperature_limit_c
        power, power_limit = gpu.power_draw_w, gpu.power_limit_w
        temp_top = temp_limit or DEFAULT_TEMP_TOP
        power_top = power_limit or max([p for p in trace.power if p is not None] or [1.0])
        mem_value = f"{mem_used / 1024:.1f}/{mem_total / 1024:.0f} GB" if mem_total else "n/a"
        temp_value = "n/a" if temp is None else f"{temp:.0f}°C"
        if temp is not None and temp_limit:
            temp_value += f" / {temp_limit:.0f}"
        power_value = "n/a" if power is None else f"{power:.0f}"
        if power is not None:
            power_value += f" / {power_limit:.0f} W" if power_limit else " W"
        lines = [
            row("GPU", util or 0, 100, percent(util), trace.utilization, 100),
            row("MEM", mem_used, mem_total, mem_value, trace.memory, 100),
            row(
                "TEMP",
                temp or 0,
                temp_top,
                temp_value,
                trace.temperature,
                temp_top,
                level_style(temp, temp_limit, warn=TEMP_WARN, error=TEMP_ERROR),
            ),
            row(
                "PWR",
                power or 0,
                power_top,
                power_value,
                trace.power,
                power_top,
                level_style(power, power_limit, warn=POWER_WARN, error=POWER_ERROR),
            ),
        ]
        return Content("\n").join(lines)


class GpuSummary(Widget):
    """The provider dashboard's GPU lines: static facts at first, live once sampled."""

    DEFAULT_CSS = """
    GpuSummary {
        height: auto;
    }
    """

    version: reactive[int] = reactive(0, layout=True)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.gpus: tuple[GpuInfo, ...] = ()
        self.feed = GpuFeed()
        self._asked_history = False

    def on_mount(self) -> None:
        self.set_interval(1.0, self._poll)

    def set_gpus(self, gpus: tuple[GpuInfo, ...]) -> None:
        first = not self.gpus and gpus
        self.gpus = gpus
        self.version += 1
        if first:
            self._poll()

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        live = self.feed.latest.gpus if self.feed.latest is not None else ()
        return max(len(live) or len(self.gpus), 1)

    def _poll(self) -> None:
        if self.gpus and self.screen.is_current and self.display:
            self.sample()

    @work(exclusive=True, group="gpu-summary")
    async def sample(self) -> None:
        client = getattr(self.app, "client", None)
        if client is None:
            return
        try:
            reply = await client.call(GetGpuStatus(history=not self._asked_history))
        except EngineError:
            return
        self._asked_history = True
        self.feed.take(reply)
        self.version += 1

    def render(self) -> Content:
        live = self.feed.latest.gpus if self.feed.latest is not None else ()
        if not live:
            return Content("\n").join(
                Content.assemble(
                    (f"{gpu.index} ", "bold"),
                    safe(short_gpu_name(gpu.name)),
                    (f"  {thousands(gpu.vram_mb)} MB VRAM", "$text-muted"),
                )
                for gpu in self.gpus
            )
        width = self.size.width
        lines = []
        for gpu in live:
            name = safe(short_gpu_name(gpu.name))[:14].ljust(14)
            temp = "n/a" if gpu.temperature_c is None else f"{gpu.temperature_c:.0f}°C"
            power = "n/a" if gpu.power_draw_w is None else f"{gpu.power_draw_w:.0f}W"
            tail = f" {percent(gpu.utilization_gpu):>4} {temp:>5} {power:>5}"
            spark_w = max(width - 2 - 15 - len(tail) - 1, 0)
            trace = self.feed.trace(gpu.uuid)
            parts: list[Content | str | tuple[str, str]] = [
                (f"{gpu.index} ", "bold"),
                name,
                " ",
            ]
            if spark_w >= 6:
                parts.append(
                    (spark(trace.utilization, spark_w, 100, window=self.feed.window), "$accent")
                )
            level = heat(gpu)
            parts.append((tail, f"bold $text-{level}" if level else ""))
            lines.append(Content.assemble(*parts))
        return Content("\n").join(lines)
