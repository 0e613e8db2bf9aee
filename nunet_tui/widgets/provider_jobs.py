"""The provider dashboard's jobs: "Running job" beside "Recent jobs", fed from one place.

``ProviderJobs`` reads the node's jobs (``ListJobs``) and the newest lines of each running
job's log (``GetJobLogs(newest=True)``: just the tail, however long the log is) when it
appears or comes back on top; then it follows the ``JobChanged`` and ``JobLogEvent`` events its
screen hands it (``job_changed``, ``log_lines``: the provider's engine sends a running job's
lines as events, batched, engine/jobs/log_events.py). A gap in a job's line numbers (events
missed) is read again. Every engine call runs in a worker; the panels only draw what is held
here.

Hidden while this node has never run a job for anyone; when nothing runs, "Recent jobs" takes
the whole row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.containers import Container

from engine.api import GetJobLogs, JobInfo, JobList, JobLogLine, JobLogs, ListJobs
from engine.errors import EngineError
from nunet_tui.widgets.job_state import is_terminal
from nunet_tui.widgets.recent_runs import RecentRuns
from nunet_tui.widgets.running_jobs import LogTail, RunningJobs

TAIL_LINES = 200  # read per tail: enough to find the last progress line among chatter
TICK_S = 1.0  # the elapsed times move on
REDRAW_S = 0.25  # JobChanged bursts are drawn at most this often


class ProviderJobs(Container):
    DEFAULT_CSS = """
    ProviderJobs {
        layout: grid;
        grid-size: 2;
        grid-columns: 1fr 1fr;
        grid-rows: auto;
        grid-gutter: 0 1;
        height: auto;
        &.-one { grid-size: 1; grid-columns: 1fr; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.display = False  # until it knows of a job: the dashboard looks as before
        self.jobs: dict[str, JobInfo] = {}
        self.tails: dict[str, LogTail] = {}
        self._reading = False
        self._show_scheduled = False
        self._ready = False  # children mounted: the screen may ask to reload before that

    def compose(self) -> ComposeResult:
        yield RunningJobs(id="running")
        yield RecentRuns(id="recent-runs")

    def on_mount(self) -> None:
        self._ready = True
        self.reload()
        self.set_interval(TICK_S, self._tick)

    def _now(self) -> float:
        clock: Callable[[], float] | None = getattr(self.app, "clock", None)
        return clock() if clock is not None else 0.0

    def running_jobs(self) -> list[JobInfo]:
        return sorted(
            (job for job in self.jobs.values() if not is_terminal(job)),
            key=lambda j: (-j.created_at, j.job_id),
        )

    # --- reading -------------------------------------------------------------------------

    @work(exclusive=True, group="refresh")
    async def reload(self) -> None:
        """Read the jobs again (on mount and when the dashboard comes back on top)."""
        client: Any = getattr(self.app, "client", None)
        if client is None or not self._ready:
            return
        try:
            reply: JobList = await client.call(ListJobs())
        except EngineError:
            return
        self.jobs = {job.job_id: job for job in reply.jobs if job.role == "provider"}
        self.show()
        await self._read_tails()

    def job_changed(self, job: JobInfo) -> None:
        if job.role != "provider":
            return
        self.jobs[job.job_id] = job
        if is_terminal(job):
            self.tails.pop(job.job_id, None)
        if not self._show_scheduled:
            self._show_scheduled = True
            self.set_timer(REDRAW_S, self.show)

    def log_lines(self, job_id: str, lines: tuple[JobLogLine, ...]) -> None:
        """A running job's new lines, as its engine sent them (``JobLogEvent``)."""
        job = self.jobs.get(job_id)
        if job is None or is_terminal(job) or not lines:
            return
        tail = self.tails.setdefault(job_id, LogTail())
        if tail.last_seq >= 0 and lines[0].seq > tail.last_seq + 1:
            self.read_tails()  # events were missed (the screen was covered): read the tail
            return
        tail.take(lines)
        if not self._show_scheduled:
            self._show_scheduled = True
            self.set_timer(REDRAW_S, self.show)

    def _tick(self) -> None:
        if self.running_jobs() and self.screen.is_current:
            self.show()  # the elapsed time moves on

    @work(group="provider-job-tails")
    async def read_tails(self) -> None:
        await self._read_tails()

    async def _read_tails(self) -> None:
        client: Any = getattr(self.app, "client", None)
        if client is None or self._reading:
            return  # the last read is still out (a slow daemon): it reads the newest
        self._reading = True
        try:
            for job in self.running_jobs():
                tail = self.tails.setdefault(job.job_id, LogTail())
                try:
                    page: JobLogs = await client.call(
                        GetJobLogs(
                            job_id=job.job_id,
                            after_seq=tail.last_seq,
                            limit=TAIL_LINES,
                            newest=True,
                        )
                    )
                except EngineError:
                    continue  # shown as "no output yet"; the next event or read tries again
                tail.take(page.lines)
        finally:
            self._reading = False
        self.show()

    # --- showing -------------------------------------------------------------------------

    def show(self) -> None:
        self._show_scheduled = False
        if not self._ready:
            return
        now = self._now()
        running = self.running_jobs()
        recent = sorted(self.jobs.values(), key=lambda j: (-j.created_at, j.job_id))
        self.display = bool(recent)
        self.set_class(not running, "-one")
        self.query_one(RunningJobs).show(running, self.tails, now)
        self.query_one(RecentRuns).show(recent, now)


__all__ = ["ProviderJobs"]
