"""The provider dashboard's "Recent jobs" panel: the last jobs this machine ran for others.

A header and one row per job, newest first: id, name, consumer, outcome, how long it ran and
the NTX it earned (metered; ``≈`` quoted while it runs). The rows are an ``OptionList``, so
the keys are the usual ones (up/down, Enter opens the job's detail, the mouse works too).
Columns are laid out for the width the panel has: the name shrinks first, and a wide panel
gets a last column with why a job ended (failed, cancelled...). ``ProviderJobs`` feeds it;
it does no I/O itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from engine.api import JobInfo
from nunet_tui.format import DASH, safe
from nunet_tui.messages import OpenJob
from nunet_tui.viewmodels.account import metered_today
from nunet_tui.viewmodels.money import job_figures
from nunet_tui.widgets.job_state import (
    FAILED_STATES,
    duration,
    hms,
    is_terminal,
    job_name,
    peer_short,
    state_text,
)
from oracle_client.ntx import digits

RECENT = 5  # rows: the same height as one running job's block beside it
# Fixed columns: id, consumer, outcome, ran, earned; and the two spaces between columns.
ID_W, PEER_W, OUTCOME_W, RAN_W, EARNED_W, GAP = 6, 9, 15, 8, 10, 2
FIXED_W = ID_W + PEER_W + OUTCOME_W + RAN_W + EARNED_W + 5 * GAP
NAME_MIN, NAME_MAX = 6, 24
NOTE_MIN = 12  # a failure-reason column only when at least this much room is left


def columns(width: int, *, notes: bool = True) -> tuple[int, int]:
    """(name, note) widths for a panel ``width`` cells wide; 0: the column is left out (the
    note also when no job has one: ``notes``)."""
    room = width - FIXED_W
    name = min(room, NAME_MAX) if room >= NAME_MIN else 0
    fits = name == NAME_MAX and room - name - GAP >= NOTE_MIN
    note = room - name - GAP if fits and notes else 0
    return name, note


def why(job: JobInfo) -> Content:
    """Why it ended, when it did not simply complete: red for failures, muted otherwise."""
    if not is_terminal(job) or job.state == "completed" or not job.reason:
        return Content("")
    return Content.styled(
        safe(job.reason), "$text-error" if job.state in FAILED_STATES else "$text-muted"
    )


def earned(job: JobInfo) -> Content:
    """What the job paid this machine: paid once settled, metered once ended, ``≈`` the
    estimate while it runs (the number only: the column says what it is)."""
    figures = job_figures(job)
    if figures.metered is not None and is_terminal(job):
        return Content(digits(figures.metered))
    if not is_terminal(job) and figures.estimate is not None:
        return Content.styled(f"≈{digits(figures.estimate)}", "italic $text-muted")
    return Content.styled(DASH, "$text-muted")


def _cells(cells: Sequence[tuple[Content, int]]) -> Content:
    return Content(" " * GAP).join(
        cell.truncate(width, ellipsis=True, pad=True) for cell, width in cells if width
    )


def header(width: int, *, notes: bool = True) -> Content:
    name, note = columns(width, notes=notes)
    titles = [
        ("Job", ID_W),
        ("Name", name),
        ("Consumer", PEER_W),
        ("Outcome", OUTCOME_W),
        ("Ran", RAN_W),
        ("Earned", EARNED_W),
        ("Why", note),
    ]
    return _cells([(Content.styled(title, "bold $text-muted"), w) for title, w in titles])


def job_row(job: JobInfo, now: float, width: int, *, notes: bool = True) -> Content:
    name, note = columns(width, notes=notes)
    return _cells(
        [
            (Content.styled(safe(job.job_id[:ID_W]), "bold"), ID_W),
            (Content(job_name(job, 60)), name),
            (Content(peer_short(job.consumer)), PEER_W),
            (state_text(job.state), OUTCOME_W),
            (Content(hms(duration(job, now))), RAN_W),
            (earned(job), EARNED_W),
            (why(job), note),
        ]
    )


class RunList(OptionList):
    """The rows; Enter opens the highlighted job (shown in the footer, unlike OptionList's)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "enter",
            "select",
            "Open job",
            tooltip="Open the job: its log, timeline and metering",
            id="runs.open",
        ),
    ]
    DEFAULT_CSS = """
    RunList {
        border: none;
        padding: 0;
        height: auto;
        max-height: 12;
        overflow-y: hidden;  /* at most RECENT rows: never a scrollbar eating the columns */
        text-wrap: nowrap;  /* one row per job, whatever width the layout measures it at */
        text-overflow: ellipsis;
        background: transparent;
        &:focus { border: none; background-tint: transparent; }
        & > .option-list--option { padding: 0; }
    }
    """

    def allow_focus(self) -> bool:
        # Empty (no job yet, the panel hidden), it must not take the screen's first focus
        # and the keys with it.
        return self.option_count > 0


class RecentRuns(Vertical):
    """The panel; ``show(jobs, now)`` redraws it from the provider's jobs, newest first."""

    DEFAULT_CSS = """
    RecentRuns {
        height: auto;
        #recent-head { height: 1; }
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = "panel") -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Recent jobs"
        self.border_subtitle = "enter opens · j for all"
        self.jobs: list[JobInfo] = []
        self.now = 0.0

    def compose(self) -> ComposeResult:
        yield Static(id="recent-head", markup=False)
        yield RunList(id="recent-list", markup=False)

    def show(self, jobs: Sequence[JobInfo], now: float) -> None:
        self.jobs = list(jobs[:RECENT])
        self.now = now
        self.display = bool(self.jobs)
        today = metered_today(jobs, now)
        earned_today = (
            "today "
            + " · ".join(f"{safe(spec)} {digits(units)}" for spec, units in today[:3])
            + " NTX metered · "
            if today
            else ""
        )
        self.border_subtitle = f"{earned_today}enter opens · j for all"
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        rows = self.query_one(RunList)
        width = rows.content_size.width or self.content_size.width
        if width <= 0:
            return
        notes = any(why(job).plain for job in self.jobs)
        self.query_one("#recent-head", Static).update(header(width, notes=notes))
        ids = [job.job_id for job in self.jobs]
        current = [rows.get_option_at_index(i).id for i in range(rows.option_count)]
        if ids == current:
            # Same jobs: only the texts move on (a running job's time), the highlight stays.
            for index, job in enumerate(self.jobs):
                row = job_row(job, self.now, width, notes=notes)
                rows.replace_option_prompt_at_index(index, row)
            return
        highlighted = rows.highlighted_option.id if rows.highlighted_option else None
        rows.set_options(
            Option(job_row(job, self.now, width, notes=notes), id=job.job_id) for job in self.jobs
        )
        if highlighted in ids:
            rows.highlighted = ids.index(highlighted)
        elif ids:
            rows.highlighted = 0
        if ids and self.screen.focused is None:
            # Keyboard first: the list takes the keys as soon as there is a job to open.
            rows.focus(scroll_visible=False)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        job_id = event.option.id
        if job_id is None:
            return
        job = next((j for j in self.jobs if j.job_id == job_id), None)
        self.post_message(OpenJob(job_id, job))


__all__ = ["RecentRuns", "RunList", "columns", "earned", "header", "job_row", "why"]
