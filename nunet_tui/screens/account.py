"""``a`` (consumer): the account. The balance and what arrived in the wallet (recharges), then
one row per paid job: its spec, machine time, what was locked, metered, paid and refunded,
and its transactions; the highlighted job's hashes in full beside the table when wide, under
it when narrow.

The figures are nunet_tui/viewmodels/account.py's, the same ``nunet-tui account`` prints.
Escrow events read the account again; Enter opens the job.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Footer, Static

from engine.api import (
    Balance,
    EscrowChanged,
    EscrowList,
    JobList,
    ListJobs,
    RechargeList,
    RewardList,
    WalletBalance,
    WalletRecharges,
)
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import DASH, ago, plural, safe, table_cell
from nunet_tui.messages import OpenJob
from nunet_tui.screens.base import TABLE_BINDINGS, CapabilityScreen
from nunet_tui.viewmodels.account import Account, Consumption, RechargeRow, build
from nunet_tui.viewmodels.money import amount, machine_time
from nunet_tui.widgets.escrow_view import short_hash
from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.sortable_table import AUTO, Row, SortableTables, TableSort
from nunet_tui.widgets.table_rows import selected_key
from oracle_client.ntx import digits, format_ntx

WIDE_FROM = 120
COLUMNS: tuple[tuple[str, str], ...] = (
    ("job", "Job"),
    ("spec", "Spec"),
    ("state", "State"),
    ("time", "Machine time"),
    ("locked", "Locked"),
    ("metered", "Metered"),
    ("paid", "Paid"),
    ("refunded", "Refunded"),
    ("settle", "Settle tx"),
    ("when", "When"),
)
NARROW = ("job", "spec", "time", "paid", "refunded")
SHOWN_RECHARGES = 3  # the newest, in the summary; the CLI lists every one
STATE_WORDS = {"paid_out": "paid", "receipt": "decided", "verified": "locked"}


class AccountScreen(SortableTables, CapabilityScreen):
    CSS_PATH = "account.tcss"
    TITLE_TEXT = "account"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the dashboard", id="account.back"),
        Binding("enter", "open_job", "Job", tooltip="Open the selected job", id="account.open_job"),
        Binding(
            "r",
            "reload",
            "Refresh",
            tooltip="Read the records and the balance again",
            id="account.reload",
        ),
        Binding(
            "w",
            "app.open('wallet')",
            "Wallet",
            tooltip="Address, balance, transactions",
            id="account.wallet",
        ),
        *TABLE_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.account: Account | None = None
        self.problem: str | None = None
        self.loaded = False
        self._wide: bool | None = None
        sorts = (("paid", "paid"), ("time", "machine time"), ("when", "time"))
        self.sorters = {"jobs-table": TableSort(sorts, _sort_value)}

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with Vertical(id="account-panel", classes="panel"):
            yield Static(id="account-summary", markup=False)
        with Horizontal(id="account-body"):
            with Vertical(id="jobs-panel", classes="panel"):
                yield self.filter_box()
                yield Static(id="jobs-note", markup=False)
                yield DataTable(id="jobs-table", cursor_type="row", zebra_stripes=True)
                yield Static(id="row-note", markup=False)
            with VerticalScroll(id="detail-panel", classes="panel", can_focus=False) as panel:
                panel.border_title = "Selected"
                yield KeyTable(id="detail")
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#account-panel").border_title = "Account"
        self.query_one("#jobs-panel").border_title = "What each job consumed"
        self._build_columns()
        self.query_one("#jobs-table", DataTable).focus()
        self.show()

    # --- reading -------------------------------------------------------------------------

    def reload(self) -> None:
        self.load()

    @work(exclusive=True, group="refresh")
    async def load(self) -> None:
        client = self.nunet.client
        try:
            jobs: JobList = await client.call(ListJobs())
            escrows: EscrowList = await client.call(RewardList())
        except EngineError as exc:
            self.problem = safe(exc.message)
            self.loaded = True
            self.show()
            return
        balance: Balance | None = None
        note = ""
        try:
            balance = await client.call(WalletBalance())
        except EngineError as exc:
            note = safe(exc.message)
        if balance is not None and balance.ntx_units is None:
            note = "the NTX token is not known here (set [payments] ntx_policy_id)"
        recharges: RechargeList | None = None
        recharges_note = ""
        try:
            recharges = await client.call(WalletRecharges())
        except EngineError as exc:
            recharges_note = safe(exc.message)
        self.problem = None
        self.account = build(jobs.jobs, escrows.escrows, balance, note, recharges, recharges_note)
        self.loaded = True
        self.show()

    @handles(EscrowChanged)
    def _escrow_changed(self, event: EscrowChanged) -> None:
        if self.loaded:
            self.load()

    # --- showing -------------------------------------------------------------------------

    @property
    def wide(self) -> bool:
        return self.size.width >= WIDE_FROM

    def _build_columns(self) -> None:
        table: DataTable[Text] = self.query_one("#jobs-table", DataTable)
        table.clear(columns=True)
        self._wide = self.wide
        for key, label in COLUMNS:
            if self.wide or key in NARROW:
                table.add_column(label, key=key)

    def on_resize(self) -> None:
        if self._wide != self.wide:
            self._build_columns()
            self.show()
        self.show_current()

    def show(self) -> None:
        self.query_one("#account-summary", Static).update(self._summary())
        account = self.account
        rows = account.consumption if account is not None else ()
        table: DataTable[Text] = self.query_one("#jobs-table", DataTable)
        now = self.nunet.clock()
        keys = [key for key, _ in COLUMNS if self.wide or key in NARROW]
        sorter = self.sorters["jobs-table"]
        shown = sorter.fill(
            table,
            [
                Row(c.job_id, [table_cell(cells[k]) for k in keys], c)
                for c in rows
                for cells in [dict(zip((k for k, _ in COLUMNS), row_cells(c, now), strict=True))]
            ],
        )
        note = self.query_one("#jobs-note", Static)
        table.display = bool(shown)
        note.display = not shown
        if self.problem is not None:
            note.update(Content.styled(self.problem, "$text-error"))
        elif not self.loaded:
            note.update(Content.styled("Reading the records…", "$text-muted"))
        elif rows:
            note.update(Content.assemble("No job matches ", (repr(sorter.query.strip()), "bold")))
        else:
            note.update(
                Content.assemble(
                    ("No paid jobs yet. ", "bold"),
                    "A job you submit (",
                    ("s", "bold $text-accent"),
                    ") locks its maximum in escrow; when it ends you pay its machine time and "
                    "the rest comes back. Each one shows here.",
                )
            )
        self.query_one("#jobs-panel").border_subtitle = (
            sorter.caption(len(shown), len(rows), "job") + " · enter job" if rows else ""
        )
        self.show_current()

    def _summary(self) -> Content:
        account = self.account
        muted = "$text-muted"
        if account is None:
            return Content.styled(self.problem or "Reading the account…", muted)
        parts: list[Content | tuple[str, str] | str] = []
        if account.balance_units is None:
            parts += [("Balance ", "bold"), (account.balance_note or "not read", muted)]
        else:
            parts += [(format_ntx(account.balance_units), "bold $text-accent"), (" balance", muted)]
        if account.recharged_units is not None:
            parts += [
                ("   ", muted),
                (format_ntx(account.recharged_units), "bold"),
                (" recharged in all", muted),
            ]
            if not account.recharges_read:
                parts.append((" (derived: the wallet's history was not read)", muted))
            else:
                parts.append((f" · {plural(len(account.recharges), 'transfer')}", muted))
        parts += [
            "\n",
            (format_ntx(account.paid_units, "paid"), "bold"),
            ("   ", muted),
            (format_ntx(account.refunded_units, "refunded"), "bold"),
            ("   ", muted),
            (format_ntx(account.locked_units, "locked"), "bold $text-accent"),
            (" still", muted),
        ]
        now = self.nunet.clock()
        for r in account.recharges[:SHOWN_RECHARGES]:
            parts += ["\n", recharge_line(r, now, wide=self.wide)]
        hidden = len(account.recharges) - SHOWN_RECHARGES
        if hidden > 0 or not account.recharges_complete:
            more = f"{hidden} more" if hidden > 0 else "older ones not read"
            parts += ["\n", (f"  … {more}: `nunet-tui account` lists them", muted)]
        return Content.assemble(*parts)

    def selected(self) -> Consumption | None:
        if self.account is None:
            return None
        job_id = selected_key(self.query_one("#jobs-table", DataTable))
        return next((c for c in self.account.consumption if c.job_id == job_id), None)

    def show_current(self) -> None:
        current = self.selected()
        panel = self.query_one("#detail-panel")
        panel.display = current is not None and self.wide
        note = self.query_one("#row-note", Static)
        note.display = current is not None and not self.wide
        if current is None:
            return
        if self.wide:
            self.query_one("#detail", KeyTable).set_rows(detail_rows(current))
        else:
            note.update(
                Content.assemble(
                    (f"{safe(current.job_id)} ", "bold"),
                    f"lock {short_hash(current.lock_tx)} · settle {short_hash(current.settle_tx)}",
                )
            )

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_current()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open_job()

    def action_open_job(self) -> None:
        current = self.selected()
        if current is not None:
            self.post_message(OpenJob(current.job_id))

    def action_reload(self) -> None:
        self.load()


def recharge_line(r: RechargeRow, now: float, *, wide: bool) -> Content:
    """``+99 NTX recharge · 6fee1b3d…b7b6 · 5 min ago · from the faucet``."""
    if r.from_addresses:
        first = safe(r.from_addresses[0])
        source = first if wide else f"{first[:14]}…{first[-6:]}"
        if len(r.from_addresses) > 1:
            source += f" +{len(r.from_addresses) - 1}"
    else:
        source = "the faucet"
    return Content.assemble(
        ("+" + format_ntx(r.amount_units, r.kind), "bold"),
        (
            f" · {short_hash(r.tx_hash)} · {ago(r.at, now) if r.at else DASH} · from {source}",
            "$text-muted",
        ),
    )


def _sort_value(c: Consumption, key: str) -> Any:
    """Amounts by their base units, machine time in ms, the time as a time."""
    figures = {
        "time": c.machine_ms,
        "locked": c.locked_units,
        "metered": c.metered_units,
        "paid": c.paid_units,
        "refunded": c.refunded_units,
        "when": c.at or None,
    }
    return figures.get(key, AUTO)


def row_cells(c: Consumption, now: float) -> tuple[Content, ...]:
    """Every column's cell (COLUMNS' order): numbers under a title that says their kind."""

    def units(value: int | None) -> Content:
        return Content.styled(DASH, "dim") if value is None else Content(digits(value))

    return (
        Content.styled(safe(c.job_id), "bold"),
        Content(safe(c.spec) or DASH),
        Content(STATE_WORDS.get(c.state, c.state)),
        Content(machine_time(c.machine_ms)),
        units(c.locked_units),
        units(c.metered_units),
        units(c.paid_units),
        units(c.refunded_units),
        Content(short_hash(c.settle_tx)),
        Content(ago(c.at, now) if c.at else DASH),
    )


def detail_rows(c: Consumption) -> list[tuple[str, Content | str]]:
    return [
        ("Job", Content.styled(safe(c.job_id), "bold")),
        ("Name", safe(c.name) or DASH),
        ("Spec", safe(c.spec) or DASH),
        ("Ended", safe(c.outcome) or "not yet"),
        ("Machine time", machine_time(c.machine_ms)),
        ("Locked", amount(c.locked_units, "locked")),
        ("Metered", amount(c.metered_units, "metered")),
        ("Paid", amount(c.paid_units, "paid")),
        ("Refunded", amount(c.refunded_units, "refunded")),
        ("Lock tx", safe(c.lock_tx) or DASH),
        ("Settle tx", safe(c.settle_tx) or DASH),
    ]


__all__ = ["AccountScreen", "detail_rows", "recharge_line", "row_cells"]
