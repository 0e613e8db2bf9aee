"""A job's log, followed: the backlog in pages, then live lines as they arrive, searchable.

``JobLogPanel`` owns everything about one job's log in a view: it reads the backlog in pages
of ``GetJobLogs`` (only the newest ``MAX_LINES`` when the log is longer), then takes the
``JobLogEvent``s its screen hands it (both sides emit them: the consumer per signed Update,
the provider in batches, engine/jobs/log_events.py). Events come from the engine's thread
through ``post_message``, possibly hundreds a second; the panel only collects their lines and
writes them to its ``JobLogView`` in one batch per frame (``FLUSH_S``), so the UI does the
same small amount of work whether a job prints ten lines a second or ten thousand. Lines are
numbered by the provider: a gap (events missed while a dialog was on top) is read from the
engine, and nothing is shown twice.

It also owns following and pausing (``toggle_follow``), the search box (``open_search``,
``find``, ``close_search``) and its own title ("Log · following", the line count, the
search). Its keys (``BINDINGS``: f, /, n, N) are declared by the screen, which keeps the
footer's order, and each of the screen's actions is one call here. A screen hands it events
and the job (``job``: where a long log starts); ``Written`` says new lines were shown (a
failed job's traceback panel reads ``tail``).
"""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input

from engine.api import GetJobLogs, JobInfo, JobLogEvent, JobLogLine, JobLogs
from engine.errors import EngineError
from nunet_tui.format import safe, thousands
from nunet_tui.widgets.job_log import MAX_LINES, JobLogView

FLUSH_S = 1 / 30  # live lines are written at most this often
FRAME_LINES = 10_000  # at most this many per write: each frame's work stays small
PAGE = 20_000  # lines per GetJobLogs call
TAIL_KEPT = 200  # the newest lines kept as text (for a traceback panel)

# The screen declares them (its footer's order); its actions call the panel.
BINDINGS: list[BindingType] = [
    Binding(
        "f",
        "follow",
        "Follow/pause",
        tooltip="Follow new lines, or hold the view",
        id="job.follow",
    ),
    Binding(
        "slash",
        "search",
        "Search",
        key_display="/",
        tooltip="Find text in the log",
        id="job.search",
    ),
    Binding("n", "find(False)", "Next", show=False, id="job.find_next"),
    Binding("N", "find(True)", "Previous", show=False, id="job.find_previous"),
]


def log_text(line: JobLogLine) -> str:
    return f"» {line.text}" if line.stream == "system" else line.text


class JobLogPanel(Vertical):
    """One job's log (``job_id``): a ``JobLogView`` and its search box, titled."""

    class Written(Message):
        """New lines were shown (``JobLogPanel.tail`` has them)."""

    def __init__(self, job_id: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Log"
        self.job_id = job_id
        self.job: JobInfo | None = None
        """Set by the screen: a long log is read from where its newest MAX_LINES start."""
        self.last_seq = -1
        self.pending: list[JobLogLine] = []
        self.loaded = False  # the backlog is in: live lines may be written
        self.catching_up = False
        self.flush_scheduled = False
        self.tail: list[str] = []  # the newest lines (for the traceback panel)

    def compose(self) -> ComposeResult:
        yield JobLogView(id="job-log")
        yield Input(placeholder="search the log (Enter: done, Esc: clear)", id="log-search")

    @property
    def view(self) -> JobLogView:
        return self.query_one(JobLogView)

    @property
    def search_box(self) -> Input:
        return self.query_one("#log-search", Input)

    def on_mount(self) -> None:
        self.search_box.display = False
        self.show_state()

    # --- reading -------------------------------------------------------------------------

    async def catch_up(self) -> str | None:
        """Read the lines after ``last_seq`` in pages (the backlog, or a gap). Returns why
        the backlog could not be read (None: read, or only a later gap failed)."""
        if self.catching_up:
            return None
        problem = None
        self.catching_up = True
        try:
            after = self.last_seq
            if not self.loaded and self.job is not None and self.job.log_lines > MAX_LINES:
                # Only the newest lines fit: start there (the CLI prints the whole log).
                after = self.job.log_lines - MAX_LINES - 1
                self.view.dropped = after + 1
                self.view.total = after + 1
            client: Any = getattr(self.app, "client", None)
            while client is not None:
                try:
                    page: JobLogs = await client.call(
                        GetJobLogs(job_id=self.job_id, after_seq=after, limit=PAGE)
                    )
                except EngineError as exc:
                    if not self.loaded:
                        problem = safe(exc.message)
                    break
                self._write(page.lines)
                after = max(after, page.next_seq)
                if len(page.lines) < PAGE:
                    break
        finally:
            self.catching_up = False
            self.loaded = True
        self._flush()
        return problem

    @work(group="job-log-read", exclusive=True)
    async def read_missing(self) -> None:
        """Read what the engine has that this view has not (a gap; a job's last lines)."""
        await self.catch_up()

    def take(self, event: JobLogEvent) -> None:
        """Live lines (this job's): written with the next frame's batch."""
        if event.job_id != self.job_id:
            return
        self.pending.extend(event.lines)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.set_timer(FLUSH_S, self._flush)

    # --- writing -------------------------------------------------------------------------

    def _flush(self) -> None:
        self.flush_scheduled = False
        if not self.loaded or self.catching_up or not self.pending:
            return
        pending = self.pending
        if len(pending) > MAX_LINES:
            # Far behind (the UI was starved): only the newest lines could be kept anyway.
            skipped = len(pending) - MAX_LINES
            self.view.dropped += skipped
            self.view.total += skipped
            self.last_seq = pending[skipped - 1].seq
            del pending[:skipped]
        lines, self.pending = pending[:FRAME_LINES], pending[FRAME_LINES:]
        if self.pending:
            self.flush_scheduled = True
            self.set_timer(FLUSH_S, self._flush)
        if lines[0].seq != self.last_seq + 1:
            lines = [line for line in lines if line.seq > self.last_seq]
            if lines and lines[0].seq > self.last_seq + 1:
                self.pending = lines + self.pending
                self.read_missing()  # a gap: read it from the engine, then these
                return
        self._write(lines)

    def _write(self, lines: tuple[JobLogLine, ...] | list[JobLogLine]) -> None:
        last = self.last_seq
        if lines and lines[0].seq <= last:
            lines = [line for line in lines if line.seq > last]
        if not lines:
            return
        self.last_seq = lines[-1].seq
        texts = [log_text(line) for line in lines]
        self.view.add_lines(texts)
        self.tail = (self.tail + texts[-TAIL_KEPT:])[-TAIL_KEPT:]
        self.show_state()
        self.post_message(self.Written())

    # --- following and searching ---------------------------------------------------------

    def toggle_follow(self) -> None:
        self.view.following = not self.view.following
        self.show_state()

    def open_search(self) -> None:
        box = self.search_box
        box.display = True
        box.focus()

    @property
    def searching(self) -> bool:
        """The search box is open."""
        return bool(self.search_box.display)

    def find(self, backwards: bool) -> None:
        """The next (or previous) line with the search text; says so when there is none."""
        view = self.view
        if view.search and view.find(view.search, backwards=backwards, again=True) is None:
            self.notify(f"no more {view.search!r}", title="Search", markup=False)
        self.show_state()

    @on(Input.Changed, "#log-search")
    def _search_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.view.find(event.value)
        self.show_state()

    @on(Input.Submitted, "#log-search")
    def _search_done(self, event: Input.Submitted) -> None:
        event.stop()
        self.close_search(clear=False)

    def close_search(self, *, clear: bool) -> None:
        box = self.search_box
        if clear:
            box.value = ""
            self.view.find("")
        box.display = False
        self.view.focus()
        self.show_state()

    # --- showing -------------------------------------------------------------------------

    def show_state(self) -> None:
        """The title says following or paused; the subtitle the lines and the search."""
        view = self.view
        count = thousands(view.total)
        if view.dropped:
            count += f" (newest {thousands(len(view.lines))})"
        mode = "following" if view.following else "paused · f to follow"
        self.border_title = f"Log · {mode}"
        self.border_subtitle = f"{count} lines"
        if view.search:
            self.border_subtitle += f" · /{safe(view.search)}"


__all__ = ["BINDINGS", "JobLogPanel", "log_text"]
