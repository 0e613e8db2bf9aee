"""The local ledger (nunet-ledger) through pycardano's real BlockFrostChainContext.

Every test starts the real HTTP server on 127.0.0.1 (a free port, its own SQLite file) and
talks to it the way a node does. Transactions that must be refused are built properly and
then broken in one way each, so the refusal can only come from the check under test.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pycardano import (
    Address,
    BlockFrostChainContext,
    Network,
    PaymentSigningKey,
    Transaction,
    TransactionBody,
    TransactionBuilder,
    TransactionOutput,
    TransactionWitnessSet,
    Value,
    VerificationKeyWitness,
)
from pycardano.exception import TransactionFailedException

from oracle_client.ledger import LedgerServer, cli, start_server
from oracle_client.ledger.params import ParamsContext
from oracle_client.ledger.validate import TxRejected
from tests.conftest import REPO

logging.getLogger("PyCardano").setLevel(logging.ERROR)


class Wallet:
    def __init__(self) -> None:
        self.sk = PaymentSigningKey.generate()
        self.vk = self.sk.to_verification_key()
        self.address = Address(self.vk.hash(), network=Network.TESTNET)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[LedgerServer]:
    server = start_server(tmp_path / "ledger.db")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def ctx(ledger: LedgerServer) -> BlockFrostChainContext:
    return BlockFrostChainContext("local", base_url=ledger.url)


def pay(ctx: BlockFrostChainContext, src: Wallet, dst: Address, lovelace: int) -> Transaction:
    builder = TransactionBuilder(ctx)
    builder.add_input_address(src.address)
    builder.add_output(TransactionOutput(dst, Value(lovelace)))
    return builder.build_and_sign([src.sk], change_address=src.address)


def signed(body: TransactionBody, *keys: PaymentSigningKey) -> Transaction:
    witnesses = [VerificationKeyWitness(k.to_verification_key(), k.sign(body.hash())) for k in keys]
    return Transaction(body, TransactionWitnessSet(vkey_witnesses=witnesses))


def rejection(ctx: BlockFrostChainContext, tx: Transaction) -> str:
    with pytest.raises(TransactionFailedException) as info:
        ctx.submit_tx(tx)
    return str(info.value)


def test_faucet_then_plain_payment(ledger: LedgerServer, ctx: BlockFrostChainContext) -> None:
    alice, bob = Wallet(), Wallet()
    _, created, ntx = ledger.faucet(alice.address, ada=100, ntx="12.5")
    assert (created, ntx) == (100_000_000, 12_500_000)
    [drop] = ctx.utxos(alice.address)
    assert drop.output.amount.coin == 100_000_000

    tx = pay(ctx, alice, bob.address, 5_000_000)
    ctx.submit_tx(tx)

    assert [u.output.amount.coin for u in ctx.utxos(bob.address)] == [5_000_000]
    [change] = ctx.utxos(alice.address)
    assert change.output.amount.coin == 100_000_000 - 5_000_000 - tx.transaction_body.fee
    ntx_unit = ledger.ntx_unit
    policy = bytes.fromhex(ntx_unit[:56])
    assert change.output.amount.multi_asset.to_primitive()[policy][b"NTX"] == 12_500_000
    # The wallet screen's endpoints agree.
    total = httpx.get(f"{ledger.url}/v0/addresses/{alice.address}/total").json()
    assert total["tx_count"] == 2 and total["received_sum"][0]["unit"] == "lovelace"
    txs = httpx.get(f"{ledger.url}/v0/addresses/{bob.address}/transactions").json()
    assert [t["tx_hash"] for t in txs] == [str(tx.id)]
    info = httpx.get(f"{ledger.url}/v0/txs/{tx.id}").json()
    assert info["fees"] == str(tx.transaction_body.fee) and info["utxo_count"] == 2
    assert httpx.get(f"{ledger.url}/v0/ledger/info").json()["ntx"]["unit"] == ntx_unit
    assert ledger.state.faucet_audit()[0]["lovelace"] == 100_000_000


def test_served_parameters_are_the_ones_the_ledger_checks(ctx: BlockFrostChainContext) -> None:
    assert ctx.protocol_param == ParamsContext().protocol_param
    assert len(ctx.protocol_param.cost_models["PlutusV3"]) == 297
    assert ctx.genesis_param.slot_length == 1 and ctx.genesis_param.network_magic == 42


def test_double_spend_rejected(ledger: LedgerServer, ctx: BlockFrostChainContext) -> None:
    alice, bob, carol = Wallet(), Wallet(), Wallet()
    ledger.faucet(alice.address, ada=50)
    first = pay(ctx, alice, bob.address, 5_000_000)
    second = pay(ctx, alice, carol.address, 7_000_000)  # same input, other payee
    ctx.submit_tx(first)
    assert "already spent" in rejection(ctx, second)
    assert "already spent" in rejection(ctx, first)  # a replay is a double spend too
    assert ctx.utxos(carol.address) == []


def test_concurrent_double_spend_lands_once(
    ledger: LedgerServer, ctx: BlockFrostChainContext
) -> None:
    alice = Wallet()
    ledger.faucet(alice.address, ada=50)
    txs = [pay(ctx, alice, Wallet().address, 2_000_000 + i) for i in range(6)]
    results: list[int] = []

    def send(tx: Transaction) -> None:
        r = httpx.post(
            f"{ledger.url}/v0/tx/submit",
            content=tx.to_cbor(),
            headers={"Content-Type": "application/cbor"},
        )
        results.append(r.status_code)

    threads = [threading.Thread(target=send, args=(tx,)) for tx in txs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200] + [400] * 5


def test_bad_signature_rejected(ledger: LedgerServer, ctx: BlockFrostChainContext) -> None:
    alice, mallory = Wallet(), Wallet()
    ledger.faucet(alice.address, ada=50)
    tx = pay(ctx, alice, mallory.address, 5_000_000)
    [w] = tx.transaction_witness_set.vkey_witnesses
    w.signature = alice.sk.sign(b"some other body")
    assert "invalid signature" in rejection(ctx, tx)

    # A valid signature, but by the wrong key: the input's owner has not signed.
    stolen = signed(tx.transaction_body, mallory.sk)
    message = rejection(ctx, stolen)
    assert f"missing signature of key hash {alice.vk.hash().payload.hex()}" in message


def test_fee_too_low_rejected(ledger: LedgerServer, ctx: BlockFrostChainContext) -> None:
    alice, bob = Wallet(), Wallet()
    ledger.faucet(alice.address, ada=50)
    [utxo] = ctx.utxos(alice.address)
    fee = 1_000
    body = TransactionBody(
        inputs=[utxo.input],
        outputs=[
            TransactionOutput(bob.address, Value(5_000_000)),
            TransactionOutput(alice.address, Value(45_000_000 - fee)),
        ],
        fee=fee,
    )
    message = rejection(ctx, signed(body, alice.sk))
    assert "fee too low: 1000 lovelace" in message


def test_value_and_min_ada_rejected(ledger: LedgerServer, ctx: BlockFrostChainContext) -> None:
    alice, bob = Wallet(), Wallet()
    ledger.faucet(alice.address, ada=50)
    [utxo] = ctx.utxos(alice.address)
    fee = 200_000
    minted = TransactionBody(
        inputs=[utxo.input],
        outputs=[TransactionOutput(bob.address, Value(50_000_000))],  # fee from nowhere
        fee=fee,
    )
    assert "value is not conserved" in rejection(ctx, signed(minted, alice.sk))
    dust = TransactionBody(
        inputs=[utxo.input],
        outputs=[
            TransactionOutput(bob.address, Value(100_000)),
            TransactionOutput(alice.address, Value(50_000_000 - 100_000 - fee)),
        ],
        fee=fee,
    )
    assert "output #0 holds 100000 lovelace, below its minimum" in rejection(
        ctx, signed(dust, alice.sk)
    )


def test_validity_interval_checked(ledger: LedgerServer, ctx: BlockFrostChainContext) -> None:
    alice, bob = Wallet(), Wallet()
    ledger.faucet(alice.address, ada=50)
    slot = ctx.last_block_slot
    builder = TransactionBuilder(ctx, ttl=slot + 100)
    builder.add_input_address(alice.address)
    builder.add_output(TransactionOutput(bob.address, Value(5_000_000)))
    tx = builder.build_and_sign([alice.sk], change_address=alice.address)
    ledger.clock.advance(200)  # the ledger's clock moves; nobody sleeps
    assert "expired" in rejection(ctx, tx)

    builder = TransactionBuilder(ctx, validity_start=ctx.last_block_slot + 60)
    builder.add_input_address(alice.address)
    builder.add_output(TransactionOutput(bob.address, Value(5_000_000)))
    early = builder.build_and_sign([alice.sk], change_address=alice.address)
    assert "not valid yet" in rejection(ctx, early)
    ledger.clock.advance(60)
    ctx.submit_tx(early)


def test_paging_of_many_utxos(ledger: LedgerServer, ctx: BlockFrostChainContext) -> None:
    alice = Wallet()
    for i in range(230):
        ledger.faucet(alice.address, ada=1 + i)
    utxos = ctx.utxos(alice.address)  # blockfrost-python gathers pages of 100
    assert len(utxos) == 230
    assert sorted(u.output.amount.coin for u in utxos) == [(1 + i) * 1_000_000 for i in range(230)]
    url = f"{ledger.url}/v0/addresses/{alice.address}/utxos"
    assert len(httpx.get(url, params={"page": 3}).json()) == 30
    assert httpx.get(url, params={"page": 4}).json() == []
    newest = httpx.get(url, params={"count": 1, "order": "desc"}).json()
    assert newest[0]["amount"][0] == {"unit": "lovelace", "quantity": "230000000"}
    for bad in ({"count": 0}, {"count": 101}, {"page": 0}, {"order": "up"}, {"page": "x"}):
        assert httpx.get(url, params=bad).status_code == 400


def test_unknown_and_bad_addresses(ledger: LedgerServer, ctx: BlockFrostChainContext) -> None:
    never = Wallet().address
    r = httpx.get(f"{ledger.url}/v0/addresses/{never}/utxos")
    assert r.status_code == 404 and r.json()["status_code"] == 404  # Blockfrost's shape
    assert ctx.utxos(never) == []  # which pycardano reads as "no UTxOs"
    for bad in ("addr_test1xyz", "not-an-address", "%00" * 10):
        assert httpx.get(f"{ledger.url}/v0/addresses/{bad}/utxos").status_code == 400
    assert httpx.get(f"{ledger.url}/v0/nothing/here").status_code == 404
    assert httpx.get(f"{ledger.url}/v0/txs/zz").status_code == 400


def test_bad_bodies_never_crash_the_server(ledger: LedgerServer) -> None:
    submit = f"{ledger.url}/v0/tx/submit"
    for body in (b"", b"\x00", b"\x84\xa0", b"\x9f" * 5000, b"\xff" * 100, b"\x83" + b"\xa0" * 3):
        r = httpx.post(submit, content=body, headers={"Content-Type": "application/cbor"})
        assert r.status_code == 400, body
        assert r.json()["message"]
    r = httpx.post(submit, content=b"\x00" * (65 * 1024))
    assert r.status_code == 413
    evaluate = httpx.post(f"{ledger.url}/v0/utils/txs/evaluate", content=b"84a0")
    assert "EvaluationFailure" in evaluate.json()["result"]
    # Development endpoints are off unless asked for.
    assert httpx.post(f"{ledger.url}/v0/ledger/clock", json={"advance_s": 5}).status_code == 404
    assert httpx.get(f"{ledger.url}/v0/health").json() == {"is_healthy": True}


_VALID_TX: dict[int, bytes] = {}  # one real tx per ledger: building one costs ~0.2 s


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_mangled_transactions_are_refused_never_crash(
    ledger: LedgerServer, ctx: BlockFrostChainContext, data: st.DataObject
) -> None:
    """Random bytes and bit-flipped real transactions: a TxRejected reason, never an error."""
    if id(ledger) not in _VALID_TX:
        alice = Wallet()
        ledger.faucet(alice.address, ada=50)
        _VALID_TX[id(ledger)] = pay(ctx, alice, Wallet().address, 2_000_000).to_cbor()
    raw = bytearray(_VALID_TX[id(ledger)])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= 1 << data.draw(st.integers(0, 7))
    for candidate in (bytes(raw), data.draw(st.binary(max_size=300))):
        try:
            ledger.ledger.submit(candidate)
        except TxRejected as exc:
            assert str(exc)


def test_project_id_is_enforced_when_configured(tmp_path: Path) -> None:
    with start_server(tmp_path / "l.db", project_id="secret") as server:
        r = httpx.get(f"{server.url}/v0/epochs/latest")
        assert r.status_code == 403
        ctx = BlockFrostChainContext("secret", base_url=server.url)
        assert ctx.epoch >= 0


def test_cli_serve_and_faucet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "cli.db"
    # `serve` in its own process (the ready line, SIGTERM); the faucet in-process, through the
    # same main(), since each interpreter start costs seconds of pycardano import.
    argv = ["serve", "--db", str(db), "--port", "0", "--dev", "--slot-offset", "10"]
    server = subprocess.Popen(
        [sys.executable, "-m", "oracle_client.ledger.cli", *argv],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert server.stdout is not None
        ready = json.loads(server.stdout.readline())
        url = ready["url"]
        alice = Wallet()
        faucet = ["faucet", str(alice.address), "--ada", "3", "--ntx", "7", "--db", str(db)]
        assert cli.main(faucet) == 0
        assert json.loads(capsys.readouterr().out)["ntx"] == 7_000_000
        utxos = httpx.get(f"{url}/v0/addresses/{alice.address}/utxos").json()
        assert {"unit": ready["ntx_unit"], "quantity": "7000000"} in utxos[0]["amount"]
        before = httpx.get(f"{url}/v0/blocks/latest").json()["slot"]
        moved = httpx.post(f"{url}/v0/ledger/clock", json={"advance_s": 3600}).json()
        assert moved["slot"] >= before + 3600
        assert cli.main(["faucet", "nope", "--ada", "1", "--db", str(db)]) == 2
        assert "not a Cardano address" in capsys.readouterr().err
        assert cli.main(["faucet", str(alice.address), "--ada", "0.0000001", "--db", str(db)]) == 2
        assert "at most 6 decimals" in capsys.readouterr().err
        assert cli.main(["info", "--db", str(db)]) == 0
        assert json.loads(capsys.readouterr().out)["ntx"]["unit"] == ready["ntx_unit"]
    finally:
        server.terminate()
        assert server.wait(timeout=10) == 0
