"""Job detail, provider side: the GPUs a running GPU job has, live, beside its log.

Shown only when it means something: the job runs here (provider role), asked for a GPU, is
not over, and the engine's GPU sampler reads at least one board. Otherwise the widget is not
displayed at all (no empty box). It polls ``GetGpuStatus`` once per sampling interval in a
worker (the first call brings the engine's recent history) and draws, per GPU, its load as a
sparkline, one cell per sample, newest at the right:

    wide (a panel beside the log)          narrow (a strip above the log)
    0 RTX 3090                    87%      GPU0 RTX 3090  ▁▂▅█▇▆█▇▆█▇   87%  18.0/24 GB  84°C
    ▁▂▅█▇▆█▇▆█▇▁▂▅█▇▆█▇▆█▇
    VRAM 18.0/24 GB · 84°C · 341 W

Cells are placed by each sample's time, not by count: a gap in sampling shows as a gap, and
the same samples always draw the same picture.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from textual import work
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from engine.api import GetGpuStatus, GpuSnapshot, GpuStatusReply, JobInfo
from engine.errors import EngineError
from nunet_tui.format import SPARK_BLOCKS, percent, safe
from nunet_tui.widgets.gpu_card import heat, short_gpu_name
from nunet_tui.widgets.job_state import is_terminal

KEEP = 240  # samples kept per GPU: wider than any sparkline drawn here
SHOWN = 4  # GPUs drawn; a rig with more says "+N more" (the GPU screen has them all)
WIDE = 60  # from this width on, one line per GPU (the strip above the log)


def uses_gpu(job: JobInfo | None) -> bool:
    """A GPU job this node runs, still running: the one whose GPUs are worth watching."""
    return (
        job is not None
        and job.role == "provider"
        and job.spec.device.lower() == "gpu"
        and not is_terminal(job)
    )


def time_spark(
    points: Iterable[tuple[float, float | None]],
    newest: float,
    width: int,
    interval: float,
    top: float = 100.0,
) -> str:
    """``width`` cells, one per ``interval`` seconds back from ``newest``; a cell shows the
    highest sample in it, a space where there was none."""
    cells: list[float | None] = [None] * max(width, 0)
    step = max(interval, 0.05)
    for at, value in points:
        back = round((newest - at) / step)
        if value is None or not 0 <= back < width:
            continue
        index = width - 1 - back
        current = cells[index]
        cells[index] = value if current is None else max(current, value)
    blocks = len(SPARK_BLOCKS)
    return "".join(
        " "
        if value is None
        else SPARK_BLOCKS[min(int(min(max(value / top, 0.0), 1.0) * blocks), blocks - 1)]
        for value in cells
    )


class JobGpus(Widget):
    """``follow(job, uuids)`` says which job and which GPUs (the onboarded ones)."""

    DEFAULT_CSS = """
    JobGpus {
        height: auto;
    }
    """

    version: reactive[int] = reactive(0, layout=True)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.display = False
        self.active = False
        self.uuids: tuple[str, ...] = ()
        self.latest: GpuStatusReply | None = None
        self.history: dict[str, deque[tuple[float, float | None]]] = {}
        self._asked_history = False
        self._timer_started = False

    # --- feeding ---------------------------------------------------------------------------

    def follow(self, job: JobInfo | None, uuids: tuple[str, ...] = ()) -> None:
        self.uuids = uuids
        active = uses_gpu(job)
        started = active and not self.active
        self.active = active
        self._show()
        if started:
            self.sample()

    def _poll(self) -> None:
        if self.active and self.screen.is_current:
            self.sample()

    @work(exclusive=True, group="job-gpus")
    async def sample(self) -> None:
        client: Any = getattr(self.app, "client", None)
        if client is None:
            return
        try:
            reply: GpuStatusReply = await client.call(GetGpuStatus(history=not self._asked_history))
            if not reply.history and self._missed_samples(reply):
                # Our beat came late (a busy machine) and the engine sampled more than once
                # meanwhile: its history fills the gap instead of a hole in the sparkline.
                reply = await client.call(GetGpuStatus(history=True))
        except EngineError:
            return  # no sampler answer: nothing shown, the next beat asks again
        self._asked_history = True
        self.take(reply)
        if not self._timer_started:
            self._timer_started = True
            self.set_interval(reply.interval_s or 1.0, self._poll)

    def _missed_samples(self, reply: GpuStatusReply) -> bool:
        if self.latest is None:
            return False
        return reply.at - self.latest.at > 1.5 * (reply.interval_s or 1.0)

    def take(self, reply: GpuStatusReply) -> None:
        previous = self.latest.at if self.latest is not None else None
        self.latest = reply
        for uuid, past in reply.history.items():
            points = self.history.setdefault(uuid, deque(maxlen=KEEP))
            points.clear()
            points.extend(zip(past.at, past.utilization_gpu, strict=False))
        if not reply.history and reply.at != previous:
            for gpu in reply.gpus:
                points = self.history.setdefault(gpu.uuid, deque(maxlen=KEEP))
                points.append((reply.at, gpu.utilization_gpu))
        self._show()

    def gpus(self) -> list[GpuSnapshot]:
        """The sampled GPUs the job may use: the onboarded ones (all when none is named)."""
        found = self.latest.gpus if self.latest is not None else ()
        chosen = [gpu for gpu in found if gpu.uuid in self.uuids]
        return chosen or list(found)

    def _show(self) -> None:
        gpus = self.gpus()
        self.display = self.active and bool(gpus)
        more = len(gpus) - SHOWN
        self.border_title = "GPU · live" if len(gpus) == 1 else "GPUs · live"
        self.border_subtitle = f"+{more} more · g" if more > 0 else ""
        self.version += 1

    # --- drawing -----------------------------------------------------------------------------

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        count = min(len(self.gpus()), SHOWN)
        if width >= WIDE:
            return max(count, 1)
        return max(count * 4 - 1, 1)

    def render(self) -> Content:
        width = self.size.width
        gpus = self.gpus()[:SHOWN]
        if width >= WIDE:
            return Content("\n").join(self._line(gpu, width) for gpu in gpus)
        return Content("\n\n").join(self._card(gpu, width) for gpu in gpus)

    def _spark(self, gpu: GpuSnapshot, width: int) -> str:
        interval = self.latest.interval_s if self.latest is not None else 1.0
        newest = self.latest.at if self.latest is not None else 0.0
        return time_spark(self.history.get(gpu.uuid, ()), newest, width, interval)

    def _card(self, gpu: GpuSnapshot, width: int) -> Content:
        level = heat(gpu)
        load = percent(gpu.utilization_gpu)
        name = safe(short_gpu_name(gpu.name))
        head = Content.assemble(
            (f"{gpu.index} ", "bold"),
            Content(name).truncate(max(width - len(load) - 3, 1), ellipsis=True, pad=True),
            " ",
            (load.rjust(len(load)), "bold"),
        )
        return Content("\n").join(
            [
                head,
                Content.styled(self._spark(gpu, width), "$accent"),
                Content.styled(
                    " · ".join(_facts(gpu)), f"bold $text-{level}" if level else "$text-muted"
                ).truncate(width, ellipsis=True),
            ]
        )

    def _line(self, gpu: GpuSnapshot, width: int) -> Content:
        level = heat(gpu)
        name = Content(safe(short_gpu_name(gpu.name))).truncate(14, ellipsis=True, pad=True)
        facts = "  ".join(_facts(gpu, vram_label=False))
        tail = f"  {percent(gpu.utilization_gpu):>4}  {facts}"
        spark_w = min(max(width - 6 - 14 - 1 - len(tail), 0), 60)
        return Content.assemble(
            (f"GPU{gpu.index} ".ljust(6), "bold"),
            name,
            " ",
            (self._spark(gpu, spark_w), "$accent"),
            (tail, f"bold $text-{level}" if level else ""),
        ).truncate(width, ellipsis=True)


def _facts(gpu: GpuSnapshot, *, vram_label: bool = True) -> list[str]:
    facts: list[str] = []
    if gpu.memory_total_mb:
        used = (gpu.memory_used_mb or 0) / 1024
        vram = f"{used:.1f}/{gpu.memory_total_mb / 1024:.0f} GB"
        facts.append(f"VRAM {vram}" if vram_label else vram)
    if gpu.temperature_c is not None:
        facts.append(f"{gpu.temperature_c:.0f}°C")
    if gpu.power_draw_w is not None:
        facts.append(f"{gpu.power_draw_w:.0f} W")
    return facts


__all__ = ["JobGpus", "time_spark", "uses_gpu"]
