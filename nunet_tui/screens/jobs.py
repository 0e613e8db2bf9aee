"""``j``: every job of this node, both roles: the ones it bought and the ones it runs.

One row per job: id, role, state (coloured), the peer on the other side, name, when it
started, how long it ran, what it cost; on a narrow terminal the columns that fit, Cost
among the first kept. Rows change live as ``JobChanged`` events arrive;
``/`` filters on any column; Enter opens the job; ``ctrl+r`` resubmits a finished one
(screens/job_resubmit.py) and opens the new one.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.css.query import NoMatches
from textual.widgets import DataTable, Footer, Static

from engine.api import (
    EscrowChanged,
    EscrowInfo,
    EscrowList,
    JobChanged,
    JobInfo,
    JobList,
    ListJobs,
    RewardList,
)
from engine.domain.charges import metered_units
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import ago, safe, table_cell
from nunet_tui.messages import OpenJob
from nunet_tui.screens import job_resubmit
from nunet_tui.screens.base import TABLE_BINDINGS, FilteredTableScreen
from nunet_tui.widgets.job_state import (
    cost,
    duration,
    hms,
    is_terminal,
    job_name,
    other_party,
    peer_short,
    state_text,
)
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.sortable_table import AUTO, Row
from nunet_tui.widgets.table_columns import fit, used_width
from nunet_tui.widgets.table_rows import selected_key

COLUMNS = (
    ("job", "Job"),
    ("role", "Role"),
    ("state", "State"),
    ("peer", "Peer"),
    ("name", "Name"),
    ("started", "Started"),
    ("duration", "Duration"),
    ("cost", "NTX"),
)
# What each column needs (its widest usual cell) and, narrow, which go first: a table wider
# than the screen hid Cost behind ~40 presses of → at 80x24. The name takes what is left.
WIDTHS = {
    "job": 12,
    "role": 8,
    "state": 9,
    "peer": 11,
    "started": 10,
    "duration": 8,
    "cost": 16,
}
NAME_WIDTH = (12, 28)  # at least, at most
KEPT_FIRST = ("job", "state", "cost", "name", "role", "duration", "peer", "started")
# The panel's margin, border and padding around the table (jobs.tcss), both sides together.
PANEL_CHROME = 6


def fit_columns(width: int) -> tuple[tuple[str, ...], int]:
    """The columns that fit ``width`` cells, in table order, and the name column's width."""
    widths = {**WIDTHS, "name": NAME_WIDTH[0]}
    columns = fit([key for key, _ in COLUMNS], widths, KEPT_FIRST, width)
    name_width = NAME_WIDTH[0]
    if "name" in columns:
        spare = width - used_width(columns, widths)
        name_width = min(NAME_WIDTH[1], NAME_WIDTH[0] + max(0, spare))
    return columns, name_width


class JobsScreen(FilteredTableScreen):
    TABLE_ID = "jobs-table"
    SORTS = (
        ("cost", "NTX"),
        ("duration", "duration"),
        ("started", "start"),
        ("state", "state"),
        ("name", "name"),
    )
    CSS_PATH = "jobs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the dashboard", id="jobs.back"),
        Binding("enter", "open_job", "Open", tooltip="Open the selected job", id="jobs.open"),
        Binding("r", "reload", "Refresh", tooltip="Read the list again", id="jobs.reload"),
        *job_resubmit.BINDINGS,  # ^r: the selected finished job's spec again
        *TABLE_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[str, JobInfo] = {}
        self.escrows: dict[tuple[str, str], EscrowInfo] = {}  # paid jobs: their settlement
        self.problem: str | None = None
        self.loaded = False
        self.show_scheduled = False
        self.columns: tuple[str, ...] = tuple(key for key, _ in COLUMNS)
        self.name_width = NAME_WIDTH[1]
        self.can_resubmit = False  # the selected job's, as the footer shows it

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with Vertical(id="jobs-panel") as panel:
            panel.border_title = "Jobs"
            yield self.filter_box()
            yield Static(id="jobs-note", markup=False)
            table: DataTable[Text] = DataTable(
                id="jobs-table", cursor_type="row", zebra_stripes=True
            )
            self._add_columns(table)
            yield table
        yield Footer()

    def _add_columns(self, table: DataTable[Text]) -> None:
        labels = dict(COLUMNS)
        for key in self.columns:
            table.add_column(labels[key], key=key)

    def on_resize(self, event: events.Resize) -> None:
        columns, name_width = fit_columns(event.size.width - PANEL_CHROME)
        if (columns, name_width) == (self.columns, self.name_width):
            return
        self.columns, self.name_width = columns, name_width
        table: DataTable[Text] = self.query_one("#jobs-table", DataTable)
        table.clear(columns=True)
        self._add_columns(table)
        self.show()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#jobs-table", DataTable).focus()
        self.set_interval(1.0, self._tick)

    # --- reading -------------------------------------------------------------------------

    def reload(self) -> None:
        self.load()

    @work(exclusive=True, group="refresh")
    async def load(self) -> None:
        try:
            reply: JobList = await self.nunet.client.call(ListJobs())
        except EngineError as exc:
            self.problem = safe(exc.message if isinstance(exc, EngineError) else str(exc))
        else:
            self.problem = None
            self.jobs = {job.job_id: job for job in reply.jobs}
        try:  # a paid job's settlement: its NTX cell says what was paid, not only metered
            escrows: EscrowList = await self.nunet.client.call(RewardList())
        except EngineError:
            pass  # no payments here: the metered figures stand
        else:
            self.escrows = {(e.role, e.job_id): e for e in escrows.escrows}
        self.loaded = True
        self.show()

    @handles(EscrowChanged)
    def _escrow_changed(self, event: EscrowChanged) -> None:
        self.escrows[(event.escrow.role, event.escrow.job_id)] = event.escrow
        if self.loaded:
            self.show()

    @handles(JobChanged)
    def _job_changed(self, event: JobChanged) -> None:
        self.jobs[event.job.job_id] = event.job
        # Running jobs change with every batch of log lines: redraw a few times a second.
        if self.loaded and not self.show_scheduled:
            self.show_scheduled = True
            self.set_timer(0.25, self.show)

    # --- showing -------------------------------------------------------------------------

    def show(self) -> None:
        self.show_scheduled = False
        table: DataTable[Text] = self.query_one("#jobs-table", DataTable)
        note = self.query_one("#jobs-note", Static)
        panel = self.query_one("#jobs-panel", Vertical)
        now = self.nunet.clock()
        keys = [key for key, _ in COLUMNS]
        at = [keys.index(key) for key in self.columns]
        rows = [
            Row(
                job.job_id,
                [
                    table_cell(cell)
                    for i, cell in enumerate(job_row(job, now, self.name_width, escrow))
                    if i in at
                ],
                job,
                f"{job.job_id} {job.provider} {job.consumer}",
            )
            for job in sorted(self.jobs.values(), key=lambda j: (-j.created_at, j.job_id))
            for escrow in [self.escrows.get((job.role, job.job_id))]
        ]
        shown = self.sorter.fill(table, rows)
        query = self.sorter.query.strip()
        running = sum(1 for job in self.jobs.values() if not is_terminal(job))
        panel.border_subtitle = self.sorter.caption(len(shown), len(rows), "job") + (
            f" · {running} active" if running and not query else ""
        )
        table.display = bool(shown)
        note.display = not shown
        if self.problem is not None:
            note.update(self.problem)
        elif not rows:
            mode = getattr(self.app, "mode", None)
            note.update(
                Content.assemble(
                    ("No jobs yet. ", "bold"),
                    "Press s to submit one."
                    if mode == "consumer"
                    else "The jobs this machine runs for others appear here.",
                )
            )
        elif not shown:
            note.update(Content.assemble("No job matches ", (repr(query), "bold"), "."))
        self._refresh_resubmit()

    def _tick(self) -> None:
        """Running jobs' durations move on."""
        if not self.is_current or "duration" not in self.columns:
            return
        table: DataTable[Text] = self.query_one("#jobs-table", DataTable)
        now = self.nunet.clock()
        for job in self.jobs.values():
            if not is_terminal(job) and job.started_at is not None and job.job_id in table.rows:
                table.update_cell(
                    job.job_id, "duration", table_cell(Content(hms(duration(job, now))))
                )

    # --- actions -------------------------------------------------------------------------

    def action_reload(self) -> None:
        self.load()

    def action_open_job(self) -> None:
        job_id = selected_key(self.query_one("#jobs-table", DataTable))
        if job_id is not None:
            self.open_job(job_id)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.open_job(event.row_key.value)

    def open_job(self, job_id: str) -> None:
        self.post_message(OpenJob(job_id, self.jobs.get(job_id)))

    def selected_job(self) -> JobInfo | None:
        try:
            table: DataTable[Text] = self.query_one("#jobs-table", DataTable)
        except NoMatches:  # bindings are checked before the table is there
            return None
        job_id = selected_key(table)
        return self.jobs.get(job_id) if job_id is not None else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._refresh_resubmit()

    def _refresh_resubmit(self) -> None:
        """The footer's ^r is for a finished job: redrawn when the selected one ends or the
        selection moves to one that has (only then: rows change several times a second)."""
        can = job_resubmit.can_resubmit(self.selected_job())
        if can != self.can_resubmit:
            self.can_resubmit = can
            self.refresh_bindings()

    @work(group="resubmit", exclusive=True)
    async def action_resubmit(self) -> None:
        job = self.selected_job()
        if job is not None and (new := await job_resubmit.resubmit(self, job)) is not None:
            self.jobs[new.job_id] = new
            self.show()
            self.open_job(new.job_id)

    def action_resubmit_refused(self) -> None:
        job_resubmit.say_refusal(self, self.selected_job())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "open_job":
            return bool(self.jobs)
        if (resubmit := job_resubmit.check(action, self.selected_job())) is not None:
            return resubmit
        return super().check_action(action, parameters)

    def sort_value(self, item: Any, key: str) -> Any:
        job: JobInfo = item
        if key == "state":
            return job.state
        if key == "started":
            return job.started_at
        if key == "duration":
            end = job.finished_at or self.nunet.clock()
            return None if job.started_at is None else end - job.started_at
        if key == "cost":
            return metered_units(job) if job.metering is not None else job.lock_units
        if key == "name":
            return job.spec.name.lower()
        return AUTO


def job_row(
    job: JobInfo, now: float, name_width: int = NAME_WIDTH[1], escrow: EscrowInfo | None = None
) -> tuple[Content, ...]:
    """Every column's cell (COLUMNS' order); the screen shows those that fit."""
    started = job.started_at or job.created_at
    return (
        Content.styled(safe(job.job_id), "bold"),
        Content(job.role),
        state_text(job.state),
        Content(peer_short(other_party(job))),
        Content(job_name(job, name_width)),
        Content(ago(started, now)),
        Content(hms(duration(job, now))),
        cost(job, escrow, unit=False),
    )


__all__ = ["JobsScreen", "job_row"]
