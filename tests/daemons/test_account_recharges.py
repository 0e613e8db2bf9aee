"""Recharges: NTX arriving in the wallet, one record per transfer, read from the chain's
Blockfrost API (the local ledger's, over real HTTP), with escrow refunds told apart.

- the ledger serves ``/addresses/{address}/transactions`` and ``/txs/{hash}/utxos`` with
  Blockfrost's field names and paging, and refuses pages beyond its bounds;
- ``engine.payments.history`` lists a faucet drop and a transfer from another wallet as
  recharges, and neither the wallet's own lock nor the escrow refund coming back;
- a hostile backend (a real HTTP server answering what the test says) is refused in one
  line: malformed hashes, numbers, a page too long, a reply too large, an answer about
  another transaction;
- a real daemon's ``account --json`` carries the records, the faucet drop among them.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pycardano import (
    Address,
    Asset,
    AssetName,
    MultiAsset,
    Network,
    PaymentSigningKey,
    ScriptHash,
    TransactionBuilder,
    TransactionOutput,
    Value,
)

from engine.errors import EngineError
from engine.payments import history
from oracle_client.escrow import transactions as T
from oracle_client.escrow.contract import escrow_script_hash
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons
from tests.unit.test_escrow_transactions import World, world

__all__ = ["daemons", "world"]

NTX = 1_000_000


class Wallet:
    def __init__(self) -> None:
        self.sk = PaymentSigningKey.generate()
        self.address = Address(self.sk.to_verification_key().hash(), network=Network.TESTNET)


def send_ntx(world: World, src: Any, dst: Address, units: int) -> str:
    """A plain payment of NTX (and its min ADA) from ``src`` to ``dst``."""
    unit = bytes.fromhex(world.ledger.ntx_unit)
    multi = MultiAsset({ScriptHash(unit[:28]): Asset({AssetName(unit[28:]): units})})
    builder = TransactionBuilder(world.ctx)
    builder.add_input_address(src.address)
    builder.add_output(TransactionOutput(dst, Value(2_000_000, multi)))
    tx = builder.build_and_sign([src.sk], change_address=src.address)
    world.ctx.submit_tx(tx)
    return str(tx.id)


def is_escrow() -> Callable[[str], bool]:
    return history.script_address_matcher(escrow_script_hash().payload)


def backend(world: World) -> history.Backend:
    return history.Backend(world.ledger.url, "local")


# --- the ledger's endpoints -----------------------------------------------------------------


def test_the_ledger_serves_an_address_history_as_blockfrost_does(world: World) -> None:
    alice = Wallet()
    world.ledger.faucet(alice.address, ada=20, ntx=10)
    paid = send_ntx(world, alice, world.consumer.address, 7 * NTX)
    url, consumer = world.ledger.url, world.consumer.address

    rows = httpx.get(f"{url}/v0/addresses/{consumer}/transactions").json()
    assert [set(r) for r in rows] == [{"tx_hash", "tx_index", "block_height", "block_time"}] * 2
    assert rows[1]["tx_hash"] == paid and rows[0]["block_height"] < rows[1]["block_height"]
    newest = httpx.get(
        f"{url}/v0/addresses/{consumer}/transactions", params={"order": "desc", "count": 1}
    ).json()
    assert [r["tx_hash"] for r in newest] == [paid]
    second = httpx.get(
        f"{url}/v0/addresses/{consumer}/transactions", params={"count": 1, "page": 2}
    ).json()
    assert [r["tx_hash"] for r in second] == [paid]
    past = httpx.get(f"{url}/v0/addresses/{consumer}/transactions", params={"page": 3})
    assert past.json() == []
    for bad in ({"count": 101}, {"count": 0}, {"page": 0}, {"order": "sideways"}):
        answer = httpx.get(f"{url}/v0/addresses/{consumer}/transactions", params=bad)
        assert answer.status_code == 400 and answer.json()["status_code"] == 400
    assert httpx.get(f"{url}/v0/addresses/{Wallet().address}/transactions").status_code == 404

    utxos = httpx.get(f"{url}/v0/txs/{paid}/utxos").json()
    assert utxos["hash"] == paid
    (spent,) = utxos["inputs"]
    assert spent["address"] == str(alice.address) and len(spent["tx_hash"]) == 64
    assert {"amount", "output_index", "collateral", "reference"} <= set(spent)
    to_consumer = [o for o in utxos["outputs"] if o["address"] == str(consumer)]
    assert {"unit": world.ledger.ntx_unit, "quantity": str(7 * NTX)} in to_consumer[0]["amount"]
    assert to_consumer[0]["consumed_by_tx"] is None
    assert httpx.get(f"{url}/v0/txs/{'0' * 64}/utxos").status_code == 404
    assert httpx.get(f"{url}/v0/txs/nothex/utxos").status_code == 400


# --- the engine's reading of them -----------------------------------------------------------


def test_recharges_are_the_transfers_in_and_never_an_escrow_coming_back(world: World) -> None:
    alice = Wallet()
    world.ledger.faucet(alice.address, ada=20, ntx=10)
    paid = send_ntx(world, alice, world.consumer.address, 7 * NTX)
    lock_tx = world.lock()  # 25 NTX out of the wallet: not a recharge
    refund = T.refund(
        world.ctx,
        signing_key=world.consumer.sk,
        address=world.consumer.address,
        job_id=world.datum.job_id,
        oracle_signature=world.signature("refund", world.consumer),
    )
    refund_tx = T.submit(world.ctx, refund)  # 25 NTX back: a refund, not a recharge
    address = str(world.consumer.address)

    listed = history.read_recharges(
        backend(world), address, world.ledger.ntx_unit, is_escrow=is_escrow()
    )
    assert listed.scanned == 4 and listed.complete
    assert [(r.tx_hash, r.amount_units, r.kind) for r in listed.recharges] == [
        (paid, 7 * NTX, "recharge"),
        (listed.recharges[1].tx_hash, 100 * NTX, "recharge"),  # the fixture's faucet drop
    ]
    assert listed.recharges[0].from_addresses == (str(alice.address),)
    assert listed.recharges[1].from_addresses == ()  # the faucet: a tx with no inputs
    assert listed.recharged_units == 107 * NTX
    assert listed.recharges[0].at >= listed.recharges[1].at > 0
    assert refund_tx not in {r.tx_hash for r in listed.recharges}

    # An escrow of another script is still told apart: it spends one of our own locks.
    own = history.read_recharges(
        backend(world),
        address,
        world.ledger.ntx_unit,
        is_escrow=lambda _: False,
        own_locks={lock_tx},
    )
    assert own.recharged_units == 107 * NTX
    # Without either, the refund would pass for a recharge: the check is what tells them apart.
    blind = history.read_recharges(
        backend(world), address, world.ledger.ntx_unit, is_escrow=lambda _: False
    )
    assert blind.recharged_units == 132 * NTX and blind.recharges[0].tx_hash == refund_tx

    # Bounded: the newest two transactions only, and it says so.
    newest = history.read_recharges(
        backend(world), address, world.ledger.ntx_unit, is_escrow=is_escrow(), limit=2
    )
    assert newest.scanned == 2 and not newest.complete and newest.recharges == ()
    # An address the chain never saw has no history (Blockfrost's 404).
    empty = history.read_recharges(
        backend(world), str(Wallet().address), world.ledger.ntx_unit, is_escrow=is_escrow()
    )
    assert (empty.recharges, empty.scanned, empty.complete) == ((), 0, True)


# --- a hostile backend ----------------------------------------------------------------------

TX = "ab" * 32
ADDRESS = str(Wallet().address)
UNIT = "cd" * 28 + "4e5458"
GOOD_UTXOS = {
    "hash": TX,
    "inputs": [],
    "outputs": [{"address": ADDRESS, "amount": [{"unit": UNIT, "quantity": "5"}]}],
}


class Scripted:
    """A real HTTP server on 127.0.0.1 answering each path with what the test gives."""

    def __init__(self) -> None:
        self.answers: dict[str, bytes] = {}
        self.hits: list[str] = []
        scripted = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0].removeprefix("/api/v0")
                scripted.hits.append(path)
                body = scripted.answers.get(path)
                self.send_response(200 if body is not None else 404)
                self.send_header("content-length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api"

    def say(self, rows: Any, utxos: Any = GOOD_UTXOS) -> None:
        self.answers = {
            f"/addresses/{ADDRESS}/transactions": json.dumps(rows).encode(),
            f"/txs/{TX}/utxos": json.dumps(utxos).encode(),
        }

    def read(self, cache: dict[str, Any] | None = None) -> Any:
        return history.read_recharges(
            history.Backend(self.url, "local"),
            ADDRESS,
            UNIT,
            is_escrow=lambda _: False,
            cache=cache,
        )


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    server = Scripted()
    yield server
    server.server.shutdown()
    server.server.server_close()


HUGE = {"unit": UNIT, "quantity": "1e99"}
ROW = {"tx_hash": TX, "tx_index": 0, "block_height": 1, "block_time": 1_750_000_000}


@pytest.mark.parametrize(
    ("rows", "utxos", "why"),
    [
        ([{**ROW, "tx_hash": "../../etc"}], GOOD_UTXOS, "tx_hash is not 64 hex digits"),
        ([{**ROW, "block_time": "soon"}], GOOD_UTXOS, "block_time is not a whole number"),
        ([{**ROW, "block_time": True}], GOOD_UTXOS, "block_time is not a whole number"),
        ({"not": "a list"}, GOOD_UTXOS, "not a list of at most one page"),
        ([ROW] * 101, GOOD_UTXOS, "not a list of at most one page"),
        ([ROW], {**GOOD_UTXOS, "hash": "ef" * 32}, "names another transaction"),
        (
            [ROW],
            {**GOOD_UTXOS, "outputs": [{"address": ADDRESS, "amount": [HUGE]}]},
            "a quantity is not a whole number",
        ),
        (
            [ROW],
            {**GOOD_UTXOS, "outputs": [{"address": "addr\n\x1b[31m", "amount": []}]},
            "an address in outputs is malformed",
        ),
        ([ROW], {**GOOD_UTXOS, "outputs": [{}] * 1001}, "outputs is not a list of at most 1000"),
        ([ROW], None, "is listed but not found"),
    ],
)
def test_a_hostile_backend_is_refused_in_one_line(
    scripted: Scripted, rows: Any, utxos: Any, why: str
) -> None:
    scripted.say(rows, utxos)
    if utxos is None:
        del scripted.answers[f"/txs/{TX}/utxos"]
    with pytest.raises(EngineError) as info:
        scripted.read()
    assert info.value.code == "chain" and why in info.value.message
    assert "\n" not in info.value.message and scripted.url in info.value.message


def test_a_backend_reply_beyond_the_byte_bound_is_refused(scripted: Scripted) -> None:
    scripted.say([ROW])
    scripted.answers[f"/txs/{TX}/utxos"] = b" " * (history.MAX_REPLY_BYTES + 1)
    with pytest.raises(EngineError, match="more than 2097152 bytes"):
        scripted.read()
    scripted.say([ROW])  # the same backend, honest now
    listed = scripted.read()
    assert [(r.tx_hash, r.amount_units) for r in listed.recharges] == [(TX, 5)]


def test_a_transaction_is_read_once_then_its_verdict_is_kept(scripted: Scripted) -> None:
    scripted.say([ROW])
    cache: dict[str, Any] = {}
    first, again = scripted.read(cache), scripted.read(cache)
    assert first == again and first.recharged_units == 5
    assert scripted.hits.count(f"/txs/{TX}/utxos") == 1
    assert scripted.hits.count(f"/addresses/{ADDRESS}/transactions") == 2  # new ones listed
    scripted.read()
    assert scripted.hits.count(f"/txs/{TX}/utxos") == 2


def test_an_unreachable_backend_is_one_line() -> None:
    with pytest.raises(EngineError) as info:
        history.read_recharges(
            history.Backend("http://127.0.0.1:9/api", "local"),
            ADDRESS,
            UNIT,
            is_escrow=lambda _: False,
        )
    assert info.value.code == "chain" and "cannot reach the chain backend" in info.value.message


# --- a real daemon ------------------------------------------------------------------------


def test_a_daemons_account_lists_the_faucet_drop_as_a_recharge(
    tmp_path: Path, daemons: Callable[..., Daemon]
) -> None:
    from oracle_client.ledger import start_server

    ledger = start_server(tmp_path / "ledger.db")
    try:
        toml = f'[payments]\nbackend = "local"\nledger_url = "{ledger.url}"\n'
        node = daemons(
            "consumer", 51, extra_toml=toml, env={"NUNET_KEYRING_PASSPHRASE": "recharges"}
        )
        address = node.cli("wallet", "new")["address"]
        drop, _, _ = ledger.faucet(address, ada=20, ntx="12.5", note="demo")
        data = node.cli("account")
        assert data["recharges_read"] is True and data["recharges_complete"] is True
        assert data["recharges"] == [
            {
                "tx_hash": drop,
                "at": pytest.approx(data["recharges"][0]["at"]),
                "amount_units": 12_500_000,
                "kind": "recharge",
                "from_addresses": [],
            }
        ]
        assert data["recharged_units"] == 12_500_000 == data["balance_units"]
        shown = run_cli("account", home=node.home)
        assert shown.returncode == 0, shown.stderr
        assert f"{drop}  12.5 NTX recharge  from the faucet (no inputs)" in shown.stdout
        assert "12.5 NTX arrived in all, 1 transfer(s)" in shown.stdout
    finally:
        ledger.stop()


# --- the account's figures ------------------------------------------------------------------


def test_without_the_history_the_sum_is_derived_and_says_so() -> None:
    from nunet_tui.cli.account_output import to_text
    from nunet_tui.viewmodels.account import build
    from tests.tui import test_tui_paid_job_walk as walk

    jobs, escrows = [walk.job("consumer")], [walk.escrow("consumer")]
    read = build(jobs, escrows, walk.BALANCE, "", walk.RECHARGES)
    derived = build(jobs, escrows, walk.BALANCE, "", None, "cannot reach the chain backend")
    # The records and the balance-based sum agree on the walk's job: 98.4 + 2.4 - 1.8 - 0.
    assert read.recharged_units == derived.recharged_units == 99_000_000
    assert (read.recharges_read, derived.recharges_read) == (True, False)
    assert derived.recharges == () and derived.to_json()["recharges"] == []
    assert "(derived: balance + locked ever - refunded - earned; the wallet's history was " in (
        to_text(derived)
    )
    assert "not read: cannot reach the chain backend)" in to_text(derived)
    assert "99 NTX arrived in all, 1 transfer(s)" in to_text(read)
