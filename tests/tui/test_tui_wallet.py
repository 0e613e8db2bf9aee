"""The wallet and rewards screens: Pilot tests on a real embedded engine without the network.

The keystore is the encrypted file (``[payments] keystore = "file"``: no D-Bus decides for
the test); its passphrase comes from NUNET_KEYRING_PASSPHRASE or from the screen's prompt.
No chain backend is configured, so the balance says so in place. Escrow rows are saved on
the engine's own thread with ``Escrows.save``, which emits ``EscrowChanged`` as a paid job's
steps would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from textual.content import Content
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Label

from engine.api import EscrowInfo, SetMode, WalletImport, WalletShow
from engine.config import Paths
from engine.facade import Engine
from engine.payments.keystore import PASSPHRASE_ENV
from engine.payments.records import EscrowRecord
from engine.payments.wallet import validate_mnemonic
from nunet_tui.app import NunetApp
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.screens.provider_dashboard import ProviderDashboard
from nunet_tui.screens.rewards import RewardsScreen
from nunet_tui.screens.wallet import WalletScreen, tilde
from nunet_tui.screens.wallet_dialogs import ImportScreen, MnemonicScreen, PassphraseScreen
from nunet_tui.widgets.escrow_view import short_hash, span, totals
from oracle_client.ntx import digits
from tests.conftest import MACHINE_TOML, make_home
from tests.daemons.test_wallet import PASSPHRASE, VECTOR, VECTOR_TESTNET, leaks, pycardano_address
from tests.pilot import anyio_backend, on_screen, rows, text_of, until
from tests.tui.test_snapshots_wallet import ESCROWS, NOW, escrow

__all__ = ["anyio_backend"]

pytestmark = pytest.mark.anyio
SIZE = (100, 32)
FILE_KEYSTORE = '\n[payments]\nkeystore = "file"\n'
# The vector with its last word changed: every word valid, the checksum wrong.
BAD_CHECKSUM = VECTOR.rsplit(" ", 1)[0] + " filter"


@pytest.fixture
def node_home(tmp_path: Path) -> Paths:
    return make_home(tmp_path / "home", machine_toml=MACHINE_TOML + FILE_KEYSTORE)


@pytest.fixture
def passphrase_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)


@pytest.fixture
def no_passphrase_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)


async def open_wallet(pilot: Pilot[Any]) -> WalletScreen:
    await on_screen(pilot, ProviderDashboard)
    await until(pilot, lambda: pilot.app.node is not None)  # type: ignore[attr-defined]
    await pilot.press("w")
    wallet: WalletScreen = await on_screen(pilot, WalletScreen)
    await until(pilot, lambda: wallet.has_wallet is not None)
    return wallet


def provider_app(engine: Engine) -> NunetApp:
    engine.call_blocking(SetMode(mode="provider"))
    return NunetApp(client=engine)


# --- pure parts ------------------------------------------------------------------------


def test_amounts_spans_and_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [digits(v) for v in (48_000_000, 80_700, 1_240_500_000, 0, 1)] == [
        "48",
        "0.0807",
        "1,240.5",
        "0",
        "0.000001",
    ]
    assert [span(s) for s in (45, 600, 12_000, 3 * 86_400 + 7_200)] == [
        "45 s",
        "10 min",
        "3 h 20 min",
        "3 d 2 h",
    ]
    assert short_hash("ab" * 32) == "abababab…abab" and short_hash("") == "\u2013"
    monkeypatch.setenv("HOME", "/home/ada")
    assert tilde("/home/ada/.local/state/nunet/keys/keyring.cfg") == (
        "~/.local/state/nunet/keys/keyring.cfg"
    )
    assert tilde("/home/adam/keyring.cfg") == "/home/adam/keyring.cfg"
    sums = totals(ESCROWS)
    assert (sums.earned, sums.awaiting, sums.awaiting_jobs) == (1_321_100_000, 63_750_000, 3)
    assert (sums.locked, sums.spent, sums.refunded) == (60_000_000, 20_000, 10_000)


# --- wallet ----------------------------------------------------------------------------


async def test_new_wallet_confirms_then_shows_the_words_once(
    engine_client: Engine, node_home: Paths, passphrase_env: None
) -> None:
    app = provider_app(engine_client)
    async with app.run_test(size=SIZE) as pilot:
        wallet = await open_wallet(pilot)
        assert wallet.has_wallet is False
        assert "No wallet yet" in text_of(wallet, "#wallet-note")

        await pilot.press("n")
        confirm = await on_screen(pilot, ConfirmScreen)
        assert "nobody can see your screen" in text_of(confirm, "#detail")
        await pilot.press("y")
        shown: MnemonicScreen = await on_screen(pilot, MnemonicScreen)
        labels = [str(label.render()) for label in shown.query("#words Label").results(Label)]
        assert [label.split()[0] for label in labels] == [str(n) for n in range(1, 25)]
        mnemonic = " ".join(label.split()[1] for label in labels)
        assert validate_mnemonic(mnemonic) == mnemonic

        # The words close only through the acknowledgement: not with Esc, not with Enter.
        await pilot.press("escape", "enter")
        await pilot.pause(0.1)
        assert pilot.app.screen is shown
        await pilot.press("tab", "enter")
        await on_screen(pilot, WalletScreen)
        await until(pilot, lambda: wallet.wallet is not None)

        address = engine_client.call_blocking(WalletShow()).address
        assert wallet.wallet is not None and wallet.wallet.address == address
        assert address == pycardano_address(mnemonic, "testnet")
        assert text_of(wallet, "#address") == address
        assert "created here" in text_of(wallet, "#wallet-facts")
        assert "unlocked" in text_of(wallet, "#wallet-facts")
        # With backend "none" the balance says why, in place.
        await until(
            pilot, lambda: not wallet.balance_reading and wallet.balance_problem is not None
        )
        assert "No chain backend" in text_of(wallet, "#balance")
        notes = " ".join(str(n.message) for n in pilot.app._notifications)

    logs = " ".join(
        p.read_text(errors="replace") for p in node_home.log_dir.rglob("*") if p.is_file()
    )
    assert not leaks(mnemonic, logs) and not leaks(mnemonic, notes)


async def test_new_keystore_passphrase_is_chosen_in_a_prompt_then_the_wallet_is_made(
    engine_client: Engine, no_passphrase_env: None
) -> None:
    app = provider_app(engine_client)
    async with app.run_test(size=SIZE) as pilot:
        wallet = await open_wallet(pilot)
        await pilot.press("n")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("y")
        prompt: PassphraseScreen = await on_screen(pilot, PassphraseScreen)
        assert prompt.new and all(field.password for field in prompt.query(Input))

        await pilot.press(*"short", "enter", *"short", "enter")
        await until(pilot, lambda: "at least 8" in text_of(prompt, "#error"))
        await pilot.press(*PASSPHRASE, "enter", *"something else", "enter")
        await until(pilot, lambda: "differ" in text_of(prompt, "#error"))
        assert pilot.app.screen is prompt
        await pilot.press(*PASSPHRASE, "enter", *PASSPHRASE, "enter")

        # Unlocked: the original action (the new wallet) runs again by itself.
        await on_screen(pilot, MnemonicScreen)
        await pilot.press("tab", "enter")
        await on_screen(pilot, WalletScreen)
        await until(pilot, lambda: wallet.wallet is not None)
        assert "unlocked" in text_of(wallet, "#wallet-facts")


async def test_locked_keystore_says_a_wrong_passphrase_in_place(
    node_home: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)
    first = Engine(node_home, network=False).start()
    try:
        first.call_blocking(WalletImport(mnemonic=VECTOR), timeout=60)
    finally:
        first.close()
    monkeypatch.delenv(PASSPHRASE_ENV)

    engine = Engine(node_home, network=False).start()
    try:
        app = provider_app(engine)
        async with app.run_test(size=SIZE) as pilot:
            wallet = await open_wallet(pilot)
            assert "locked · press u" in text_of(wallet, "#wallet-facts")
            await pilot.press("u")
            prompt: PassphraseScreen = await on_screen(pilot, PassphraseScreen)
            assert not prompt.new
            await pilot.press(*"not the passphrase", "enter")
            await until(pilot, lambda: "wrong passphrase" in text_of(prompt, "#error"))
            assert pilot.app.screen is prompt
            assert prompt.query_one("#passphrase", Input).value == ""
            await pilot.press(*PASSPHRASE, "enter")
            await on_screen(pilot, WalletScreen)
            await until(pilot, lambda: "· unlocked" in text_of(wallet, "#wallet-facts"))
            assert wallet.wallet is not None and wallet.wallet.address == VECTOR_TESTNET
    finally:
        engine.close()


async def test_import_with_bad_words_says_why_in_place(
    engine_client: Engine, passphrase_env: None
) -> None:
    app = provider_app(engine_client)
    async with app.run_test(size=SIZE) as pilot:
        wallet = await open_wallet(pilot)
        await pilot.press("i")
        dialog: ImportScreen = await on_screen(pilot, ImportScreen)
        field = dialog.query_one("#mnemonic", Input)
        assert field.password
        await pilot.press(*BAD_CHECKSUM, "enter")
        await until(pilot, lambda: "checksum" in text_of(dialog, "#error"))
        assert pilot.app.screen is dialog and field.value == BAD_CHECKSUM

        field.value = VECTOR
        await pilot.press("enter")
        await on_screen(pilot, WalletScreen)
        await until(pilot, lambda: wallet.wallet is not None)
        assert text_of(wallet, "#address") == VECTOR_TESTNET
        assert "imported" in text_of(wallet, "#wallet-facts")


# --- rewards ---------------------------------------------------------------------------


def save(engine: Engine, info: EscrowInfo) -> None:
    """What the escrow flow does at each step: keep the row, emit ``EscrowChanged``."""

    async def put() -> None:  # on the engine's thread, where its store lives
        escrows = engine.node.payments().escrows
        record = escrows.get(info.job_id) or EscrowRecord(
            info=info, consumer_peer="12D3KooWpeer", provider_peer="self"
        )
        changes = msgspec.structs.asdict(info)
        escrows.save(record, **{k: v for k, v in changes.items() if k != "updated_at"})

    engine._require_thread().call_blocking(put)


async def test_rewards_empty_state_tells_what_to_do(provider_engine: Engine) -> None:
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: app.node is not None)
        await pilot.press("dollar_sign")
        rewards: RewardsScreen = await on_screen(pilot, RewardsScreen)
        await until(pilot, lambda: rewards.loaded)
        assert "No paid jobs yet" in text_of(rewards, "#open-note")
        assert "0 NTX paid to you" in text_of(rewards, "#totals")
        await pilot.press("c")
        await until(pilot, lambda: "Nothing to claim" in text_of(rewards, "#status"))
        await pilot.press("v")
        assert rewards.view == "consumer"
        assert "No NTX locked" in text_of(rewards, "#open-note")
        assert "Nothing settled yet" in text_of(rewards, "#done-note")


@pytest.fixture
def provider_engine(engine_client: Engine) -> Iterator[Engine]:
    engine_client.call_blocking(SetMode(mode="provider"))
    yield engine_client


async def test_rewards_follow_escrow_events_and_show_claim_errors(
    provider_engine: Engine,
) -> None:
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=(140, 40)) as pilot:
        await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: app.node is not None)
        await pilot.press("R")
        rewards: RewardsScreen = await on_screen(pilot, RewardsScreen)
        await until(pilot, lambda: rewards.loaded)
        open_table = rewards.query_one("#open-table", DataTable)
        done_table = rewards.query_one("#done-table", DataTable)

        running = escrow("5d2e8f10aa07", "provider", "verified", 12_500_000, age_s=0)
        save(provider_engine, running)
        await until(pilot, lambda: open_table.row_count == 1)
        assert "5d2e8f10aa07" in rows(open_table)[0] and "12.5" in rows(open_table)[0]
        assert "12.5 NTX locked to claim · 1 job" in text_of(rewards, "#totals")
        assert "5d2e8f10aa07" in text_of(rewards, "#detail")

        # No receipt yet: the engine refuses, and the screen says why under the table.
        await pilot.press("c")
        await until(pilot, lambda: "failed" in text_of(rewards, "#status"))
        assert "no receipt signed by both peers" in text_of(rewards, "#status")

        # An oracle's words with markup in them stay literal, in the row's detail.
        save(provider_engine, msgspec.structs.replace(running, error="[bold]down[/bold] \x1b[2J"))
        await until(pilot, lambda: "⚠" in rows(open_table)[0])
        assert "[bold]down[/bold] \\x1b[2J" in text_of(rewards, "#detail")

        save(
            provider_engine,
            msgspec.structs.replace(running, state="claimed", claim_tx="c1" * 32, error=""),
        )
        await until(pilot, lambda: done_table.row_count == 1 and not open_table.display)
        assert "+12.5" in rows(done_table)[0] and "c1c1c1c1…c1c1" in rows(done_table)[0]
        assert "12.5 NTX paid to you" in text_of(rewards, "#totals")

        # The consumer side: f asks for the refund; without a chain it says so.
        save(provider_engine, escrow("7f3a90c1d2e3", "consumer", "locked", 50_000_000, age_s=0))
        await pilot.press("v")
        await until(pilot, lambda: open_table.row_count == 1)
        assert "50 NTX locked · 1 job" in text_of(rewards, "#totals")
        await pilot.press("f")
        await until(
            pilot, lambda: "Refund of job 7f3a90c1d2e3 failed" in text_of(rewards, "#status")
        )


def test_the_wallet_names_the_tx_that_settled_a_paid_job_as_the_rewards_do() -> None:
    """A consumer's job paid out by its provider's split: the provider's tx spent the lock,
    so this node never made a claim or refund tx of its own (claim_tx ""); the wallet's row
    names the settle tx the rewards list shows (issue 22)."""
    from nunet_tui.screens.rewards import done_row
    from nunet_tui.screens.wallet import tx_row

    split = "5e" * 32
    paid = escrow(
        "9c1d2e3f4a5b", "consumer", "paid_out", 2_000_000, age_s=60,
        settle_tx=split, reward_type="distribute", paid_units=1_234_567,
        refunded_units=765_433,
    )  # fmt: skip
    assert paid.claim_tx == ""
    for compact, head in ((False, 8), (True, 6)):
        cells = [c.plain for c in tx_row(paid, NOW, compact=compact)]
        assert short_hash(split, head, 0 if compact else 4) in cells
    assert short_hash(split) in [c.plain for c in done_row(paid, NOW, "consumer")]


def test_escrow_cells_never_read_markup() -> None:
    """Cells are built from Content, never markup: brackets in an error stay brackets."""
    from nunet_tui.widgets.escrow_view import detail_rows, note_text

    info = escrow("x", "provider", "receipt", 1, age_s=0, error="[red]boom[/red]\x07")
    assert note_text(info).plain == "[red]boom[/red]\\x07"
    problem = dict(detail_rows(info, 0.0))["Problem"]
    assert isinstance(problem, Content) and problem.plain == "[red]boom[/red]\\x07"


async def test_keys_and_palette_reach_wallet_and_rewards(provider_engine: Engine) -> None:
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: app.node is not None)
        await pilot.press("ctrl+p")
        await pilot.pause(0.1)
        await pilot.press(*"wallet")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await on_screen(pilot, WalletScreen)
        await pilot.press("dollar_sign")  # one capability screen replaces the other
        await on_screen(pilot, RewardsScreen)
        await pilot.press("w")
        await on_screen(pilot, WalletScreen)
        await pilot.press("escape")
        await on_screen(pilot, ProviderDashboard)
