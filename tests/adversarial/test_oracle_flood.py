"""A stranger floods the oracle's /request-service while honest jobs go on (issue 20 §4).

Before, the oracle took an unsigned request from anyone and counted it as an open job for
the named provider until its deadline, up to 30 days ahead: one POST with a provider's public
peer id shut that provider out of paid jobs (409 provider_busy), and every POST added a row
to the oracle's store for ever.

Here a real oracle (HTTP on 127.0.0.1, its SQLite store, its lock checks on the real local
ledger) is attacked from 127.0.0.2 with unsigned requests in an honest consumer's name, then
with signed requests from fifty fresh identities, each naming the honest provider: the
unsigned are refused (401) and never stored, the signed are bounded per address (429) and
hold no slot; the honest consumer's job is quoted, locked on chain and holds the provider's
one slot; and once the hold passes, the attacker's requests lapse and leave the store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from nacl.signing import SigningKey
from pycardano import Address, BlockFrostChainContext, Network, PaymentSigningKey

from oracle_client.escrow.contract import escrow_address
from oracle_client.escrow.transactions import lock, submit
from oracle_client.ledger import start_server
from oracle_client.models import ServiceQuote, ServiceRequest, sign_service_request
from oracle_client.oracle_server.keys import load_or_create_key
from oracle_client.oracle_server.locks import ChainLockChecker
from oracle_client.oracle_server.server import SERVICE_BURST, OracleServer
from oracle_client.oracle_server.service import HOLD_S, MAX_PENDING_PER_CLIENT, Oracle
from oracle_client.oracle_server.store import Store
from oracle_client.peerid import peer_id_from_public_key
from tests.doubles.oracle import CONSUMER, PROVIDER, datum_for, service_request


@pytest.fixture
def real_oracle(tmp_path: Path) -> Iterator[tuple[OracleServer, Any, Any]]:
    ledger = start_server(tmp_path / "ledger.db")
    store = Store(tmp_path / "oracle.db")
    context = BlockFrostChainContext("local", base_url=ledger.url)
    unit = bytes.fromhex(ledger.ntx_unit)
    checker = ChainLockChecker(context, escrow_address(Network.TESTNET), (unit[:28], unit[28:]))
    oracle = Oracle(load_or_create_key(tmp_path / "oracle.key"), store, checker, "testnet")
    server = OracleServer(oracle, poll_interval=0.05).start()
    try:
        yield server, ledger, context
    finally:
        server.close()
        store.close()
        ledger.stop()


def _post(client: httpx.Client, url: str, request: ServiceRequest | dict[str, Any]) -> Any:
    body = request if isinstance(request, dict) else msgspec.to_builtins(request)
    return client.post(f"{url}/request-service", json=body)


def _rows(store: Store) -> int:
    with store.transaction() as db:
        return int(db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])


def test_a_request_flood_neither_blocks_a_provider_nor_grows_the_store(
    real_oracle: tuple[OracleServer, Any, Any],
) -> None:
    server, ledger, context = real_oracle
    oracle = server.oracle
    stranger = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=10)

    # 1. Unsigned, or signed by someone else, in the honest consumer's name: refused, unstored;
    # past its address's burst, refused unread (429, rate_limited) until it slows down.
    honest_terms = msgspec.to_builtins(service_request("job-x"))
    answers = []
    for i in range(100):
        forged = {**honest_terms, "job_id": f"forged-{i}", "signature": "00" * 64}
        answers.append(_post(stranger, server.url, forged))
    unsigned = [a for a in answers if a.status_code == 401]
    limited = [a for a in answers if a.status_code == 429]
    assert len(unsigned) + len(limited) == 100
    assert all(a.json()["error"] == "bad_signature" for a in unsigned)
    assert all(a.json()["error"] == "rate_limited" for a in limited)
    assert SERVICE_BURST <= len(unsigned) < SERVICE_BURST + 20  # the burst, and its refill
    assert limited and "try again in" in limited[0].json()["reason"]
    assert int(limited[0].headers["Retry-After"]) >= 1
    assert _rows(oracle.store) == 0

    # 2. From another address, signed by fifty fresh identities of its own, each naming the
    # honest provider (within that address's burst: the bound on open requests is under test).
    stranger = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.3"), timeout=10)
    statuses = []
    for i in range(50):
        key = SigningKey.generate()
        request = msgspec.structs.replace(
            service_request(f"flood-{i}"),
            consumer_peer_id=peer_id_from_public_key(bytes(key.verify_key)),
        )
        statuses.append(_post(stranger, server.url, sign_service_request(request, bytes(key))))
    accepted = [a for a in statuses if a.status_code == 200]
    refused = [a for a in statuses if a.status_code == 429]
    assert len(accepted) == MAX_PENDING_PER_CLIENT and len(refused) == 50 - len(accepted)
    assert all(a.json()["error"] == "too_many_pending" for a in refused)
    assert "127.0.0.3 sent" in refused[0].json()["reason"]

    # 3. The honest consumer, from its own address, is quoted the honest provider (one slot):
    # none of those requests holds it. It locks on chain; from then on its job holds the slot.
    honest = httpx.Client(timeout=10)
    quote = msgspec.convert(
        _post(honest, server.url, service_request("honest-1")).json(), ServiceQuote
    )
    assert quote.provider_peer_id == PROVIDER.peer_id
    consumer_key = PaymentSigningKey(bytes(CONSUMER.payment_key))
    consumer_address = Address.from_primitive(CONSUMER.address())
    ledger.faucet(consumer_address, ada=40, ntx=50)
    tx = lock(
        context,
        signing_key=consumer_key,
        address=consumer_address,
        datum=datum_for(quote),
        ntx=ledger.ntx_unit,
    )
    submit(context, tx)
    busy = _post(honest, server.url, service_request("honest-2"))
    assert busy.status_code == 409 and busy.json()["error"] == "provider_busy"

    # 4. The hold passes: each new request looks a few lapsed ones up and forgets them.
    rows_before = _rows(oracle.store)
    clock = oracle.clock
    oracle.clock = lambda: clock() + HOLD_S + 60
    try:
        for i in range(4):
            _post(honest, server.url, service_request(f"later-{i}"))
    finally:
        oracle.clock = clock
    # The attacker's lapsed rows are gone; the honest, locked job stays.
    assert _rows(oracle.store) < rows_before - 20
    assert oracle.store.job("honest-1") is not None
    assert oracle.store.job("flood-0") is None
