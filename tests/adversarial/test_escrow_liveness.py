"""Every escrow ends decided, without anyone's help (issue 10, section 4).

Real daemons on 127.0.0.1, the real local ledger (its clock moved instead of waiting ten
minutes) and the reference oracle, as tests/daemons/test_payments_e2e.py starts them. The provider
reaches the ledger through ``LedgerLink``, a real HTTP hop that fails the way a Blockfrost
endpoint or the network between does: it accepts a transaction and never passes it on (a
mempool that dropped it), or breaks the connection while a transaction is submitted.

- a claim that was kept and "accepted" but never landed, then the provider restarted and the
  tx expired: settle rebuilds it from the same oracle decision; the provider is paid exactly
  once;
- a connection error while submitting: the settle loop and the daemon keep going, and the
  claim lands once the link is back;
- a provider killed mid-job: the consumer shows "provider unreachable" within three missed
  heartbeats, ends the job interrupted after the grace and gets its NTX back at once, long
  before the escrow's deadline (its liveness reports to the oracle stopped with it, and the
  oracle's grace passed); the provider, back later, cannot claim;
- a consumer that claims "the provider vanished" while the provider is running its paid job:
  the oracle has the provider's fresh liveness reports, answers "pending", and the provider is
  paid exactly once when the job completes.

The oracle's side of the last ones (a receipt the consumer signed alone) is attacked directly
too: it decides a refund only for a provider that never reported or went silent.
"""

from __future__ import annotations

import http.client
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec
import pytest
import trio

from oracle_client.client import OracleClient, ReceiptRejected
from oracle_client.escrow.transactions import DEFAULT_TTL_S
from oracle_client.models import RewardGrant, RewardPending, RewardRequest, ServiceQuote
from oracle_client.oracle_server.server import OracleServer
from tests.adversarial.hostile import HostilePeer
from tests.conftest import TEST_ADDRESS, run_cli
from tests.daemon_harness import Daemon, wait_for
from tests.daemons import test_payments_e2e
from tests.daemons.test_jobs_e2e import PROCESS_JOBS
from tests.daemons.test_payments_e2e import (
    Market,
    _address,
    _escrow,
    _paid_pair,
    _submit,
    market,
    scripts,
)
from tests.doubles.oracle import (
    CONSUMER,
    PROVIDER,
    LockCheckerDouble,
    lock_for,
    receipt_for,
    running_oracle,
    service_request,
)

__all__ = ["market", "scripts"]

# Two daemons, a job or three and the claims: longer than the default per-test limit.
E2E = pytest.mark.timeout(360)

HEARTBEAT_S = 1.0  # tests/daemon_harness.py HEARTBEAT_ENV
GRACE_S = 3.0

Mode = Literal["pass", "swallow", "reset"]


class LedgerLink:
    """A real HTTP hop to the real ledger. ``pass`` forwards everything; ``swallow`` answers
    a tx submit with its hash and drops the tx; ``reset`` breaks the connection on a submit
    without answering. Everything else always passes."""

    def __init__(self, ledger_url: str) -> None:
        target = urlsplit(ledger_url)
        host, port = target.hostname or "127.0.0.1", target.port
        self.mode: Mode = "pass"
        self.swallowed: list[str] = []
        self.dropped: dict[str, bytes] = {}  # tx id -> CBOR of what it swallowed
        self.resets = 0
        link = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._relay()

            def do_POST(self) -> None:
                self._relay()

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path.rstrip("/").endswith("/tx/submit") and link.mode != "pass":
                    if link.mode == "reset":
                        link.resets += 1
                        self.close_connection = True
                        return  # no status line: the client sees the connection drop
                    from pycardano import Transaction

                    tx_id = str(Transaction.from_cbor(body).id)
                    link.swallowed.append(tx_id)
                    link.dropped[tx_id] = body
                    self._answer(200, json.dumps(tx_id).encode(), "application/json")
                    return
                upstream = http.client.HTTPConnection(host, port, timeout=30)
                try:
                    headers = {
                        k: v
                        for k, v in self.headers.items()
                        if k.lower() not in ("host", "connection", "accept-encoding")
                    }
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    reply = upstream.getresponse()
                    data = reply.read()
                    kind = reply.getheader("content-type", "application/json")
                    self._answer(reply.status, data, kind)
                finally:
                    upstream.close()

            def _answer(self, status: int, data: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{target.path}"

    def start(self) -> LedgerLink:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def link(market: Market) -> Iterator[LedgerLink]:
    hop = LedgerLink(market.ledger.url).start()
    yield hop
    hop.stop()


def _book(daemon: Daemon, job_id: str) -> dict[str, Any]:
    """The escrow row as the daemon's store holds it (with the kept tx), read-only."""
    import sqlite3

    db = sqlite3.connect(f"file:{daemon.home.state_dir / 'nunet.db'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT info FROM escrows WHERE job_id = ?", (job_id,)).fetchone()
    finally:
        db.close()
    return dict(json.loads(row[0])) if row else {}


def _paid(provider: Daemon, *job_ids: str) -> int:
    """What the provider's book says it was paid for these jobs (metered, issue 12)."""
    return sum(int(_escrow(provider, job_id)["paid_units"]) for job_id in job_ids)


def _job(daemon: Daemon, job_id: str) -> dict[str, Any]:
    return dict(daemon.cli("job", "show", job_id))


# --- the claim that never landed ---------------------------------------------------------


@E2E
def test_a_dropped_then_expired_claim_is_rebuilt_from_the_same_decision_and_paid_once(
    market: Market, scripts: str, link: LedgerLink
) -> None:
    provider, consumer = _paid_pair(market, provider_ledger_url=link.url)
    spent_before = market.ntx(_address(consumer))
    link.mode = "swallow"
    job_id = _submit(consumer, f"{scripts}/iris.py")["job_id"]
    # "Accepted" and kept, never on chain: the provider does not call that claimed, and it
    # sends the same kept tx again.
    wait_for(lambda: len(link.swallowed) >= 2, "the provider never sent its claim again", 90)
    first = _escrow(provider, job_id)
    assert first["state"] == "claiming", first
    assert set(link.swallowed) == {first["claim_tx"]}  # the same tx, not a new one each time
    assert market.ntx(_address(provider)) == 0
    decision = market.oracle.store.decision(job_id)
    assert decision is not None and decision.reward_type == "distribute"

    # The provider dies with its claim kept and not on chain, and ten minutes pass on the
    # chain's clock: the kept tx can never land any more. After the restart it is neither
    # lost nor sent as it is: rebuilt.
    provider.stop(kill=True)
    market.ledger.clock.advance(DEFAULT_TTL_S + 60)
    link.mode = "pass"
    provider.start()
    claimed = wait_for(
        lambda: (e := _escrow(provider, job_id)).get("state") == "claimed" and e,
        "the expired claim was never rebuilt",
        90,
    )
    assert claimed["claim_tx"] != first["claim_tx"]  # a fresh tx ...
    assert market.oracle.store.decision(job_id) == decision  # ... from the same decision
    assert market.ntx(_address(provider)) == _paid(provider, job_id)
    assert market.ntx(_address(consumer)) == spent_before - _paid(provider, job_id)
    wait_for(
        lambda: _escrow(consumer, job_id).get("state") == "paid_out",
        "the consumer never saw the payment",
        40,
    )
    # The book keeps the tx that landed; claiming again sends nothing and pays nothing.
    assert _book(provider, job_id)["info"]["claim_tx"] == claimed["claim_tx"]
    again = provider.cli("reward", "claim", job_id)
    assert again["state"] == "claimed" and again["claim_tx"] == claimed["claim_tx"]
    assert market.ntx(_address(provider)) == _paid(provider, job_id)
    # The dead tx, sent by anyone now, is refused by the chain: nothing is paid twice.
    from pycardano.exception import TransactionFailedException

    with pytest.raises(TransactionFailedException):
        market.context().submit_tx_cbor(link.dropped[first["claim_tx"]])
    assert market.ntx(_address(provider)) == _paid(provider, job_id)


# --- the connection that broke while submitting ----------------------------------------------


@E2E
def test_a_connection_error_while_submitting_is_retried_and_never_stops_the_daemon(
    market: Market, scripts: str, link: LedgerLink
) -> None:
    provider, consumer = _paid_pair(market, provider_ledger_url=link.url)
    spent_before = market.ntx(_address(consumer))
    link.mode = "reset"
    first = _submit(consumer, f"{scripts}/iris.py")["job_id"]
    waiting = wait_for(
        lambda: link.resets >= 2 and (e := _escrow(provider, first)).get("error") and e,
        "the provider never retried its claim",
        90,
    )
    assert waiting["state"] == "claiming" and "unreachable" in waiting["error"], waiting
    # The daemon serves on: its own identity, and an honest paid job (locks are read through
    # the same link; only submitting breaks).
    assert provider.cli("peer", "self")["peer_id"] == provider.peer_id
    second = _submit(consumer, f"{scripts}/iris.py")["job_id"]
    wait_for(
        lambda: _job(consumer, second)["state"] == "completed",
        "the provider stopped running jobs",
        90,
    )
    assert market.ntx(_address(provider)) == 0

    link.mode = "pass"
    wait_for(
        lambda: all(_escrow(provider, j).get("state") == "claimed" for j in (first, second)),
        "the claims never landed once the link was back",
        90,
    )
    assert market.ntx(_address(provider)) == _paid(provider, first, second)
    assert market.ntx(_address(consumer)) == spent_before - _paid(provider, first, second)
    log = provider.home.log_file.read_text(errors="replace")
    assert "settle failed" not in log  # the loop caught it: no supervisor had to restart it


# --- the provider that vanished ----------------------------------------------------------------


LIVENESS_S = 1.0  # the provider's liveness interval where a test waits out the oracle's grace


@E2E
def test_a_vanished_provider_is_shown_unreachable_then_the_job_is_interrupted_and_refunded(
    market: Market, scripts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # _paid_pair gives both daemons this env: a short liveness interval, and an oracle grace
    # to match, so the killed provider's silence is found out in seconds, not minutes.
    monkeypatch.setitem(
        test_payments_e2e.PASSPHRASE, "NUNET_PAYMENTS_LIVENESS_INTERVAL_S", str(LIVENESS_S)
    )
    market.oracle.liveness_grace_s = 3 * LIVENESS_S + 1.0
    provider, consumer = _paid_pair(
        market, consumer_env={"NUNET_JOBS_PROVIDER_GRACE_S": str(GRACE_S)}
    )
    before = market.ntx(_address(consumer))
    job_id = _submit(consumer, f"{scripts}/checkpointed.py")["job_id"]  # 8 s of epochs
    wait_for(lambda: _job(consumer, job_id)["state"] == "running", "never ran", 60)
    wait_for(
        lambda: market.oracle.store.last_alive(job_id) is not None,
        "the provider never told the oracle it was running the job",
        30,
    )
    killed_at = time.time()
    provider.stop(kill=True)

    unreachable = wait_for(
        lambda: (j := _job(consumer, job_id))["reason"].startswith("provider unreachable") and j,
        "the consumer never noticed its provider was gone",
        30,
    )
    # Three heartbeats of silence, plus one look (a quarter heartbeat) and a little slack.
    assert unreachable["updated_at"] - killed_at <= 3 * HEARTBEAT_S + 1.0, unreachable
    ended = wait_for(
        lambda: (j := _job(consumer, job_id))["state"] == "interrupted" and j,
        "the job never ended",
        30,
    )
    assert ended["finished_at"] - killed_at >= 3 * HEARTBEAT_S + GRACE_S - 0.5, ended
    refunded = wait_for(
        lambda: (e := _escrow(consumer, job_id)).get("state") == "refunded" and e,
        "the consumer was never refunded",
        60,
    )
    # At once, not at the deadline: the chain's clock never moved and the deadline is an hour
    # and more away.
    assert refunded["deadline_ms"] - market.ledger.clock.now_ms() > 3_000_000
    assert market.ntx(_address(consumer)) == before
    decision = market.oracle.store.decision(job_id)
    assert decision is not None and decision.reward_type == "refund"

    # The provider comes back and finishes the job from its checkpoint: the escrow is gone,
    # and it can claim nothing.
    provider.start()
    wait_for(
        lambda: _escrow(provider, job_id).get("state") == "refunded",
        "the provider never learnt the job was refunded",
        90,
    )
    refused = run_cli("reward", "claim", job_id, "--json", home=provider.home)
    assert refused.returncode != 0 and "nothing to claim" in refused.stderr
    assert market.ntx(_address(provider)) == 0
    assert market.ntx(_address(consumer)) == before
    # ... and the consumer still runs an honest paid job with it.
    honest = _submit(consumer, f"{scripts}/iris.py")["job_id"]
    wait_for(
        lambda: _escrow(provider, honest).get("state") == "claimed", "the honest job failed", 90
    )
    assert market.ntx(_address(provider)) == _paid(provider, honest)
    assert market.ntx(_address(consumer)) == before - _paid(provider, honest)


# --- the consumer that says its live provider vanished --------------------------------------


@E2E
def test_a_consumer_that_claims_its_running_provider_vanished_gets_nothing_and_it_is_paid_once(
    market: Market, scripts: str
) -> None:
    """The free job: while the provider runs it, the consumer signs "interrupted, the
    provider's fault" alone and asks the oracle for the refund. The oracle has the provider's
    own fresh word that it is running the job (default interval and grace): it answers
    "pending", and the job completes and is paid once."""
    from oracle_client.escrow import receipt as rc

    provider, consumer = _paid_pair(market)
    before = market.ntx(_address(consumer))
    job_id = _submit(consumer, f"{scripts}/checkpointed.py")["job_id"]  # 8 s of epochs
    wait_for(lambda: _job(consumer, job_id)["state"] == "running", "never ran", 60)
    wait_for(
        lambda: market.oracle.store.last_alive(job_id) is not None,
        "the provider never told the oracle it was running the job",
        30,
    )
    book = _book(consumer, job_id)
    quote = msgspec.json.decode(book["quote"].encode(), type=ServiceQuote)
    lie = rc.Receipt(
        job_id=job_id,
        consumer_peer_id=consumer.peer_id,
        provider_peer_id=provider.peer_id,
        consumer_pkh=quote.consumer_pkh,
        provider_pkh=quote.provider_pkh,
        amount=quote.estimated_price,
        outcome="interrupted",
        fault="provider",
        started=True,
        metering=rc.Metering(),
        finished_at=int(time.time() * 1000),
    )
    # Signed with the consumer daemon's own peer key (tests/daemon_harness.py: seed 41).
    lie = rc.sign(lie, bytes([41]) * 32)
    request = RewardRequest(job_id=job_id, receipt=lie, lock_tx=book["info"]["lock_tx"])
    answer = _ask(market.oracle_server, request)
    assert isinstance(answer, RewardPending) and "said it was running" in answer.reason
    assert market.oracle.store.decision(job_id) is None
    wait_for(lambda: _job(consumer, job_id)["state"] == "completed", "never completed", 60)
    claimed = wait_for(
        lambda: (e := _escrow(provider, job_id)).get("state") == "claimed" and e,
        "the provider was never paid",
        90,
    )
    assert claimed["reward_type"] == "distribute"
    # Too late now, as always: the provider reported the job's end.
    with pytest.raises(ReceiptRejected):
        _ask(market.oracle_server, request)
    decision = market.oracle.store.decision(job_id)
    assert decision is not None and decision.reward_type == "distribute"
    assert market.ntx(_address(provider)) == _paid(provider, job_id)  # once
    assert market.ntx(_address(consumer)) == before - _paid(provider, job_id)
    wait_for(
        lambda: _escrow(consumer, job_id).get("state") == "paid_out",
        "the consumer never saw the payment",
        40,
    )
    assert market.ntx(_address(provider)) == _paid(provider, job_id)


# --- the provider that holds the stream open and says nothing -------------------------------


@E2E
def test_a_provider_that_goes_silent_behind_an_open_stream_is_found_out(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer], scripts: str
) -> None:
    """A machine that vanishes without closing its connection (or a hostile provider that
    stalls): the consumer's follow stream stays open and nothing arrives on it. Heartbeats,
    not the stream, tell the consumer; and the victim then runs an honest job."""
    from engine.jobs import protocol as p

    consumer = daemons("consumer", 51, env={"NUNET_JOBS_PROVIDER_GRACE_S": str(GRACE_S)})
    zombie = hostile(seed=b"\x52" * 32, bootstrap=[consumer.addrs()[0]], provider=True)
    me = consumer.peer_id
    follows: list[float] = []

    async def provider(stream: Any) -> None:
        received = await p.receive(stream, me)
        if received is None:
            return
        message = received[0]
        if isinstance(message, p.Offer):
            quote = p.Quote(
                job_id=message.job_id,
                provider=zombie.peer_id,
                price_ntx_hour=1.0,
                total_ntx=0.0,
                expires_at=time.time() + 60,
                executor="process",
            )
            await p.send(stream, zombie.identity, quote)
        elif isinstance(message, p.Confirm):
            await p.send(stream, zombie.identity, p.Accepted(job_id=message.job_id))
        elif isinstance(message, p.Follow):
            follows.append(time.time())
            if len(follows) == 1:
                running = p.Update(job_id=message.job_id, state="running", started_at=time.time())
                await p.send(stream, zombie.identity, running)
            await trio.sleep_forever()  # the stream stays open; nothing more comes

    zombie.serve(p.JOB_PROTOCOL, provider)
    _listed(consumer, zombie.peer_id)
    job_id = consumer.cli(
        "job", "submit", "--url", f"{scripts}/iris.py", "--framework", "scikit-learn",
        "--expected-minutes", "1", "--peer", zombie.peer_id,
    )["job_id"]  # fmt: skip
    wait_for(lambda: _job(consumer, job_id)["state"] == "running", "never running", 30)

    async def go_silent() -> None:
        zombie.service.heartbeats.figures = lambda: None  # no more heartbeats

    zombie.call(go_silent)
    silent_at = time.time()
    unreachable = wait_for(
        lambda: (j := _job(consumer, job_id))["reason"].startswith("provider unreachable") and j,
        "the consumer never noticed the silence behind the open stream",
        30,
    )
    assert unreachable["state"] == "running"
    # Three heartbeats of silence, a quarter heartbeat to look, and a little slack.
    assert unreachable["updated_at"] - silent_at <= 3 * HEARTBEAT_S + 1.5, unreachable
    wait_for(lambda: _job(consumer, job_id)["state"] == "interrupted", "never interrupted", 30)
    assert follows  # it was followed all along, on a stream that never closed

    honest = daemons("provider", 53, bootstrap=consumer.addrs()[0], extra_toml=PROCESS_JOBS)
    honest.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    _listed(consumer, honest.peer_id)
    done = consumer.cli(
        "job", "submit", "--url", f"{scripts}/iris.py", "--framework", "scikit-learn",
        "--expected-minutes", "1", "--peer", honest.peer_id,
    )["job_id"]  # fmt: skip
    wait_for(lambda: _job(consumer, done)["state"] == "completed", "the honest job failed", 90)


def _listed(consumer: Daemon, peer_id: str) -> None:
    wait_for(
        lambda: any(p["peer_id"] == peer_id for p in consumer.cli("peer", "list")["peers"]),
        f"the consumer never listed {peer_id}",
        30,
    )


# --- the oracle, attacked with receipts the consumer signed alone ----------------------------


@pytest.fixture
def oracle(tmp_path: Path) -> Iterator[tuple[OracleServer, LockCheckerDouble]]:
    checker = LockCheckerDouble()
    with running_oracle(tmp_path / "oracle", checker) as server:
        yield server, checker


def _ask(server: OracleServer, request: RewardRequest) -> Any:
    async def main() -> Any:
        async with OracleClient(server.url, timeout=5, retries=0) as client:
            return await client.request_reward(request)

    return trio.run(main)


def _registered(server: OracleServer, checker: LockCheckerDouble, job_id: str) -> ServiceQuote:
    async def main() -> ServiceQuote:
        async with OracleClient(server.url, timeout=5, retries=0) as client:
            return await client.request_service(service_request(job_id))

    quote = trio.run(main)
    checker.add(lock_for(quote))
    return quote


def test_the_oracle_refunds_a_vanished_provider_on_the_consumers_word_alone(
    oracle: tuple[OracleServer, LockCheckerDouble],
) -> None:
    server, checker = oracle
    quote = _registered(server, checker, "job-gone")
    claim = receipt_for(quote, "interrupted", "provider", signers=(CONSUMER,))
    grant = _ask(server, RewardRequest(job_id="job-gone", receipt=claim))
    assert isinstance(grant, RewardGrant) and grant.reward_type == "refund"
    assert grant.beneficiary_pkh == quote.consumer_pkh
    # One decision: the provider, back with a receipt both signed for "completed", gets the
    # same refund decision refused, never a withdraw.
    with pytest.raises(Exception, match="already decided"):
        _ask(server, RewardRequest(job_id="job-gone", receipt=receipt_for(quote)))
    report = receipt_for(quote, signers=(PROVIDER,))
    assert _ask(server, RewardRequest(job_id="job-gone", receipt=report)) == grant


@pytest.mark.parametrize(
    "forge",
    ["says_completed", "blames_consumer", "tampered", "signed_by_provider_key_as_consumer"],
)
def test_a_consumers_lone_receipt_decides_nothing_else(
    oracle: tuple[OracleServer, LockCheckerDouble], forge: str
) -> None:
    server, checker = oracle
    quote = _registered(server, checker, "job-x")
    if forge == "says_completed":
        receipt = receipt_for(quote, "completed", "none", signers=(CONSUMER,))
    elif forge == "blames_consumer":
        receipt = receipt_for(quote, "interrupted", "consumer", signers=(CONSUMER,))
    elif forge == "tampered":
        signed = receipt_for(quote, "interrupted", "provider", signers=(CONSUMER,))
        receipt = msgspec.structs.replace(signed, finished_at=signed.finished_at + 1)
    else:
        signed = receipt_for(quote, "interrupted", "provider", signers=(PROVIDER,))
        receipt = msgspec.structs.replace(
            signed, consumer_signature=signed.provider_signature, provider_signature=""
        )
    with pytest.raises(ReceiptRejected):
        _ask(server, RewardRequest(job_id="job-x", receipt=receipt))
    assert server.oracle.store.decision("job-x") is None
    # The honest pair still gets its decision.
    grant = _ask(server, RewardRequest(job_id="job-x", receipt=receipt_for(quote)))
    assert isinstance(grant, RewardGrant) and grant.reward_type == "distribute"


def test_a_provider_that_reported_is_never_refunded_on_the_consumers_word(
    oracle: tuple[OracleServer, LockCheckerDouble],
) -> None:
    server, checker = oracle
    quote = _registered(server, checker, "job-here")
    report = receipt_for(quote, signers=(PROVIDER,))  # completed, signed by the provider
    pending = _ask(server, RewardRequest(job_id="job-here", receipt=report))
    assert isinstance(pending, RewardPending)
    lie = receipt_for(quote, "interrupted", "provider", signers=(CONSUMER,))
    with pytest.raises(ReceiptRejected, match="the provider reported this job"):
        _ask(server, RewardRequest(job_id="job-here", receipt=lie))
    assert server.oracle.store.decision("job-here") is None
    grant = _ask(server, RewardRequest(job_id="job-here", receipt=receipt_for(quote)))
    assert isinstance(grant, RewardGrant) and grant.reward_type == "distribute"


# --- which failures are the network's ------------------------------------------------------


def _raised(make: Any) -> BaseException:
    try:
        make()
    except Exception as exc:  # its chain of causes is what is looked at
        return exc
    raise AssertionError("nothing raised")


def test_network_failures_are_told_apart_from_refusals() -> None:
    import httpx
    import requests
    from blockfrost import ApiError
    from pycardano.exception import TransactionFailedException

    from engine.payments.settle import unreachable
    from oracle_client.escrow.transactions import SubmitRejected

    def api_error(status: int) -> ApiError:
        response = requests.Response()
        response.status_code = status
        response._content = json.dumps(
            {"status_code": status, "error": "x", "message": "y"}
        ).encode()
        return ApiError(response)

    def submit_failed(status: int) -> None:
        # What pycardano and transactions.submit make of a Blockfrost reply.
        try:
            try:
                raise api_error(status)
            except ApiError as exc:
                raise TransactionFailedException(f"Error code: {status}") from exc
        except TransactionFailedException as exc:
            raise SubmitRejected(str(exc)) from exc

    network = [
        requests.ConnectionError("Connection aborted."),
        requests.Timeout("read timed out"),
        httpx.ConnectError("refused"),
        ConnectionRefusedError(111, "refused"),
        _raised(lambda: submit_failed(503)),
        _raised(lambda: submit_failed(502)),
    ]
    refusals = [
        _raised(lambda: submit_failed(400)),  # the ledger said no: not the weather
        ValueError("bad cbor"),
        api_error(404),
    ]
    assert all(unreachable(exc) for exc in network)
    assert not any(unreachable(exc) for exc in refusals)
