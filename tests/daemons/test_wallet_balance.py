"""`wallet balance` against the local ledger (a real Blockfrost-compatible HTTP server)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.payments.keystore import PASSPHRASE_ENV
from tests.conftest import MACHINE_TOML, make_home, run_cli
from tests.daemons.test_wallet import VECTOR, VECTOR_TESTNET

ENV = {PASSPHRASE_ENV: "a long test passphrase"}


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Any]:
    from oracle_client.ledger.server import start_server

    server = start_server(tmp_path / "ledger.db")
    try:
        yield server
    finally:
        server.stop()


def test_balance_from_the_local_ledger(tmp_path: Path, ledger: Any) -> None:
    toml = MACHINE_TOML + f'[payments]\nbackend = "local"\nledger_url = "{ledger.url}"\n'
    home = make_home(tmp_path / "home", machine_toml=toml)

    def cli(*args: str, stdin: str = "") -> Any:
        result = run_cli(*args, "--json", home=home, env=ENV, input=stdin)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    assert cli("wallet", "import", stdin=VECTOR)["address"] == VECTOR_TESTNET
    empty = cli("wallet", "balance")
    assert (empty["lovelace"], empty["ntx_units"]) == (0, 0)
    assert empty["ntx_unit"] == ledger.ntx_unit and empty["backend"] == "local"

    ledger.faucet(VECTOR_TESTNET, ada="12.5", ntx="7.25")
    ledger.faucet(VECTOR_TESTNET, ada=1, ntx=1)
    funded = cli("wallet", "balance")
    assert funded["ntx_units"] == 8_250_000 and "ntx" not in funded  # base units only
    # The faucet may add the minimum ADA a token output needs: at least what was asked.
    assert funded["lovelace"] >= 13_500_000 and "ada" not in funded
    assert funded["address"] == VECTOR_TESTNET and funded["network"] == "testnet"
