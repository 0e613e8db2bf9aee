"""Job detail: a running job's live CPU, RAM and GPU use, one line (issue 22 §3).

The provider samples the job every few seconds (engine/jobs/live_usage.py); the figures are
the latest sample's, each after its own sparkline:

    CPU ▂▃▅▆▇ 1.4 cores  RAM ▃▃▄▄▅ 812 MB of 4,096  GPU ▅▇██▆ 63 % · 5.1 GB

A sparkline has one cell a sample, newest at the right, and grows up to the room there is
(at most 40 cells). Its scale is fixed from 0 (the job's RAM limit, 100 % for the GPU, for
the CPU the most cores it used, at least one): nunet_tui/format.py ``spark``, as the GPU
views draw theirs. Textual's ``Sparkline`` widget scales each line between its own lowest
and highest value, so a job holding 1.39 to 1.41 cores drew as empty and full bars.

A job without GPUs has no GPU part. Before the first sample the line says it is waiting;
once the job ended it is not shown. The history comes from ``GetJobUsage`` (the engine keeps
the last samples of a job, in memory), asked on the first show and then every few seconds
while the job runs; a consumer's job also brings its latest sample in each ``JobChanged``
(``JobInfo.usage``), added at once.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from textual import work
from textual.content import Content
from textual.widget import Widget

from engine.api import GetJobUsage, JobInfo, JobUsage, UsageSample
from engine.errors import EngineError
from nunet_tui.format import level_style, spark
from nunet_tui.viewmodels.usage import WAITING, cpu_text, gpu_text, ram_text

KEEP = 120  # samples drawn at most: the engine keeps as many (live_usage.KEEP)
POLL_S = 3.0  # how often the history is asked again while the job runs
GAP = 2  # spaces between the parts
MAX_SPARK = 40
FIRST = "waiting for the first sample"


def live(job: JobInfo | None) -> bool:
    return job is not None and job.state == "running"


class LiveUsage(Widget):
    """``follow(job)`` on every redraw of the job; draws itself from what it gathered."""

    DEFAULT_CSS = """
    LiveUsage {
        height: 1;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.display = False
        self.job: JobInfo | None = None
        self.samples: deque[UsageSample] = deque(maxlen=KEEP)
        self._polling = False

    # --- feeding ---------------------------------------------------------------------------

    def follow(self, job: JobInfo | None) -> None:
        self.job = job
        self.display = live(job)
        if job is not None and job.usage is not None:
            self.take((job.usage,))
        if live(job) and not self._polling:
            self._polling = True
            self.ask()
            self.set_interval(POLL_S, self._poll)
        self.refresh()

    def _poll(self) -> None:
        if live(self.job) and self.screen.is_current:
            self.ask()

    @work(exclusive=True, group="job-usage")
    async def ask(self) -> None:
        client: Any = getattr(self.app, "client", None)
        if client is None or self.job is None:
            return
        try:
            reply: JobUsage = await client.call(GetJobUsage(job_id=self.job.job_id))
        except EngineError:
            return  # an engine without the command, a job gone: the next beat asks again
        self.take(reply.samples)

    def take(self, samples: tuple[UsageSample, ...]) -> None:
        """Add the samples newer than the newest held (the history repeats what we have)."""
        newest = self.samples[-1].at if self.samples else -math.inf
        fresh = [s for s in samples if s.at > newest]
        if fresh:
            self.samples.extend(fresh)
            self.refresh()

    # --- drawing -----------------------------------------------------------------------------

    def render(self) -> Content:
        width = self.size.width
        if not self.samples:
            # The provider's own view samples the job itself.
            waiting = WAITING if self.job is None or self.job.role == "consumer" else FIRST
            return Content.styled(f"Usage  {waiting}", "$text-muted").truncate(width)
        latest = self.samples[-1]
        cores = [s.cpu_cores for s in self.samples]
        parts: list[tuple[str, list[float | None], float, str, str]] = [
            ("CPU", list(cores), max(1.0, math.ceil(max(cores))), cpu_text(latest), ""),
            (
                "RAM",
                [float(s.ram_mb) for s in self.samples],
                float(latest.ram_limit_mb or max(s.ram_mb for s in self.samples) or 1),
                ram_text(latest),
                level_style(latest.ram_mb, latest.ram_limit_mb, warn=0.8, error=0.95),
            ),
        ]
        if latest.gpus:
            parts.append(
                ("GPU", [s.gpu_percent for s in self.samples], 100.0, gpu_text(latest), "")
            )
        fixed = sum(len(label) + 2 + len(figure) for label, _, _, figure, _ in parts)
        fixed += GAP * (len(parts) - 1)
        # One cell a sample, up to the room there is: a short history draws a short line
        # beside its label, not a lone bar at the far end of an empty one.
        room = min(max((width - fixed) // len(parts), 0), MAX_SPARK)
        spark_w = min(room, len(self.samples))
        pieces: list[Content | str | tuple[str, str]] = []
        for index, (label, values, top, figure, style) in enumerate(parts):
            if index:
                pieces.append(" " * GAP)
            pieces.append((f"{label} ", "bold"))
            if spark_w:
                pieces.append((spark(values, spark_w, top, window=spark_w), "$accent"))
            pieces.append((f" {figure}", style))
        return Content.assemble(*pieces).truncate(width, ellipsis=True)


__all__ = ["LiveUsage", "live"]
