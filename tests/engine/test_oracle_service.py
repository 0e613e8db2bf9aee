"""The reference oracle: receipts it refuses, one decision per job (also under races and
across restarts), the decision rules, the lock check over a ChainContext, its key file, and
`nunet-oracle serve` as a real process."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio
from nacl.signing import VerifyKey
from pycardano import (
    Address,
    Asset,
    AssetName,
    MultiAsset,
    Network,
    RawCBOR,
    ScriptHash,
    TransactionInput,
    TransactionOutput,
    UTxO,
    Value,
)

from oracle_client.client import (
    DecisionConflict,
    LockNotFound,
    OracleClient,
    OracleRejected,
    OracleUnavailable,
    ReceiptRejected,
    Undecidable,
)
from oracle_client.escrow.contract.datum import (
    EscrowDatum,
    NoStakingCredential,
    distribute_message,
)
from oracle_client.escrow.receipt import Fault, Outcome
from oracle_client.models import (
    RewardGrant,
    RewardPending,
    RewardRequest,
    ServiceQuote,
    sign_liveness,
)
from oracle_client.oracle_server.keys import KeyFileError, load_or_create_key
from oracle_client.oracle_server.locks import ChainLockChecker, ChainUnavailable, ExpectedLock
from oracle_client.oracle_server.locks import LockNotFound as ChainLockNotFound
from oracle_client.oracle_server.rules import (
    LIVENESS_GRACE_S,
    UndecidableReceipt,
    decide,
    decide_vanished,
)
from oracle_client.oracle_server.server import OracleServer
from oracle_client.oracle_server.service import Oracle, OracleRefusal
from tests.doubles.oracle import (
    CONSUMER,
    OTHER_PROVIDER,
    PROVIDER,
    LockCheckerDouble,
    lock_for,
    receipt_for,
    running_oracle,
    service_request,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def checker() -> LockCheckerDouble:
    return LockCheckerDouble()


@pytest.fixture
def server(tmp_path: Path, checker: LockCheckerDouble) -> Iterator[OracleServer]:
    with running_oracle(tmp_path / "oracle", checker) as server:
        yield server


def _client(server: OracleServer) -> OracleClient:
    return OracleClient(server.url, timeout=5, retries=0)


def _registered(server: OracleServer, checker: LockCheckerDouble, job_id: str) -> ServiceQuote:
    """A job registered with the oracle and locked on "chain"."""

    async def main() -> ServiceQuote:
        async with _client(server) as oracle:
            return await oracle.request_service(service_request(job_id))

    quote = trio.run(main)
    checker.add(lock_for(quote))
    return quote


def _reward(server: OracleServer, request: RewardRequest) -> object:
    async def main() -> object:
        async with _client(server) as oracle:
            return await oracle.request_reward(request)

    return trio.run(main)


def test_tampered_receipt_is_refused(server: OracleServer, checker: LockCheckerDouble) -> None:
    quote = _registered(server, checker, "job-t")
    signed = receipt_for(quote, "failed", "provider")
    tampered = msgspec.structs.replace(signed, fault="consumer")  # refund turned into withdraw
    with pytest.raises(ReceiptRejected) as refused:
        _reward(server, RewardRequest(job_id="job-t", receipt=tampered))
    assert refused.value.status == 403 and refused.value.error == "receipt_invalid"
    other_terms = receipt_for(quote)
    other_terms = msgspec.structs.replace(other_terms, amount=quote.estimated_price * 2)
    with pytest.raises(ReceiptRejected, match="amount differ from the registered job"):
        _reward(server, RewardRequest(job_id="job-t", receipt=other_terms))
    assert server.oracle.store.decision("job-t") is None
    assert checker.lookups == 0  # refused before the chain was even asked


def test_receipt_signed_by_one_peer_is_refused(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    quote = _registered(server, checker, "job-1p")
    # The provider's alone is its report (kept, decides nothing); the consumer's alone only
    # ever says the provider vanished (tests/adversarial/test_escrow_liveness.py).
    alone = receipt_for(quote, signers=(PROVIDER,))
    assert isinstance(_reward(server, RewardRequest(job_id="job-1p", receipt=alone)), RewardPending)
    receipt = receipt_for(quote, signers=(CONSUMER,))
    with pytest.raises(ReceiptRejected, match="not signed by the provider") as refused:
        _reward(server, RewardRequest(job_id="job-1p", receipt=receipt))
    assert refused.value.error == "receipt_unsigned"
    assert server.oracle.store.decision("job-1p") is None


def test_double_request_returns_the_same_decision(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    quote = _registered(server, checker, "job-d")
    first = _reward(server, RewardRequest(job_id="job-d", receipt=receipt_for(quote)))
    again = _reward(server, RewardRequest(job_id="job-d", receipt=receipt_for(quote)))
    bare = _reward(server, RewardRequest(job_id="job-d"))
    assert isinstance(first, RewardGrant)
    assert first == again == bare  # same signature, same decided_at: signed once
    assert checker.lookups == 1


def test_two_locks_with_the_same_terms_get_one_signature_for_the_consumers_lock(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    """Two outputs carry the job's datum: the oracle signs only for the lock tx the request
    names (the consumer's, from its Confirm), for that one output, and only once."""

    async def register() -> ServiceQuote:
        async with _client(server) as oracle:
            return await oracle.request_service(service_request("job-2l"))

    quote = trio.run(register)
    ref_a = checker.add(lock_for(quote), ref="aa" * 32 + "#0")
    ref_b = checker.add(lock_for(quote), ref="bb" * 32 + "#1")
    done = RewardRequest(job_id="job-2l", receipt=receipt_for(quote))
    with pytest.raises(LockNotFound, match="2 escrow outputs carry the terms") as ambiguous:
        _reward(server, done)  # no lock tx named: the oracle never guesses
    assert ambiguous.value.status == 409 and ref_a in ambiguous.value.reason
    with pytest.raises(LockNotFound, match="left no escrow lock"):
        _reward(server, msgspec.structs.replace(done, lock_tx="cc" * 32))
    assert server.oracle.store.decision("job-2l") is None

    grant = _reward(server, msgspec.structs.replace(done, lock_tx="bb" * 32))
    assert isinstance(grant, RewardGrant) and grant.escrow_utxo == ref_b
    grant.verify()
    price = quote.estimated_price
    message = distribute_message(price, ref_b)
    assert bytes.fromhex(grant.oracle_message) == message
    assert message != distribute_message(price, ref_a)
    # Never a second signature: naming the other lock gets the one decision, for B.
    again = _reward(server, msgspec.structs.replace(done, lock_tx="aa" * 32))
    assert again == grant


def test_one_lock_needs_no_lock_tx(server: OracleServer, checker: LockCheckerDouble) -> None:
    quote = _registered(server, checker, "job-1l")
    [ref] = checker.locks
    grant = _reward(server, RewardRequest(job_id="job-1l", receipt=receipt_for(quote)))
    assert isinstance(grant, RewardGrant) and grant.escrow_utxo == ref


def test_withdraw_after_refund_is_refused(server: OracleServer, checker: LockCheckerDouble) -> None:
    quote = _registered(server, checker, "job-wr")
    refund = _reward(
        server, RewardRequest(job_id="job-wr", receipt=receipt_for(quote, "timeout", "provider"))
    )
    assert isinstance(refund, RewardGrant) and refund.reward_type == "refund"
    with pytest.raises(DecisionConflict, match="already decided: refund") as conflict:
        _reward(server, RewardRequest(job_id="job-wr", receipt=receipt_for(quote)))
    assert conflict.value.status == 409
    assert server.oracle.store.decision("job-wr") == refund


def test_concurrent_withdraw_and_refund_sign_only_one(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    quote = _registered(server, checker, "job-race")
    receipts = [receipt_for(quote), receipt_for(quote, "failed", "provider")] * 4
    results: list[tuple[int, dict[str, Any]]] = []
    barrier = threading.Barrier(len(receipts))

    def ask(index: int) -> None:
        barrier.wait()
        body = msgspec.json.encode(RewardRequest(job_id="job-race", receipt=receipts[index]))
        reply = httpx.post(f"{server.url}/request-reward", content=body, timeout=10)
        results.append((reply.status_code, reply.json()))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(receipts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    granted = [body for status, body in results if status == 200]
    refused = [body for status, body in results if status == 409]
    assert len(granted) == 4 and len(refused) == 4
    assert len({g["signature"] for g in granted}) == 1
    kinds = {g["reward_type"] for g in granted}
    assert len(kinds) == 1 and all(r["error"] == "decision_conflict" for r in refused)


def test_no_lock_on_chain_means_no_signature(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    async def register() -> ServiceQuote:
        async with _client(server) as oracle:
            return await oracle.request_service(service_request("job-nl"))

    quote = trio.run(register)
    checker.add(lock_for(quote, amount=quote.estimated_price - 1))  # not the quoted price
    request = RewardRequest(job_id="job-nl", receipt=receipt_for(quote))
    with pytest.raises(LockNotFound) as missing:
        _reward(server, request)
    assert missing.value.status == 409
    assert server.oracle.store.decision("job-nl") is None
    checker.add(lock_for(quote))  # the lock lands on chain
    assert isinstance(_reward(server, request), RewardGrant)


def test_undecidable_receipt_gets_no_signature(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    quote = _registered(server, checker, "job-u")
    with pytest.raises(Undecidable) as undecidable:
        _reward(server, RewardRequest(job_id="job-u", receipt=receipt_for(quote, "failed")))
    assert undecidable.value.status == 422
    assert "blames neither peer" in undecidable.value.reason


@pytest.mark.parametrize(
    ("outcome", "fault", "started", "decision"),
    [
        ("completed", "none", True, "distribute"),
        ("failed", "provider", True, "refund"),
        ("oom", "provider", True, "refund"),
        ("timeout", "provider", True, "refund"),
        ("interrupted", "provider", True, "refund"),
        ("cancelled", "consumer", False, "refund"),  # cancelled before it started
        ("failed", "none", False, "refund"),  # never started: nothing to pay for
        ("failed", "consumer", True, "distribute"),  # the consumer's script failed
        ("timeout", "consumer", True, "distribute"),  # the job overran its own limit
        ("cancelled", "consumer", True, "distribute"),  # cancelled while running: metered
        ("cancelled", "none", True, None),
    ],
)
def test_decision_rules(outcome: Outcome, fault: Fault, started: bool, decision: str) -> None:
    quote = ServiceQuote(
        job_id="job-rules",
        network="testnet",
        consumer_peer_id=CONSUMER.peer_id,
        consumer_pkh=CONSUMER.pkh,
        provider_peer_id=PROVIDER.peer_id,
        compute_provider_addr=PROVIDER.address(),
        provider_pkh=PROVIDER.pkh,
        estimated_price=1,
        deadline=2_000_000_000_000,
        oracle_key="00" * 32,
        oracle_message="00",
        signature="00" * 64,
    )
    receipt = receipt_for(quote, outcome, fault, started=started, signers=())
    if decision is None:
        with pytest.raises(UndecidableReceipt):
            decide(receipt)
    else:
        assert decide(receipt) == decision


def test_decisions_survive_a_restart(tmp_path: Path) -> None:
    checker = LockCheckerDouble()
    root = tmp_path / "oracle"
    with running_oracle(root, checker) as server:
        oracle_key = server.oracle.oracle_key
        quote = _registered(server, checker, "job-p")
        refund = _reward(
            server, RewardRequest(job_id="job-p", receipt=receipt_for(quote, "oom", "provider"))
        )
    assert stat.S_IMODE((root / "oracle.key").stat().st_mode) == 0o600
    with running_oracle(root, checker) as server:
        assert server.oracle.oracle_key == oracle_key  # the key is kept, not regenerated
        assert _reward(server, RewardRequest(job_id="job-p")) == refund
        with pytest.raises(DecisionConflict):
            _reward(server, RewardRequest(job_id="job-p", receipt=receipt_for(quote)))
        assert checker.lookups == 1  # decided before the restart: never looked up again


def test_key_file_refuses_loose_permissions(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "oracle.key"
    key = load_or_create_key(path)
    assert load_or_create_key(path).encode() == key.encode()
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match="readable by others"):
        load_or_create_key(path)
    path.chmod(0o600)
    path.write_text("not a key\n")
    with pytest.raises(KeyFileError, match="32-byte Ed25519 seed"):
        load_or_create_key(path)


# ------------------------------------------------------------------ the lock check on a chain


class ChainContextDouble:
    """Answers ``utxos(address)`` from a list, as a pycardano ChainContext would: the only
    call ChainLockChecker makes. (The local ledger replaces this once it is available.)"""

    def __init__(self, utxos: list[UTxO], fail: bool = False) -> None:
        self._utxos = utxos
        self.fail = fail

    def utxos(self, address: str) -> list[UTxO]:
        if self.fail:
            raise ConnectionError("connection refused")
        return list(self._utxos)


POLICY = bytes(range(28))
NTX = b"NTX"
ESCROW = str(Address(ScriptHash(bytes(28)), network=Network.TESTNET))


def _utxo(index: int, datum: object, ntx: int, extra: bytes = b"") -> UTxO:
    """An escrow output holding ``ntx`` of the NTX and, with ``extra``, one unit of another
    token of that name (under another policy)."""
    assets = MultiAsset({ScriptHash(POLICY): Asset({AssetName(NTX): ntx})})
    if extra:
        assets[ScriptHash(bytes([7]) * 28)] = Asset({AssetName(extra): 1})
    output = TransactionOutput(Address.from_primitive(ESCROW), Value(2_000_000, assets))
    output.datum = datum
    return UTxO(TransactionInput.from_primitive([bytes([index]) * 32, 0]), output)


def test_chain_lock_checker_matches_the_inline_datum() -> None:
    expected = ExpectedLock(
        job_id="job-c",
        consumer_pkh=bytes.fromhex(CONSUMER.pkh),
        provider_pkh=bytes.fromhex(PROVIDER.pkh),
        oracle_key=bytes(32),
        amount=5_000_000,
    )

    def datum(**change: object) -> EscrowDatum:
        fields: dict[str, object] = {
            "consumer": expected.consumer_pkh,
            "consumer_stake": NoStakingCredential(),
            "provider": expected.provider_pkh,
            "oracle_key": expected.oracle_key,
            "job_id": b"job-c",
            "amount": expected.amount,
            "deadline": 2_000_000_000_000,
        }
        fields.update(change)
        return EscrowDatum(**fields)  # type: ignore[arg-type]

    decoys = [
        _utxo(1, None, 5_000_000),
        _utxo(2, RawCBOR(b"\x01"), 5_000_000),  # someone's unrelated datum
        _utxo(3, RawCBOR(datum(amount=4_999_999).to_cbor()), 5_000_000),
        _utxo(4, RawCBOR(datum(job_id=b"job-x").to_cbor()), 5_000_000),
        _utxo(5, RawCBOR(datum(oracle_key=bytes([1]) * 32).to_cbor()), 5_000_000),
        _utxo(6, RawCBOR(datum().to_cbor()), 4_000_000),  # datum says 5 NTX, holds 4
        # Issue 20 §5: what the split cannot spend is no lock: one unit of another token
        # beside the NTX, or more NTX than the datum names.
        _utxo(9, RawCBOR(datum().to_cbor()), 5_000_000, extra=b"DUST"),
        _utxo(10, RawCBOR(datum().to_cbor()), 5_000_001),
    ]
    context = ChainContextDouble(decoys)
    checker = ChainLockChecker(context, ESCROW, (POLICY, NTX))
    with pytest.raises(ChainLockNotFound):
        checker.check_lock(expected)
    context._utxos.append(_utxo(7, RawCBOR(datum().to_cbor()), 5_000_000))
    assert checker.check_lock(expected) == f"{'07' * 32}#0"
    context.fail = True
    with pytest.raises(ChainUnavailable, match="connection refused"):
        checker.check_lock(expected)

    # A backend that cannot even be constructed yet is "unavailable", and is retried later.
    attempts: list[int] = []

    def connect() -> ChainContextDouble:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("ledger not up")
        return ChainContextDouble([_utxo(8, datum(), 5_000_000)])

    lazy = ChainLockChecker(connect, ESCROW)
    with pytest.raises(ChainUnavailable, match="ledger not up"):
        lazy.check_lock(expected)
    assert lazy.check_lock(expected) == f"{'08' * 32}#0"


def test_chain_lock_checker_picks_the_consumers_lock_among_equal_ones() -> None:
    expected = ExpectedLock(
        job_id="job-e",
        consumer_pkh=bytes.fromhex(CONSUMER.pkh),
        provider_pkh=bytes.fromhex(PROVIDER.pkh),
        oracle_key=bytes(32),
        amount=5_000_000,
    )
    datum = EscrowDatum(
        consumer=expected.consumer_pkh,
        consumer_stake=NoStakingCredential(),
        provider=expected.provider_pkh,
        oracle_key=expected.oracle_key,
        job_id=b"job-e",
        amount=expected.amount,
        deadline=2_000_000_000_000,
    )
    same = RawCBOR(datum.to_cbor())
    two_outputs = _utxo(9, same, 5_000_000)
    two_outputs.input.index = 3
    context = ChainContextDouble(
        [_utxo(0x0B, same, 5_000_000), two_outputs, _utxo(9, same, 5_000_000)]
    )
    checker = ChainLockChecker(context, ESCROW, (POLICY, NTX))
    with pytest.raises(ChainLockNotFound, match="3 escrow outputs carry the terms"):
        checker.check_lock(expected)
    assert checker.check_lock(_with_lock_tx(expected, "0b" * 32)) == f"{'0b' * 32}#0"
    # A tx that made two such outputs: its first, and only that one.
    assert checker.check_lock(_with_lock_tx(expected, "09" * 32)) == f"{'09' * 32}#0"
    with pytest.raises(ChainLockNotFound, match="left no escrow lock"):
        checker.check_lock(_with_lock_tx(expected, "0c" * 32))


def _with_lock_tx(expected: ExpectedLock, lock_tx: str) -> ExpectedLock:
    return dataclasses.replace(expected, lock_tx=lock_tx)


# ------------------------------------------------------------------ nunet-oracle serve


def _serve_cli(tmp_path: Path, ledger_url: str) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    command = [
        sys.executable,
        "-m",
        "oracle_client.oracle_server.cli",
        "serve",
        "--db",
        str(tmp_path / "oracle.db"),
        "--key-file",
        str(tmp_path / "key"),
        "--ledger-url",
        ledger_url,
        "--port",
        "0",
    ]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=10)
        raise AssertionError(proc.stderr.read().decode() if proc.stderr else "no output")
    return proc, json.loads(line)


def _stop_cli(proc: subprocess.Popen[bytes]) -> int | None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_cli_serves_before_the_ledger_is_up_and_survives_a_restart(tmp_path: Path) -> None:
    from oracle_client.ledger import start_server

    with socket.socket() as probe:  # the port the ledger will listen on, later
        probe.bind(("127.0.0.1", 0))
        ledger_port = probe.getsockname()[1]
    ledger_url = f"http://127.0.0.1:{ledger_port}/api"
    request = service_request("job-cli")
    proc, ready = _serve_cli(tmp_path, ledger_url)
    ledger = None
    try:
        assert ready["url"].startswith("http://127.0.0.1:")
        assert ready["escrow_address"].startswith("addr_test1w")
        key_file = tmp_path / "key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        info = httpx.get(f"{ready['url']}/info").json()
        assert info["oracle_key"] == ready["oracle_key"]
        seed = bytes.fromhex(key_file.read_text().strip())
        assert bytes(VerifyKey(bytes.fromhex(info["oracle_key"]))) != seed  # seed, not key

        async def ask(url: str) -> ServiceQuote:
            async with OracleClient(url, timeout=10, retries=0) as oracle:
                quote = await oracle.request_service(request)
                reward = RewardRequest(job_id="job-cli", receipt=receipt_for(quote))
                if ledger is None:
                    with pytest.raises(OracleUnavailable, match="503") as down:
                        await oracle.request_reward(reward)
                    assert "cannot connect to the chain backend" in str(down.value)
                else:  # reachable now: the real Blockfrost path finds no lock
                    with pytest.raises(LockNotFound, match="no escrow lock for job job-cli"):
                        await oracle.request_reward(reward)
                return quote

        first = trio.run(ask, ready["url"])
        ledger = start_server(tmp_path / "ledger.db", port=ledger_port)
        assert trio.run(ask, ready["url"]) == first
        assert _stop_cli(proc) == 0

        proc, again = _serve_cli(tmp_path, ledger_url)  # same db and key file
        assert again["oracle_key"] == ready["oracle_key"]
        assert trio.run(ask, again["url"]) == first  # the registration was kept
    finally:
        _stop_cli(proc)
        if ledger is not None:
            ledger.stop()


# ------------------------------------------------------------------ on the local ledger


def test_oracle_on_the_local_ledger_signs_what_the_escrow_script_accepts(tmp_path: Path) -> None:
    """The whole money path on the real local ledger: a job is quoted, nothing is released
    before its lock is on chain (nor for a lock of another amount), then the provider claims
    with the oracle's withdraw signature and another job's consumer is refunded with its
    refund signature; the ledger runs the escrow script on both."""
    from pycardano import BlockFrostChainContext, PaymentSigningKey

    from oracle_client.escrow.contract import escrow_address
    from oracle_client.escrow.transactions import distribute, lock, refund, submit
    from oracle_client.ledger import start_server
    from oracle_client.oracle_server.store import Store

    ledger = start_server(tmp_path / "ledger.db")
    store = Store(tmp_path / "oracle.db")
    try:
        context = BlockFrostChainContext("local", base_url=ledger.url)
        unit = bytes.fromhex(ledger.ntx_unit)
        checker = ChainLockChecker(context, escrow_address(Network.TESTNET), (unit[:28], unit[28:]))
        oracle = Oracle(load_or_create_key(tmp_path / "oracle.key"), store, checker, "testnet")
        server = OracleServer(oracle, poll_interval=0.05).start()
        keys = {p: PaymentSigningKey(bytes(p.payment_key)) for p in (CONSUMER, PROVIDER)}
        address = {p: Address.from_primitive(p.address()) for p in (CONSUMER, PROVIDER)}
        ledger.faucet(address[CONSUMER], ada=40, ntx=50)
        ledger.faucet(address[PROVIDER], ada=10)

        def lock_job(quote: ServiceQuote, amount: int) -> None:
            datum = EscrowDatum(
                consumer=bytes.fromhex(quote.consumer_pkh),
                consumer_stake=NoStakingCredential(),
                provider=bytes.fromhex(quote.provider_pkh),
                oracle_key=bytes.fromhex(quote.oracle_key),
                job_id=quote.job_id.encode(),
                amount=amount,
                deadline=quote.deadline,
            )
            tx = lock(
                context,
                signing_key=keys[CONSUMER],
                address=address[CONSUMER],
                datum=datum,
                ntx=ledger.ntx_unit,
            )
            submit(context, tx)

        async def main() -> tuple[RewardGrant, RewardGrant]:
            async with OracleClient(server.url, timeout=10, retries=0) as client:
                quote = await client.request_service(service_request("job-l1", slots=2))
                done = RewardRequest(job_id="job-l1", receipt=receipt_for(quote))
                with pytest.raises(LockNotFound):  # not locked yet
                    await client.request_reward(done)
                lock_job(quote, quote.estimated_price - 1)
                with pytest.raises(LockNotFound):  # locked, but not the quoted price
                    await client.request_reward(done)
                lock_job(quote, quote.estimated_price)
                withdraw = await client.request_reward(done)

                other = await client.request_service(service_request("job-l2", slots=2))
                lock_job(other, other.estimated_price)
                failed = receipt_for(other, "failed", "provider")
                refunded = await client.request_reward(
                    RewardRequest(job_id="job-l2", receipt=failed)
                )
            assert isinstance(withdraw, RewardGrant) and isinstance(refunded, RewardGrant)
            return withdraw, refunded

        withdraw, refunded = trio.run(main)
        escrows = {
            f"{u.input.transaction_id.payload.hex()}#{u.input.index}": u
            for u in context.utxos(escrow_address(Network.TESTNET))
        }
        assert withdraw.reward_type == "distribute"
        claim_tx = distribute(
            context,
            signing_key=keys[PROVIDER],
            address=address[PROVIDER],
            job_id="job-l1",
            oracle_signature=bytes.fromhex(withdraw.signature),
            provider_amount=withdraw.provider_amount,
            provider_address=address[PROVIDER],
            escrow_utxo=escrows[withdraw.escrow_utxo or ""],  # not the decoy of 1 less
            ntx=ledger.ntx_unit,
        )
        submit(context, claim_tx)
        refund_tx = refund(
            context,
            signing_key=keys[CONSUMER],
            address=address[CONSUMER],
            job_id="job-l2",
            oracle_signature=bytes.fromhex(refunded.signature),
            ntx=ledger.ntx_unit,
        )
        submit(context, refund_tx)
        provider_ntx = sum(
            u.output.amount.multi_asset.get(ScriptHash(unit[:28]), {}).get(AssetName(unit[28:]), 0)
            for u in context.utxos(address[PROVIDER])
        )
        assert provider_ntx == withdraw.amount
        server.close()
    finally:
        store.close()
        ledger.stop()


# --- the lone receipt against the provider's liveness -------------------------------------


@dataclasses.dataclass
class _Clock:
    """The oracle's clock, moved by the test instead of waiting out the grace."""

    offset: float = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def _liveness(quote: ServiceQuote, at: float, signer: Any = PROVIDER) -> RewardRequest:
    report = sign_liveness(
        quote.job_id, quote.provider_peer_id, int(at * 1000), bytes(signer.peer_key)
    )
    return RewardRequest(job_id=quote.job_id, liveness=report)


def test_a_lone_receipt_waits_while_the_provider_is_alive_and_refunds_once_it_is_silent(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    clock = _Clock()
    server.oracle.clock = clock
    quote = _registered(server, checker, "job-live")
    assert isinstance(_reward(server, _liveness(quote, clock())), RewardPending)
    lie = RewardRequest(
        job_id="job-live",
        receipt=receipt_for(quote, "interrupted", "provider", signers=(CONSUMER,)),
    )
    pending = _reward(server, lie)
    assert isinstance(pending, RewardPending) and "said it was running" in pending.reason
    # ...and when asking again can bring the decision (issue 22): the grace left, over the
    # wire (an older client ignores the field).
    assert pending.retry_after_s is not None
    assert LIVENESS_GRACE_S - 5 <= pending.retry_after_s <= LIVENESS_GRACE_S
    clock.offset = LIVENESS_GRACE_S - 1  # still within the grace: still nothing
    later = _reward(server, lie)
    assert isinstance(later, RewardPending) and later.retry_after_s is not None
    assert later.retry_after_s <= 1.5
    assert server.oracle.store.decision("job-live") is None
    clock.offset = LIVENESS_GRACE_S + 1  # silent past the grace: it vanished
    grant = _reward(server, lie)
    assert isinstance(grant, RewardGrant) and grant.reward_type == "refund"
    assert grant.beneficiary_pkh == quote.consumer_pkh


def test_a_lone_receipt_refunds_when_the_provider_never_reported(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    quote = _registered(server, checker, "job-never")
    claim = receipt_for(quote, "interrupted", "provider", signers=(CONSUMER,))
    grant = _reward(server, RewardRequest(job_id="job-never", receipt=claim))
    assert isinstance(grant, RewardGrant) and grant.reward_type == "refund"


def test_liveness_reports_that_are_not_the_providers_own_and_fresh_are_refused(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    quote = _registered(server, checker, "job-forged")
    now = time.time()
    for forged in (
        _liveness(quote, now, signer=CONSUMER),  # the consumer cannot keep it "alive" either
        _liveness(quote, now - LIVENESS_GRACE_S - 5),  # an old one, replayed
        _liveness(quote, now + 3600),  # dated in the future, to last
    ):
        with pytest.raises(OracleRejected):
            _reward(server, forged)
    other = sign_liveness(
        "job-forged", OTHER_PROVIDER.peer_id, int(now * 1000), bytes(OTHER_PROVIDER.peer_key)
    )
    with pytest.raises(ReceiptRejected, match="another provider"):
        _reward(server, RewardRequest(job_id="job-forged", liveness=other))
    assert server.oracle.store.last_alive("job-forged") is None
    # Nothing recorded: the consumer's word alone decides, as for a provider that never spoke.
    claim = receipt_for(quote, "interrupted", "provider", signers=(CONSUMER,))
    grant = _reward(server, RewardRequest(job_id="job-forged", receipt=claim))
    assert isinstance(grant, RewardGrant) and grant.reward_type == "refund"


def test_a_live_provider_is_paid_once_the_job_completes(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    quote = _registered(server, checker, "job-paid")
    assert isinstance(_reward(server, _liveness(quote, time.time())), RewardPending)
    lie = receipt_for(quote, "interrupted", "provider", signers=(CONSUMER,))
    assert isinstance(_reward(server, RewardRequest(job_id="job-paid", receipt=lie)), RewardPending)
    grant = _reward(server, RewardRequest(job_id="job-paid", receipt=receipt_for(quote)))
    assert isinstance(grant, RewardGrant) and grant.reward_type == "distribute"
    # Once decided, a liveness report is answered with the decision; nothing changes.
    assert _reward(server, _liveness(quote, time.time())) == grant


def test_decide_vanished_rule(server: OracleServer, checker: LockCheckerDouble) -> None:
    quote = _registered(server, checker, "job-rule")
    lie = receipt_for(quote, "interrupted", "provider", signers=(CONSUMER,))
    assert decide_vanished(lie, None) == "refund"
    assert decide_vanished(lie, None, 1_000, 1_000 + int(LIVENESS_GRACE_S * 1000)) is None
    assert decide_vanished(lie, None, 1_000, 2_000 + int(LIVENESS_GRACE_S * 1000)) == "refund"


def test_a_database_from_before_splits_takes_distribute_decisions(tmp_path: Path) -> None:
    """An oracle database made before issue 12 had a CHECK allowing only withdraw and refund:
    opening it keeps its decisions and lets the oracle record splits."""
    import sqlite3

    from oracle_client.oracle_server.store import Store

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE jobs (job_id TEXT PRIMARY KEY, provider_peer_id TEXT NOT NULL,
            deadline INTEGER NOT NULL, request TEXT NOT NULL, quote TEXT NOT NULL,
            registered_at INTEGER NOT NULL);
        CREATE TABLE decisions (
            job_id TEXT PRIMARY KEY REFERENCES jobs (job_id),
            reward_type TEXT NOT NULL CHECK (reward_type IN ('withdraw', 'refund')),
            grant_json TEXT NOT NULL, receipt TEXT NOT NULL, lock_ref TEXT NOT NULL,
            decided_at INTEGER NOT NULL);
        INSERT INTO jobs VALUES ('old', 'p', 1, '{}', '{}', 1);
        INSERT INTO decisions VALUES ('old', 'refund', '{}', '{}', 'x#0', 1);
        """
    )
    db.close()
    store = Store(path)
    try:
        with store.transaction() as conn:
            conn.execute(
                "INSERT INTO jobs (job_id, provider_peer_id, deadline, request, quote, "
                "registered_at) VALUES ('new', 'p', 1, '{}', '{}', 1)"
            )
            conn.execute("INSERT INTO decisions VALUES ('new', 'distribute', '{}', '{}', 'y#0', 2)")
            kinds = conn.execute("SELECT job_id, reward_type FROM decisions ORDER BY job_id")
            assert kinds.fetchall() == [("new", "distribute"), ("old", "refund")]
            # Issue 20 §4's columns were added; the old row counts as unverified.
            old = conn.execute("SELECT consumer_peer_id, locked FROM jobs WHERE job_id = 'old'")
            assert old.fetchone() == ("", 0)
    finally:
        store.close()
    Store(path).close()  # opening it again changes nothing


def test_a_busy_honest_consumer_is_never_refused_for_requests_it_locked(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    """Issue 20 §4's bounds count requests whose lock was not seen: a consumer that locks what
    it asks for, each job at another provider, is looked up before it would be refused; one
    that locks nothing is refused after MAX_PENDING_PER_CONSUMER, and a lapsed request is
    forgotten."""
    from oracle_client.models import ProviderOffer
    from oracle_client.oracle_server.service import HOLD_S, MAX_PENDING_PER_CONSUMER
    from tests.doubles.oracle import Party

    oracle = server.oracle
    for i in range(MAX_PENDING_PER_CONSUMER + 4):
        provider = Party.from_seed(20 + i)
        offer = ProviderOffer(peer_id=provider.peer_id, address=provider.address(), price=5)
        quote = oracle.request_service(service_request(f"busy-{i}", offers=[offer]))
        checker.add(lock_for(quote))
    for i in range(MAX_PENDING_PER_CONSUMER):
        oracle.request_service(service_request(f"unlocked-{i}"))
    with pytest.raises(OracleRefusal) as refused:
        oracle.request_service(service_request("one-too-many"))
    assert (refused.value.status, refused.value.error) == (429, "too_many_pending")
    clock = oracle.clock
    oracle.clock = lambda: clock() + HOLD_S + 1
    try:  # the unlocked ones lapse, the locked ones stay
        oracle.request_service(service_request("after-the-hold"))
    finally:
        oracle.clock = clock
    assert oracle.store.job("unlocked-0") is None and oracle.store.job("busy-0") is not None
