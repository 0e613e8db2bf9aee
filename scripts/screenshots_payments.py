"""The wallet and rewards pictures: screenshots/wallet-*.svg, rewards-*.svg, keystore-*.svg.

    .venv/bin/python scripts/screenshots_payments.py [--out screenshots] [--size 160x48 ...]

(``scripts/screenshots.py`` runs this too, after its own tour; ``--only payments`` there runs
just this.) Each size gets a fresh temporary node home reading a local ledger (the real
Blockfrost-compatible server, on 127.0.0.1), and the escrows of the snapshot tests
(tests/tui/test_snapshots_wallet.py) moved to the present. The tour: the wallet screen without a
wallet, the import dialog refusing a mistyped phrase, a new wallet (the warning, the new
keystore's passphrase prompt, the 24 words), the wallet funded by the ledger's faucet, then
the rewards of both sides. The words are a throwaway wallet's, made in a temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import msgspec  # noqa: E402
from textual.widgets import Input  # noqa: E402

from engine.api import SetMode  # noqa: E402
from engine.config import Paths  # noqa: E402
from engine.facade import Engine  # noqa: E402
from nunet_tui.app import NunetApp  # noqa: E402
from oracle_client.ledger.server import LedgerServer, start_server  # noqa: E402
from screenshots import on, shoot, until  # noqa: E402  (the main tour's helpers)
from tests.conftest import MACHINE_TOML, make_home  # noqa: E402
from tests.daemons.test_wallet import PASSPHRASE, VECTOR  # noqa: E402
from tests.doubles.host import fixed_host  # noqa: E402
from tests.tui.test_snapshots_wallet import ESCROWS, NOW, PAYMENTS_TOML, store_escrows  # noqa: E402

MISTYPED = VECTOR.rsplit(" ", 1)[0] + " filter"  # every word valid, the checksum wrong


def store_present_escrows(home: Paths) -> None:
    """The snapshot tests' escrows, moved to the present (written while the engine runs, as
    the escrow flow would have written them over the past days)."""
    shift = time.time() - NOW
    store_escrows(
        home,
        [
            msgspec.structs.replace(
                e,
                created_at=e.created_at + shift,
                updated_at=e.updated_at + shift,
                deadline_ms=e.deadline_ms + int(shift * 1000),
            )
            for e in ESCROWS
        ],
    )


async def tour(
    engine: Engine, ledger: LedgerServer, home: Paths, out: Path, size: tuple[int, int]
) -> None:
    app = NunetApp(client=engine)
    async with app.run_test(size=size) as pilot:
        await until(pilot, on(pilot, "ProviderDashboard"))
        await until(pilot, lambda: app.node is not None)
        await pilot.press("w")
        await until(pilot, lambda: getattr(app.screen, "has_wallet", None) is False)
        await shoot(pilot, out, "wallet-none", size)

        await pilot.press("i")
        await until(pilot, on(pilot, "ImportScreen"))
        app.screen.query_one("#mnemonic", Input).value = MISTYPED
        await pilot.press("enter")
        await until(pilot, lambda: bool(app.screen.query_one("#error").display))
        await shoot(pilot, out, "wallet-import-error", size)
        await pilot.press("escape")

        await until(pilot, on(pilot, "WalletScreen"))
        await pilot.press("n")
        await until(pilot, on(pilot, "ConfirmScreen"))
        await shoot(pilot, out, "wallet-new-confirm", size)
        await pilot.press("y")
        await until(pilot, on(pilot, "PassphraseScreen"))
        await pilot.press(*PASSPHRASE, "enter", *PASSPHRASE)
        await shoot(pilot, out, "keystore-passphrase", size)
        await pilot.press("enter")
        await until(pilot, on(pilot, "MnemonicScreen"))
        await shoot(pilot, out, "wallet-words", size)
        await pilot.press("tab", "enter")

        await until(pilot, on(pilot, "WalletScreen"))
        wallet: Any = app.screen
        await until(pilot, lambda: wallet.wallet is not None)
        ledger.faucet(wallet.wallet.address, ada="12.5", ntx="1296.35")
        store_present_escrows(home)
        await pilot.press("r")
        await until(pilot, lambda: wallet.balance is not None and wallet.balance.ntx_units)
        await shoot(pilot, out, "wallet", size)

        await pilot.press("dollar_sign")
        await until(pilot, lambda: getattr(app.screen, "loaded", False))
        await shoot(pilot, out, "rewards-provider", size)
        await pilot.press("v")
        await pilot.pause(0.3)
        await shoot(pilot, out, "rewards-consumer", size)


def shoot_size(out: Path, size: tuple[int, int]) -> None:
    with tempfile.TemporaryDirectory(prefix="nunet-shots-pay-") as tmp:
        root = Path(tmp)
        ledger = start_server(root / "ledger.db")
        home = make_home(
            root / "home", machine_toml=MACHINE_TOML + PAYMENTS_TOML.format(url=ledger.url)
        )
        host = fixed_host(root / "host", clock=time.time)
        engine = Engine(home, network=False, probes=host.probes).start()
        try:
            engine.call_blocking(SetMode(mode="provider"))
            asyncio.run(tour(engine, ledger, home, out, size))
        finally:
            engine.close()
            ledger.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "screenshots")
    parser.add_argument("--size", action="append", default=None, help="WIDTHxHEIGHT")
    args = parser.parse_args()
    sizes = [tuple(int(n) for n in s.split("x")) for s in (args.size or ["160x48", "80x24"])]
    args.out.mkdir(parents=True, exist_ok=True)
    for width, height in sizes:
        shoot_size(args.out, (width, height))


if __name__ == "__main__":
    main()
