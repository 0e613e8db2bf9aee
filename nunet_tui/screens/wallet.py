"""``w``: this node's Cardano wallet: address, network, keystore, balances, transactions.

The wallet's public half comes from ``WalletShow``, the balance from ``WalletBalance`` (a
chain read: slow, and it fails plainly when no backend is configured or the ledger is away),
and the transactions from the escrows of paid jobs (``RewardList``, then ``EscrowChanged``
events). Every call runs in a worker; a failure is written where its value would be.

No wallet yet: ``n`` makes one (a confirmation first, then the 24 words shown once) and ``i``
imports one. A locked keystore asks for its passphrase when an action needs it (``u`` too).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.events import Resize
from textual.widgets import DataTable, Footer, Static

from engine.api import (
    Balance,
    EscrowChanged,
    EscrowInfo,
    EscrowList,
    KeystoreInfo,
    RewardList,
    WalletBalance,
    WalletInfo,
    WalletNew,
    WalletShow,
)
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import DASH, ago, safe, table_cell, tilde
from nunet_tui.screens.base import TABLE_BINDINGS, CapabilityScreen
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.screens.wallet_dialogs import (
    Cancelled,
    ImportScreen,
    MnemonicScreen,
    PassphraseScreen,
    call_unlocking,
    error_text,
)
from nunet_tui.viewmodels.money import settle_tx
from nunet_tui.widgets.escrow_view import (
    ada,
    newest_first,
    short_hash,
    signed_amount,
    signed_units,
    state_text,
    totals,
)
from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.sortable_table import AUTO, Row, SortableTables, TableSort
from oracle_client.ntx import digits

TICK_S = 15.0  # relative times ("5 min ago", "in 3 h") are redrawn this often
COMPACT_BELOW = 100  # columns: narrower terminals get the short transaction table
WIDE_COLUMNS = (
    ("job", "Job"),
    ("role", "Role"),
    ("state", "State"),
    ("ntx", "NTX"),
    ("lock", "Lock tx"),
    ("settle", "Claim/refund tx"),
    ("when", "When"),
)
COMPACT_COLUMNS = (
    ("job", "Job"),
    ("state", "State"),
    ("ntx", "NTX"),
    ("lock", "Lock tx"),
    ("settle", "Settle tx"),
    ("when", "When"),
)
BACKENDS = {
    "local": "local ledger",
    "preprod": "preprod · Blockfrost",
    "mainnet": "mainnet · Blockfrost",
}


class WalletScreen(SortableTables, CapabilityScreen):
    CSS_PATH = "wallet.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the dashboard", id="wallet.back"),
        Binding(
            "r",
            "refresh",
            "Refresh",
            tooltip="Read the wallet, balance and escrows again",
            id="wallet.reload",
        ),
        Binding(
            "n",
            "new_wallet",
            "New wallet",
            tooltip="Make a wallet: 24 words, shown once",
            id="wallet.new",
        ),
        Binding(
            "i",
            "import_wallet",
            "Import",
            tooltip="Restore a wallet from its words",
            id="wallet.import",
        ),
        Binding(
            "u", "unlock", "Unlock", tooltip="Give the keystore its passphrase", id="wallet.unlock"
        ),
        Binding(
            "y",
            "copy_address",
            "Copy address",
            tooltip="Copy the address to the clipboard",
            id="wallet.copy_address",
        ),
        Binding(
            "dollar_sign",
            "app.open('rewards')",
            "Rewards",
            key_display="$",
            tooltip="Claims, locks and refunds of paid jobs",
            id="wallet.rewards",
        ),
        *TABLE_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.wallet: WalletInfo | None = None
        self.has_wallet: bool | None = None  # None: not read yet
        self.wallet_problem: str | None = None
        self.balance: Balance | None = None
        self.balance_problem: Content | None = None
        self.balance_reading = False
        self.escrows: dict[str, EscrowInfo] = {}
        self.escrow_problem: str | None = None
        self.compact: bool | None = None  # the table's columns are built for this width
        sorts = (("ntx", "NTX"), ("when", "time"))
        self.sorters = {"tx-table": TableSort(sorts, _tx_sort_value)}

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with Horizontal(id="wallet-top"):
            with Vertical(id="wallet-panel", classes="panel") as panel:
                panel.border_title = "Wallet"
                yield Static(id="wallet-note", markup=False)
                yield Static(id="address", markup=False)
                yield KeyTable(id="wallet-facts")
            with Vertical(id="balance-panel", classes="panel") as panel:
                panel.border_title = "Balance"
                yield Static(id="balance", markup=False)
        with Vertical(id="tx-panel", classes="panel") as panel:
            panel.border_title = "Transactions"
            yield self.filter_box()
            yield Static(id="tx-note", markup=False)
            yield DataTable(id="tx-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self._build_columns(self.app.size.width < COMPACT_BELOW)
        self.query_one("#tx-table", DataTable).focus()
        self.show()
        self.set_interval(TICK_S, self._tick)

    def on_resize(self, event: Resize) -> None:
        compact = event.size.width < COMPACT_BELOW
        if compact != self.compact:
            self._build_columns(compact)
            self.show()

    def _tick(self) -> None:
        """ "5 min ago" and "in 3 h" move on without reading anything again."""
        if self.is_current:
            self.show_transactions()

    # --- reading -------------------------------------------------------------------------

    def reload(self) -> None:
        self.load()

    @work(exclusive=True, group="refresh")
    async def load(self, interactive: bool = False) -> None:
        client = self.nunet.client
        try:
            self.wallet = await client.call(WalletShow())
        except EngineError as exc:
            self.wallet = None
            if exc.code == "no_wallet":
                self.has_wallet, self.wallet_problem = False, None
            else:
                self.has_wallet, self.wallet_problem = None, error_text(exc)
        else:
            self.has_wallet, self.wallet_problem = True, None
        try:
            listing: EscrowList = await client.call(RewardList())
        except EngineError as exc:
            self.escrow_problem = error_text(exc)
        else:
            self.escrow_problem = None
            self.escrows = {e.job_id: e for e in listing.escrows}
        self.refresh_bindings()
        self.show()
        if self.wallet is not None:
            self.read_balance(interactive)

    @work(exclusive=True, group="balance")
    async def read_balance(self, interactive: bool = False) -> None:
        """A chain read, apart from the rest: a slow or absent ledger holds nothing else up.

        Asked for (``r``), a locked keystore brings up its prompt; on its own it says so."""
        self.balance_reading = True
        self.show_balance()
        try:
            if interactive:
                self.balance = await call_unlocking(self.nunet, WalletBalance())
            else:
                self.balance = await self.nunet.client.call(WalletBalance())
            self.balance_problem = None
        except Cancelled:
            self.balance_problem = Content("The keystore stayed locked: no balance read.")
        except EngineError as exc:
            self.balance, self.balance_problem = None, _balance_problem(exc)
        self.balance_reading = False
        self.show_balance()

    @handles(EscrowChanged)
    def _escrow_changed(self, event: EscrowChanged) -> None:
        self.escrows[event.escrow.job_id] = event.escrow
        self.show_transactions()
        self.show_balance()

    # --- showing -------------------------------------------------------------------------

    def show(self) -> None:
        self.show_wallet()
        self.show_balance()
        self.show_transactions()

    def show_wallet(self) -> None:
        panel = self.query_one("#wallet-panel", Vertical)
        note = self.query_one("#wallet-note", Static)
        address = self.query_one("#address", Static)
        facts = self.query_one("#wallet-facts", KeyTable)
        wallet = self.wallet
        self.query_one("#balance-panel").display = wallet is not None
        address.display = facts.display = wallet is not None
        note.display = wallet is None
        if wallet is None:
            panel.border_title, panel.border_subtitle = "Wallet", ""
            if self.wallet_problem is not None:
                note.update(Content.styled(self.wallet_problem, "$text-error"))
            elif self.has_wallet is None:
                note.update(Content.styled("Reading the wallet…", "$text-muted"))
            else:
                note.update(_no_wallet())
            return
        panel.border_title = f"Wallet · {safe(wallet.network)}"
        panel.border_subtitle = "y copy address"
        address.update(Content.styled(safe(wallet.address), "bold"))
        origin = "imported" if wallet.origin == "import" else "created here"
        facts.set_rows(
            [
                (
                    "Network",
                    Content(f"{safe(wallet.network)} · channel {safe(wallet.channel)} · {origin}"),
                ),
                (
                    "Key hashes",
                    Content.assemble(
                        ("payment ", "$text-muted"),
                        short_hash(wallet.payment_key_hash),
                        ("  stake ", "$text-muted"),
                        short_hash(wallet.stake_key_hash),
                    ),
                ),
                ("Keystore", keystore_text(wallet.keystore)),
            ]
        )

    def show_balance(self) -> None:
        panel = self.query_one("#balance-panel", Vertical)
        label = self.query_one("#balance", Static)
        balance = self.balance
        sums = totals(self.escrows.values())
        # Not in the balance, and not gone either: NTX held by the escrow script.
        escrow_parts: list[tuple[str, str]] = []
        if sums.locked:
            escrow_parts.append((digits(sums.locked), "locked"))
        if sums.awaiting:
            escrow_parts.append((digits(sums.awaiting), "to claim"))
        if balance is not None:
            panel.border_title = f"Balance · {BACKENDS.get(balance.backend, safe(balance.backend))}"
        else:
            panel.border_title = "Balance"
        panel.border_subtitle = "reading…" if self.balance_reading else "r refresh"
        if balance is None:
            if self.balance_problem is not None:
                label.update(self.balance_problem)
            else:
                label.update(Content.styled("Reading the balance…", "$text-muted"))
            return
        if balance.ntx_units is None:
            ntx_part = Content.assemble(
                ("NTX ", "bold"),
                ("unknown token: set [payments] ntx_policy_id", "$text-muted"),
            )
        else:
            ntx_part = Content.assemble((digits(balance.ntx_units), "bold $text-accent"), " NTX")
        ada_part = Content.assemble((ada(balance.lovelace), "bold"), " ADA")
        parts: list[Content | str | tuple[str, str]] = [ntx_part]
        if self.compact:  # one line under the wallet: the table below needs the rows
            parts += ["  ·  ", ada_part]
            if escrow_parts:
                held = ", ".join(f"{amount} {what}" for amount, what in escrow_parts)
                parts += [(f"  ·  in escrow: {held}", "$text-muted")]
        else:
            parts += ["\n", ada_part]
            wide_words = {"locked": "locked in escrow", "to claim": "awaiting your claim"}
            for amount, what in escrow_parts:
                parts += ["\n", (f"{amount} NTX {wide_words[what]}", "$text-muted")]
        label.update(Content.assemble(*parts))

    def show_transactions(self) -> None:
        table: DataTable[Text] = self.query_one("#tx-table", DataTable)
        note = self.query_one("#tx-note", Static)
        panel = self.query_one("#tx-panel", Vertical)
        now = self.nunet.clock()
        escrows = newest_first(self.escrows.values())
        compact = bool(self.compact)
        rows = [
            Row(e.job_id, [table_cell(c) for c in tx_row(e, now, compact=compact)], e)
            for e in escrows
        ]
        sorter = self.sorters["tx-table"]
        shown = sorter.fill(table, rows)
        panel.border_subtitle = sorter.caption(len(shown), len(rows), "escrow") if rows else ""
        table.display = bool(shown)
        note.display = not shown
        if self.escrow_problem is not None:
            note.update(Content.styled(self.escrow_problem, "$text-error"))
        elif not rows:
            note.update(
                Content.assemble(
                    ("No transactions yet. ", "bold"),
                    "A paid job locks its NTX in escrow: you lock it when you buy compute, "
                    "and claim it when this machine ran the job. Locks, claims and refunds "
                    "show here; ",
                    ("$", "bold $text-accent"),
                    " opens the rewards.",
                )
            )
        elif not shown:
            note.update(Content.assemble("No escrow matches ", (repr(sorter.query), "bold")))

    def _build_columns(self, compact: bool) -> None:
        self.compact = compact
        table: DataTable[Text] = self.query_one("#tx-table", DataTable)
        table.clear(columns=True)
        for key, label in COMPACT_COLUMNS if compact else WIDE_COLUMNS:
            table.add_column(label, key=key)

    # --- actions -------------------------------------------------------------------------

    def action_refresh(self) -> None:
        self.load(interactive=True)

    @work(exclusive=True, group="wallet-op")
    async def action_new_wallet(self) -> None:
        confirmed = await self.app.push_screen_wait(
            ConfirmScreen(
                "Make a new wallet?",
                Content.assemble(
                    "Its 24 words will be shown once. ",
                    ("Make sure nobody can see your screen", "bold $text-warning"),
                    " (or a screen share, or a camera) and have paper ready: the words are "
                    "the only way to restore the wallet and its NTX.",
                ),
                confirm_label="Show the words",
            )
        )
        if not confirmed:
            return
        try:
            created = await call_unlocking(self.nunet, WalletNew())
        except Cancelled:
            return
        except EngineError as exc:
            self.notify(error_text(exc), title="New wallet", severity="error", markup=False)
            return
        words = created.mnemonic.split()
        wallet: WalletInfo = created.wallet
        del created
        await self.app.push_screen_wait(MnemonicScreen(words))
        words.clear()
        self.notify(f"Wallet ready: {short_hash(wallet.address, 16, 6)}", title="Wallet")
        self.load()

    @work(exclusive=True, group="wallet-op")
    async def action_import_wallet(self) -> None:
        wallet: WalletInfo | None = await self.app.push_screen_wait(ImportScreen())
        if wallet is not None:
            self.notify(f"Wallet imported: {short_hash(wallet.address, 16, 6)}", title="Wallet")
            self.load()

    @work(exclusive=True, group="wallet-op")
    async def action_unlock(self) -> None:
        keystore = self.wallet.keystore if self.wallet is not None else None
        new = keystore is not None and not keystore.exists
        if await self.app.push_screen_wait(PassphraseScreen(new=new)):
            self.notify("Keystore unlocked", title="Wallet")
            self.load()

    def action_copy_address(self) -> None:
        if self.wallet is None:
            return
        self.app.copy_to_clipboard(self.wallet.address)
        self.notify("Address copied to the clipboard", title="Wallet")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("new_wallet", "import_wallet"):
            return self.has_wallet is False
        if action == "copy_address":
            return self.wallet is not None
        if action == "unlock":
            keystore = self.wallet.keystore if self.wallet is not None else None
            return keystore is not None and keystore.locked
        return super().check_action(action, parameters)

    def redraw_table(self, table_id: str) -> None:
        self.show_transactions()


def _tx_sort_value(escrow: EscrowInfo, key: str) -> Any:
    """The NTX column by its base units (signed: paid to us, or by us), when by the time."""
    if key == "ntx":
        return signed_units(escrow)
    if key == "when":
        return escrow.updated_at or escrow.created_at
    return AUTO


def tx_row(escrow: EscrowInfo, now: float, *, compact: bool) -> tuple[Content, ...]:
    """One escrow as a transaction: its lock, then the claim or refund that spent it."""
    head = 6 if compact else 8
    tail = 0 if compact else 4
    when = Content(ago(escrow.updated_at or escrow.created_at, now))
    cells = [
        Content.styled(safe(escrow.job_id), "bold"),
        state_text(escrow),
        signed_amount(escrow),
        Content(short_hash(escrow.lock_tx, head, tail)),
        # The tx that spent the lock: ours, or the provider's claim or split (a paid job's
        # consumer never made one: its claim_tx is empty).
        Content(short_hash(settle_tx(escrow), head, tail)),
        when,
    ]
    if not compact:
        cells.insert(1, Content(escrow.role))
    return tuple(cells)


def keystore_text(keystore: KeystoreInfo | None) -> Content:
    """``encrypted file ~/.local/…/keyring.cfg · unlocked``; a locked one says what to press."""
    if keystore is None:
        return Content(DASH)
    if keystore.backend == "secretservice":
        return Content(safe(keystore.location))
    where = Content.assemble("encrypted file ", (tilde(keystore.location), "italic"))
    if not keystore.exists:
        return Content.assemble(where, (" · not created yet", "$text-muted"))
    if keystore.locked:
        return Content.assemble(
            where, (" · locked", "bold $text-warning"), " · press ", ("u", "bold $text-accent")
        )
    return Content.assemble(where, (" · unlocked", "$text-success"))


def _no_wallet() -> Content:
    return Content.assemble(
        ("No wallet yet. ", "bold"),
        "A wallet holds the NTX this node earns or spends: escrow locks, claims and refunds "
        "are made from its address.\n\n",
        ("n", "bold $text-accent"),
        "  new wallet: 24 fresh words, shown once\n",
        ("i", "bold $text-accent"),
        "  import a wallet from its words",
    )


def _balance_problem(exc: EngineError) -> Content:
    heads = {
        "no_chain": "No chain backend. ",
        "chain": "The ledger cannot be read. ",
        "network_mismatch": "Wrong network. ",
        "no_blockfrost_key": "No Blockfrost project id. ",
        "keystore_locked": "The keystore is locked. ",
        "keystore_new": "The keystore is not set up. ",
    }
    head = heads.get(exc.code, "No balance. ")
    tail = (
        " Press r to give its passphrase."
        if exc.code in ("keystore_locked", "keystore_new")
        else ""
    )
    return Content.assemble((head, "bold $text-warning"), safe(exc.message), tail)


__all__ = ["WalletScreen", "keystore_text", "tilde", "tx_row"]
