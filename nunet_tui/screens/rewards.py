"""``$`` (or ``R``): the NTX of paid jobs, as a provider earns it and as a consumer locks it.

Provider view: the jobs whose escrow waits for a claim (locked for us, receipt signed,
claim on its way), then the claimed history, and what was earned; ``c`` claims the selected
one (``RewardClaim``: the oracle's signature, then the claim transaction). Consumer view: the
funds locked per job, then what was paid out or refunded; ``f`` takes the selected lock back
(``RewardRefund``). The view follows the mode; ``v`` shows the other side. Rows change live
as ``EscrowChanged`` events arrive, and a claim's or refund's outcome is written in place.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Footer, Static

from engine.api import (
    EscrowChanged,
    EscrowInfo,
    EscrowList,
    JobInfo,
    JobList,
    ListJobs,
    RewardClaim,
    RewardList,
    RewardRefund,
)
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import ago, plural, safe, table_cell
from nunet_tui.messages import OpenJob
from nunet_tui.screens.base import TABLE_BINDINGS, CapabilityScreen
from nunet_tui.screens.wallet_dialogs import error_text
from nunet_tui.viewmodels.account import SpecDay, build
from nunet_tui.viewmodels.money import machine_time, settle_tx, settlement
from nunet_tui.widgets.escrow_view import (
    deadline_text,
    detail_rows,
    is_open,
    newest_first,
    note_text,
    one_line,
    refunded_cell,
    short_hash,
    signed_amount,
    signed_units,
    state_text,
    totals,
)
from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.sortable_table import AUTO, Row, SortableTables, TableSort
from nunet_tui.widgets.table_rows import selected_key
from oracle_client.ntx import digits, format_ntx

View = Literal["provider", "consumer"]
Columns = tuple[tuple[str, str], ...]

OPEN_COLUMNS: dict[View, Columns] = {
    "provider": (
        ("job", "Job"),
        ("state", "State"),
        ("ntx", "Locked NTX"),
        ("outcome", "Job ended"),
        ("deadline", "Deadline"),
    ),
    "consumer": (
        ("job", "Job"),
        ("state", "State"),
        ("ntx", "Locked NTX"),
        ("deadline", "Deadline"),
        ("lock", "Lock tx"),
    ),
}
DONE_COLUMNS: dict[View, Columns] = {
    "provider": (
        ("job", "Job"),
        ("state", "State"),
        ("ntx", "Paid NTX"),
        ("tx", "Settle tx"),
        ("when", "When"),
    ),
    "consumer": (
        ("job", "Job"),
        ("state", "State"),
        ("ntx", "Paid"),
        ("back", "Refunded"),
        ("tx", "Settle tx"),
        ("when", "When"),
    ),
}
PER_SPEC_ROWS = 3  # days x specs under the totals: the newest
TICK_S = 15.0  # relative times ("5 min ago", "in 3 h") are redrawn this often
WIDE_FROM = 120  # columns: from here the highlighted job gets a panel of its own
OPEN_TITLES: dict[View, str] = {"provider": "Awaiting claim", "consumer": "Locked"}
DONE_TITLES: dict[View, str] = {"provider": "Claimed", "consumer": "Settled"}


class RewardsScreen(SortableTables, CapabilityScreen):
    CSS_PATH = "rewards.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the dashboard", id="rewards.back"),
        Binding(
            "c",
            "claim",
            "Claim",
            tooltip="Claim the selected job's NTX (oracle, then chain)",
            id="rewards.claim",
        ),
        Binding(
            "f",
            "refund",
            "Refund",
            tooltip="Take the selected job's locked NTX back",
            id="rewards.refund",
        ),
        Binding(
            "v",
            "switch_view",
            "Other side",
            tooltip="Provider or consumer escrows",
            id="rewards.switch_view",
        ),
        Binding("enter", "open_job", "Job", tooltip="Open the selected job", id="rewards.open_job"),
        Binding("r", "reload", "Refresh", tooltip="Read the escrows again", id="rewards.reload"),
        # Out of the footer (full at 80 columns with the claim keys); the help lists it.
        Binding(
            "w",
            "app.open('wallet')",
            "Wallet",
            show=False,
            tooltip="Address, balance, transactions",
            id="rewards.wallet",
        ),
        *TABLE_BINDINGS,
    ]

    def __init__(self, view: View | None = None) -> None:
        super().__init__()
        self.view: View = view or "provider"
        self._view_given = view is not None
        self.escrows: dict[str, EscrowInfo] = {}
        self.jobs: dict[tuple[str, str], JobInfo] = {}
        self.problem: str | None = None
        self.loaded = False
        self.busy: set[str] = set()  # jobs with a claim or refund in flight
        self.current: str | None = None  # the job whose row is highlighted (detail, note)
        self.sorters = {
            "open-table": TableSort((("ntx", "NTX"), ("deadline", "deadline")), _sort_value),
            "done-table": TableSort((("ntx", "NTX"), ("when", "time")), _sort_value),
        }

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with Vertical(id="totals-panel", classes="panel"):
            yield Static(id="totals", markup=False)
            yield Static(id="per-spec", markup=False)
        with Horizontal(id="rewards-body"):
            with Vertical(id="rewards-lists"):
                yield self.filter_box()
                with Vertical(id="open-panel", classes="panel"):
                    yield Static(id="open-note", markup=False)
                    yield DataTable(id="open-table", cursor_type="row", zebra_stripes=True)
                    yield Static(id="row-note", markup=False)
                yield Static(id="status", markup=False)
                with Vertical(id="done-panel", classes="panel"):
                    yield Static(id="done-note", markup=False)
                    yield DataTable(id="done-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="detail-panel", classes="panel", can_focus=False) as panel:
                panel.border_title = "Selected"
                yield KeyTable(id="detail")
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        if not self._view_given and getattr(self.app, "mode", None) == "consumer":
            self.view = "consumer"
        self.query_one("#status").display = False
        self._build_columns()
        self.query_one("#open-table", DataTable).focus()
        self.show()
        self.set_interval(TICK_S, self._tick)

    def _tick(self) -> None:
        """ "5 min ago" and "in 3 h" move on without reading anything again."""
        if self.is_current:
            self.show()

    # --- reading -------------------------------------------------------------------------

    def reload(self) -> None:
        self.load()

    @work(exclusive=True, group="refresh")
    async def load(self) -> None:
        try:
            listing: EscrowList = await self.nunet.client.call(RewardList())
        except EngineError as exc:
            self.problem = error_text(exc)
        else:
            self.problem = None
            self.escrows = {e.job_id: e for e in listing.escrows}
        try:  # which spec each job ran under: the earnings per spec per day
            jobs: JobList = await self.nunet.client.call(ListJobs())
        except EngineError:
            pass
        else:
            self.jobs = {(j.role, j.job_id): j for j in jobs.jobs}
        self.loaded = True
        self.show()

    @handles(EscrowChanged)
    def _escrow_changed(self, event: EscrowChanged) -> None:
        self.escrows[event.escrow.job_id] = event.escrow
        if self.loaded:
            self.show()

    # --- showing -------------------------------------------------------------------------

    def _build_columns(self) -> None:
        for table_id, columns in (("#open-table", OPEN_COLUMNS), ("#done-table", DONE_COLUMNS)):
            table: DataTable[Text] = self.query_one(table_id, DataTable)
            table.clear(columns=True)
            for key, label in columns[self.view]:
                table.add_column(label, key=key)

    def mine(self) -> list[EscrowInfo]:
        return [e for e in newest_first(self.escrows.values()) if e.role == self.view]

    def show(self) -> None:
        now = self.nunet.clock()
        rows = self.mine()
        open_rows = [e for e in rows if is_open(e)]
        done_rows = [e for e in rows if not is_open(e)]
        open_shown = self._fill("open-table", [(e, open_row(e, now, self.view)) for e in open_rows])
        done_shown = self._fill("done-table", [(e, done_row(e, now, self.view)) for e in done_rows])
        self._show_totals()

        open_panel = self.query_one("#open-panel", Vertical)
        done_panel = self.query_one("#done-panel", Vertical)
        open_panel.border_title = OPEN_TITLES[self.view]
        done_panel.border_title = DONE_TITLES[self.view]
        key = "c claim" if self.view == "provider" else "f refund"
        open_panel.border_subtitle = (
            self.sorters["open-table"].caption(open_shown, len(open_rows), "job")
            + f" · {key} · enter job"
            if open_rows
            else ""
        )
        done_panel.border_subtitle = (
            self.sorters["done-table"].caption(done_shown, len(done_rows), "job")
            if done_rows
            else ""
        )

        open_note = self.query_one("#open-note", Static)
        done_note = self.query_one("#done-note", Static)
        open_note.display = not open_shown
        done_note.display = not done_shown
        self.query_one("#open-table").display = bool(open_shown)
        self.query_one("#done-table").display = bool(done_shown)
        if self.problem is not None:
            open_note.update(Content.styled(self.problem, "$text-error"))
        elif not self.loaded:
            open_note.update(Content.styled("Reading the escrows…", "$text-muted"))
        elif open_rows:
            open_note.update(_no_match(self.sorters["open-table"].query))
        else:
            open_note.update(_empty_open(self.view, has_any=bool(self.escrows)))
        done_note.update(
            _no_match(self.sorters["done-table"].query)
            if done_rows
            else Content.styled(
                "Nothing claimed yet." if self.view == "provider" else "Nothing settled yet.",
                "$text-muted",
            )
        )
        self.show_current()
        self.refresh_bindings()

    def show_current(self) -> None:
        """The highlighted job in full: beside the tables when wide, its problem under the
        open table when narrow (the tables never grow a column that would not fit)."""
        focused = self.focused if isinstance(self.focused, DataTable) else None
        table = focused or self.query_one("#open-table", DataTable)
        job_id = selected_key(table) or selected_key(self.query_one("#open-table", DataTable))
        escrow = self.escrows.get(job_id) if job_id is not None else None
        if escrow is not None and escrow.role != self.view:
            escrow = None
        self.current = escrow.job_id if escrow is not None else None
        detail = self.query_one("#detail", KeyTable)
        panel = self.query_one("#detail-panel")
        panel.display = escrow is not None and self.size.width >= WIDE_FROM
        if escrow is not None:
            detail.set_rows(detail_rows(escrow, self.nunet.clock()))
        note = self.query_one("#row-note", Static)
        shows_note = (
            escrow is not None
            and bool(escrow.error)
            and is_open(escrow)
            and self.size.width < WIDE_FROM
        )
        note.display = shows_note
        if shows_note and escrow is not None:
            note.update(Content.assemble((f"{safe(escrow.job_id)}: ", "bold"), note_text(escrow)))

    def _fill(self, table_id: str, rows: list[tuple[EscrowInfo, tuple[Content, ...]]]) -> int:
        """Fill one table (its filter and sort); how many rows it shows."""
        table: DataTable[Text] = self.query_one(f"#{table_id}", DataTable)
        cells = [Row(e.job_id, [table_cell(c) for c in row], e) for e, row in rows]
        return len(self.sorters[table_id].fill(table, cells))

    def _show_totals(self) -> None:
        sums = totals(self.escrows.values())
        panel = self.query_one("#totals-panel", Vertical)
        panel.border_title = f"Rewards · {self.view}"
        other = "consumer" if self.view == "provider" else "provider"
        panel.border_subtitle = f"v {other} view"
        muted = "$text-muted"
        if self.view == "provider":
            line = Content.assemble(
                (format_ntx(sums.earned, "paid"), "bold $text-success"),
                (" to you   ", muted),
                (format_ntx(sums.awaiting, "locked"), "bold"),
                (" to claim", muted),
                (f" · {plural(sums.awaiting_jobs, 'job')}", muted),
            )
        else:
            line = Content.assemble(
                (format_ntx(sums.locked, "locked"), "bold $text-accent"),
                (f" · {plural(sums.locked_jobs, 'job')}", muted),
                ("   ", muted),
                (format_ntx(sums.spent, "paid"), "bold"),
                ("   ", muted),
                (format_ntx(sums.refunded, "refunded"), "bold"),
            )
        self.query_one("#totals", Static).update(line)
        per_spec = self.query_one("#per-spec", Static)
        days = (
            build(self.jobs.values(), self.escrows.values()).per_spec_day
            if self.view == "provider"
            else ()
        )
        per_spec.display = bool(days)
        per_spec.update(per_spec_lines(days[:PER_SPEC_ROWS]))

    def say(self, text: Content) -> None:
        """The outcome of the last claim or refund, under the table it came from."""
        status = self.query_one("#status", Static)
        status.update(text)
        status.display = True

    # --- actions -------------------------------------------------------------------------

    def selected(self) -> EscrowInfo | None:
        job_id = selected_key(self.query_one("#open-table", DataTable))
        return self.escrows.get(job_id) if job_id is not None else None

    def action_reload(self) -> None:
        self.load()

    def action_switch_view(self) -> None:
        self.view = "consumer" if self.view == "provider" else "provider"
        self.query_one("#status").display = False
        self._build_columns()
        self.show()
        self.query_one("#open-table", DataTable).focus()

    def action_claim(self) -> None:
        self._settle("claim")

    def action_refund(self) -> None:
        self._settle("refund")

    def _settle(self, verb: Literal["claim", "refund"]) -> None:
        escrow = self.selected()
        if escrow is None:
            self.say(
                Content.styled(
                    "Nothing to claim: no job is awaiting its claim."
                    if verb == "claim"
                    else "Nothing to refund: no NTX is locked.",
                    "$text-muted",
                )
            )
            return
        if escrow.job_id in self.busy:
            return
        self.settle(escrow, verb)

    @work(group="settle")
    async def settle(self, escrow: EscrowInfo, verb: Literal["claim", "refund"]) -> None:
        """One claim or refund: the oracle's decision, then a transaction (seconds)."""
        job = safe(escrow.job_id)
        self.busy.add(escrow.job_id)
        self.say(
            Content.styled(
                f"{'Claiming' if verb == 'claim' else 'Refunding'} job {job}: asking the oracle, "
                "then submitting the transaction…",
                "$text-muted",
            )
        )
        command = (
            RewardClaim(job_id=escrow.job_id)
            if verb == "claim"
            else RewardRefund(job_id=escrow.job_id)
        )
        try:
            result: EscrowInfo = await self.nunet.client.call(command)
        except EngineError as exc:
            message = error_text(exc)
            self.say(
                Content.assemble(
                    (f"{verb.capitalize()} of job {job} failed: ", "bold $text-error"), message
                )
            )
            self.notify(message, title=verb.capitalize(), severity="error", markup=False)
            return
        finally:
            self.busy.discard(escrow.job_id)
        self.escrows[result.job_id] = result
        self.say(settled_text(result, verb))
        self.show()

    def action_open_job(self) -> None:
        focused = self.focused
        table = focused if isinstance(focused, DataTable) else self.query_one("#open-table")
        job_id = selected_key(table)  # type: ignore[arg-type]
        if job_id is not None:
            self.open_job(job_id)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.open_job(event.row_key.value)

    def open_job(self, job_id: str) -> None:
        self.post_message(OpenJob(job_id))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_current()
        self.refresh_bindings()

    def on_descendant_focus(self) -> None:
        self.show_current()

    def on_resize(self) -> None:
        self.show_current()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # In its view the key always belongs to this screen (a press with nothing selected
        # says so), so ``c`` never falls through to the app's chat by surprise.
        if action == "claim":
            return self.view == "provider"
        if action == "refund":
            return self.view == "consumer"
        if action == "open_job":
            return bool(self.mine())
        return super().check_action(action, parameters)


def _sort_value(escrow: EscrowInfo, key: str) -> Any:
    """Amounts by their base units (the cell's sign: paid to us or by us), times as times;
    the deadline soonest first."""
    if key == "ntx":
        return escrow.amount if is_open(escrow) else signed_units(escrow)
    if key == "back":
        return settlement(escrow)[1]
    if key == "deadline":
        return -escrow.deadline_ms if escrow.deadline_ms else None
    if key == "when":
        return escrow.updated_at or escrow.created_at
    return AUTO


def _no_match(query: str) -> Content:
    return Content.assemble("No job matches ", (repr(query.strip()), "bold"), ".")


def open_row(escrow: EscrowInfo, now: float, view: View) -> tuple[Content, ...]:
    job = Content.styled(safe(escrow.job_id), "bold")
    state = state_text(escrow)
    if escrow.error:  # the whole problem is told beside or under the table
        state = Content.assemble(state, (" ⚠", "bold $text-error"))
    if view == "provider":
        outcome = (
            Content(one_line(escrow.outcome))
            if escrow.outcome
            else Content.styled("running", "dim")
        )
        return (
            job,
            state,
            Content(digits(escrow.amount)),
            outcome,
            deadline_text(escrow, now),
        )
    return (
        job,
        state,
        Content(digits(escrow.amount)),
        deadline_text(escrow, now),
        Content(short_hash(escrow.lock_tx)),
    )


def done_row(escrow: EscrowInfo, now: float, view: View = "provider") -> tuple[Content, ...]:
    cells = [
        Content.styled(safe(escrow.job_id), "bold"),
        state_text(escrow),
        signed_amount(escrow),
    ]
    if view == "consumer":
        cells.append(refunded_cell(escrow))
    return (
        *cells,
        Content(short_hash(settle_tx(escrow))),
        Content(ago(escrow.updated_at or escrow.created_at, now)),
    )


def settled_text(escrow: EscrowInfo, verb: str) -> Content:
    """What a claim or refund came to: done, on its way, or why it stopped."""
    job = safe(escrow.job_id)
    paid, refunded = settlement(escrow)
    tx = short_hash(settle_tx(escrow), 16, 6)
    if escrow.state == "claimed":
        return Content.assemble(
            ("✓ Claimed ", "bold $text-success"),
            f"{format_ntx(paid or 0, 'paid')} for job {job} · tx {tx}",
        )
    if escrow.state == "refunded":
        return Content.assemble(
            ("↩ Refunded ", "bold $text-warning"),
            f"{format_ntx(refunded or 0, 'refunded')} of job {job} · tx {tx}",
        )
    if escrow.state == "paid_out":
        return Content.assemble(
            ("The provider was paid ", "bold"),
            f"{format_ntx(paid or 0, 'paid')} for job {job}"
            + (f", {format_ntx(refunded, 'refunded')}" if refunded else ": nothing to refund"),
        )
    if escrow.error:
        return Content.assemble(
            (f"Job {job}: ", "bold $text-warning"), safe(" ".join(escrow.error.split()))
        )
    return Content.assemble(
        (f"Job {job}: ", "bold"),
        f"{verb} on its way ({escrow.state}); this list follows it.",
    )


def per_spec_lines(days: tuple[SpecDay, ...] | list[SpecDay]) -> Content:
    """``2026-12-01  gpu large  2 jobs · 30 min 00 s · 1.2 NTX paid``, one per day and spec."""
    return Content("\n").join(
        Content.assemble(
            (f"{day.day}  ", "$text-muted"),
            (safe(day.spec) or "no job record", "bold"),
            f"  {plural(day.jobs, 'job')} · {machine_time(day.machine_ms)} · ",
            (format_ntx(day.paid_units, "paid"), "bold $text-success"),
        )
        for day in days
    )


def _empty_open(view: View, *, has_any: bool) -> Content:
    accent = "bold $text-accent"
    if view == "provider":
        if has_any:
            return Content.styled("Nothing to claim right now.", "$text-muted")
        return Content.assemble(
            ("No paid jobs yet. ", "bold"),
            "When this machine runs a paid job, the consumer's NTX is locked in escrow and "
            "the job waits here for its claim. Onboard (",
            ("o", accent),
            " on the dashboard) and keep a wallet (",
            ("w", accent),
            ") to be paid.",
        )
    if has_any:
        return Content.styled("No NTX locked right now.", "$text-muted")
    return Content.assemble(
        ("No NTX locked. ", "bold"),
        "Submitting a paid job (",
        ("s", accent),
        ") locks its quoted price in escrow until the job ends; it shows here, and ",
        ("f", accent),
        " takes it back when the job failed or the deadline passed.",
    )


__all__ = ["RewardsScreen", "done_row", "open_row", "settled_text"]
