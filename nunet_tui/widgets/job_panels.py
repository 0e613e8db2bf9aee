"""The consumer dashboard's job panel: recent jobs (the provider's are in provider_jobs.py).

Each reads ``ListJobs`` when it appears (``reload``) and then follows ``JobChanged`` events
that its screen hands it (``job_changed``). A ``clock`` gives "now" (the app's, so pictures
can pin it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from engine.api import JobInfo, JobList, ListJobs
from engine.errors import EngineError
from nunet_tui.format import safe
from nunet_tui.widgets.job_state import (
    FAILED_STATES,
    cost,
    duration,
    hms,
    is_terminal,
    job_name,
    state_text,
)

RECENT = 5


class _JobsPanel(Vertical):
    """A dashboard panel fed with the node's jobs."""

    role: str = "consumer"

    def __init__(self, *, id: str | None = None, classes: str | None = "panel") -> None:
        super().__init__(id=id, classes=classes)
        self.jobs: dict[str, JobInfo] = {}
        self.show_scheduled = False

    def _now(self) -> float:
        clock: Callable[[], float] | None = getattr(self.app, "clock", None)
        return clock() if clock is not None else 0.0

    def on_mount(self) -> None:
        self.reload()
        self.set_interval(1.0, self._tick)

    @work(exclusive=True, group="refresh")
    async def reload(self) -> None:
        client: Any = getattr(self.app, "client", None)
        if client is None:
            return
        try:
            reply: JobList = await client.call(ListJobs())
        except EngineError:
            return
        self.jobs = {job.job_id: job for job in reply.jobs if job.role == self.role}
        self.show()

    def job_changed(self, job: JobInfo) -> None:
        if job.role == self.role:
            self.jobs[job.job_id] = job
            if not self.show_scheduled:  # a running job changes with every batch of lines
                self.show_scheduled = True
                self.set_timer(0.25, self._show_now)

    def _show_now(self) -> None:
        self.show_scheduled = False
        self.show()

    def _tick(self) -> None:
        if any(not is_terminal(job) for job in self.jobs.values()):
            self.show()

    def show(self) -> None:
        """Redraw; the subclasses say how."""


class RecentJobs(_JobsPanel):
    """Consumer dashboard: the last five jobs with their state; ``j`` for all."""

    role = "consumer"
    DEFAULT_CSS = """
    RecentJobs #recent-jobs { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="recent-jobs", markup=False)

    def on_mount(self) -> None:
        self.border_title = "Recent jobs"
        super().on_mount()
        self.show()

    def show(self) -> None:
        lines = self.query_one("#recent-jobs", Static)
        recent = sorted(self.jobs.values(), key=lambda j: (-j.created_at, j.job_id))[:RECENT]
        self.border_subtitle = "j for all" if recent else ""
        if not recent:
            lines.update(
                Content.assemble(
                    "No jobs yet. Press ", ("s", "bold $text-accent"), " to submit one."
                )
            )
            return
        now = self._now()
        rows: list[Content] = []
        for job in recent:
            state = state_text(job.state)
            if job.state in FAILED_STATES and job.reason:
                last = Content.styled(safe(job.reason), "$text-error")
            else:
                last = cost(job)
            rows.append(
                Content.assemble(
                    (job.job_id[:6], "bold"),
                    "  ",
                    f"{job_name(job, 20):<20}",
                    "  ",
                    state,
                    " " * max(12 - len(state.plain), 1),
                    f"{hms(duration(job, now))}  ",
                    last,
                )
            )
        lines.update(Content("\n").join(rows))


__all__ = ["RecentJobs"]
