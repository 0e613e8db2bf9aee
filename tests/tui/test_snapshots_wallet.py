"""SVG snapshots of the wallet and rewards screens at 80x24 and 160x48, on a real engine.

The wallet is the Cardano test vector's (imported through the engine, passphrase from the
environment, keystore the encrypted file), its balance read from the local ledger (a real
Blockfrost-compatible HTTP server) after the faucet funded it, and the escrows of paid jobs
are written into the node's store before the engine starts, with fixed times; the app's
clock is pinned. HOME is the test folder, so the keystore's path reads the same everywhere.
Update with ``pytest --snapshot-update`` and look at the pictures before committing them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from textual.pilot import Pilot

from engine.api import EscrowInfo, JobInfo, SetMode, WalletImport
from engine.config import Paths
from engine.domain.spec import JobSpec
from engine.payments.keystore import PASSPHRASE_ENV
from engine.payments.records import EscrowRecord
from engine.store import Store
from nunet_tui.app import NunetApp
from tests.conftest import MACHINE_TOML, make_home
from tests.daemons.test_wallet import PASSPHRASE, VECTOR, VECTOR_PAYMENT_HASH, VECTOR_TESTNET
from tests.tui.test_snapshots import EngineFactory, _quiet, _until, host_engine, settled

__all__ = ["host_engine"]

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]
T0 = 1_750_000_000.0
NOW = T0 + 7_200
OTHER_PKH = "1f0e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4"
ORACLE_KEY = "9c1a" * 16
PAYMENTS_TOML = """
[payments]
backend = "local"
ledger_url = "{url}"
keystore = "file"
"""


def tx_hash(job_id: str, what: str) -> str:
    return hashlib.sha256(f"{job_id}/{what}".encode()).hexdigest()


def escrow(
    job_id: str,
    role: str,
    state: str,
    amount: int,
    *,
    age_s: float,
    deadline_in_s: float = 5 * 3600,
    settled: bool = False,
    **extra: Any,
) -> EscrowInfo:
    provider = role == "provider"
    return EscrowInfo(
        job_id=job_id,
        role=role,  # type: ignore[arg-type]
        state=state,  # type: ignore[arg-type]
        amount=amount,
        deadline_ms=int((NOW + deadline_in_s) * 1000),
        consumer_pkh=OTHER_PKH if provider else VECTOR_PAYMENT_HASH,
        provider_pkh=VECTOR_PAYMENT_HASH if provider else OTHER_PKH,
        oracle_key=ORACLE_KEY,
        lock_tx=tx_hash(job_id, "lock"),
        claim_tx=tx_hash(job_id, "settle") if settled else "",
        created_at=NOW - age_s - 600,
        updated_at=NOW - age_s,
        **extra,
    )


# Both sides of a node that sells and buys compute. Peer and oracle words stay literal.
ESCROWS: list[EscrowInfo] = [
    escrow("b7e1c0de4a91", "provider", "receipt", 48_000_000, age_s=120, outcome="completed"),
    escrow("5d2e8f10aa07", "provider", "verified", 12_500_000, age_s=900, deadline_in_s=7_800),
    escrow(
        "c0ffee123456",
        "provider",
        "receipt",
        3_250_000,
        age_s=60,
        outcome="failed",
        error="oracle unavailable: [bold]http://127.0.0.1:9/[/bold] \x1b[31mrefused",
    ),
    escrow(
        "a1b2c3d4e5f6",
        "provider",
        "claimed",
        80_600_000,
        age_s=5 * 3600,
        settled=True,
        outcome="completed",
        reward_type="withdraw",
    ),
    escrow(
        "9f8e7d6c5b4a",
        "provider",
        "claimed",
        1_240_500_000,
        age_s=2 * 86_400,
        settled=True,
        outcome="completed",
        reward_type="withdraw",
    ),
    escrow(
        "0a0b0c0d0e0f",
        "provider",
        "refunded",
        6_000_000,
        age_s=3 * 86_400,
        settled=True,
        outcome="failed",
        reward_type="refund",
    ),
    escrow("7f3a90c1d2e3", "consumer", "locked", 50_000_000, age_s=1_500, deadline_in_s=10_800),
    escrow(
        "0e9b77aa12f0",
        "consumer",
        "undecided",
        10_000_000,
        age_s=4_000,
        deadline_in_s=-3_600,
        outcome="failed",
        error="the oracle would not decide: no receipt from the provider",
    ),
    escrow(
        "51c0a1b2c3d4",
        "consumer",
        "paid_out",
        20_000,
        age_s=86_400,
        settled=True,
        outcome="completed",
        reward_type="withdraw",
    ),
    escrow(
        "c4ce11ed0001",
        "consumer",
        "refunded",
        10_000,
        age_s=2 * 86_400,
        settled=True,
        outcome="cancelled",
        reward_type="refund",
    ),
]


# The jobs two claimed escrows paid for: the spec each ran under and its machine time, which
# the rewards screen adds up per spec per day.
SPEC_OF = {"a1b2c3d4e5f6": ("gpu large", 1_800), "9f8e7d6c5b4a": ("cpu small", 5_400)}


def ran_job(info: EscrowInfo) -> JobInfo:
    spec, ran_s = SPEC_OF[info.job_id]
    return JobInfo(
        job_id=info.job_id,
        role="provider",
        state="completed",
        provider="self",
        consumer="12D3KooWconsumer",
        spec=JobSpec(script_url="https://example.org/train.py", framework="pytorch"),
        resource_spec=spec,
        created_at=info.created_at,
        updated_at=info.updated_at,
        started_at=info.updated_at - ran_s - 60,
        finished_at=info.updated_at - 60,
    )


def store_escrows(paths: Paths, escrows: list[EscrowInfo] = ESCROWS) -> None:
    """Write escrow rows as the engine's ``Escrows.save`` would (the document it keeps)."""
    store = Store(paths.database)
    for info in escrows:
        record = EscrowRecord(info=info, consumer_peer="12D3KooWconsumer", provider_peer="self")
        store.save_escrow(info.job_id, info.state, msgspec.json.encode(record))
        if info.job_id in SPEC_OF:
            store.save_job(ran_job(info))
    store.close()


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Any]:
    """The local ledger, with the faucet's ADA and NTX at the vector's address."""
    from oracle_client.ledger.server import start_server

    server = start_server(tmp_path / "ledger.db")
    server.faucet(VECTOR_TESTNET, ada="12.5", ntx="1296.35")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def node_home(tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch) -> Paths:
    """A node home reading the local ledger, its keystore the encrypted file."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)
    return make_home(
        tmp_path / "home", machine_toml=MACHINE_TOML + PAYMENTS_TOML.format(url=ledger.url)
    )


def _app(host_engine: EngineFactory, home: Paths, mode: str, *, wallet: bool = True) -> NunetApp:
    """The app on a fresh engine; with ``wallet``, the vector's wallet and the escrows."""
    if wallet:
        store_escrows(home)
    engine = host_engine()
    engine.call_blocking(SetMode(mode=mode))  # type: ignore[arg-type]
    if wallet:
        engine.call_blocking(WalletImport(mnemonic=VECTOR), timeout=60)
    return NunetApp(client=engine, clock=lambda: NOW)


async def _balance_read(pilot: Pilot[Any]) -> None:
    await _until(pilot, lambda: getattr(pilot.app.screen, "balance", None) is not None, 20)
    await _quiet(pilot)


@pytest.mark.parametrize("size", SIZES)
def test_wallet(
    snap_compare: Any, node_home: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    """Address, network, keystore, balances from the ledger, escrows as transactions."""
    app = _app(host_engine, node_home, "provider")
    run_before = settled("WalletScreen", keys=["w"], then=_balance_read)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_wallet_none_yet(
    snap_compare: Any, node_home: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    """No wallet: the screen offers n (new) and i (import)."""
    app = _app(host_engine, node_home, "consumer", wallet=False)

    async def read(pilot: Pilot[Any]) -> None:
        await _until(pilot, lambda: getattr(pilot.app.screen, "has_wallet", None) is False)

    run_before = settled("WalletScreen", keys=["w"], then=read)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


async def _rows_in(pilot: Pilot[Any]) -> None:
    await _until(pilot, lambda: getattr(pilot.app.screen, "loaded", False))


@pytest.mark.parametrize("size", SIZES)
def test_rewards_provider(
    snap_compare: Any, node_home: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    """Jobs awaiting their claim (one with an oracle error, shown literally), claimed history,
    totals earned."""
    app = _app(host_engine, node_home, "provider")
    run_before = settled("RewardsScreen", keys=["dollar_sign"], then=_rows_in)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_rewards_consumer(
    snap_compare: Any, node_home: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    """Funds locked per job (one past its deadline), what was paid out and refunded."""
    app = _app(host_engine, node_home, "consumer")
    run_before = settled("RewardsScreen", keys=["R"], then=_rows_in)
    assert snap_compare(app, terminal_size=size, run_before=run_before)
