"""The oracle client side: peer ids, receipts, wire models, and OracleClient against the real
oracle server on 127.0.0.1 (every request-service / request-reward / send-status outcome,
retries with backoff, an oracle that is down or silent)."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import msgspec
import pytest
import trio
from pycardano import Address, Network, ScriptHash

from oracle_client.billing import single_run
from oracle_client.client import (
    JobIdTaken,
    JobNotFound,
    NoMatchingPeer,
    OracleClient,
    OracleFailure,
    OracleProtocolError,
    OracleRejected,
    OracleUnavailable,
    PriceAboveBudget,
    ProviderBusy,
)
from oracle_client.escrow.contract.datum import distribute_message
from oracle_client.escrow.receipt import (
    InvalidSignature,
    MissingSignature,
    Receipt,
    ReceiptError,
    sign,
    signing_bytes,
    verify,
    verify_signature,
)
from oracle_client.models import (
    ProviderOffer,
    RewardGrant,
    RewardPending,
    RewardRequest,
    ServiceQuote,
    ServiceRequest,
    StatusReport,
    sign_service_request,
)
from oracle_client.oracle_server.server import OracleHandler, OracleServer
from oracle_client.peerid import (
    PeerIdError,
    b58encode,
    peer_id_from_public_key,
    public_key_from_peer_id,
)
from tests.doubles.oracle import (
    CONSUMER,
    OTHER_PROVIDER,
    PROVIDER,
    STRANGER,
    LockCheckerDouble,
    Party,
    lock_for,
    receipt_for,
    running_oracle,
    service_request,
)

T = TypeVar("T")


def run(fn: Callable[[], Awaitable[T]]) -> T:
    """The engine drives the client from trio; so do these tests."""
    return trio.run(fn)


def client(server: OracleServer, **kwargs: float) -> OracleClient:
    kwargs.setdefault("backoff", 0.01)
    kwargs.setdefault("timeout", 5.0)
    return OracleClient(server.url, **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- peer ids


def test_peer_id_decoding_matches_py_libp2p() -> None:
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.peer.id import ID

    pair = create_new_key_pair()
    peer_id = ID.from_pubkey(pair.public_key).pretty()
    assert peer_id.startswith("12D3KooW")
    assert public_key_from_peer_id(peer_id) == pair.public_key.to_bytes()
    assert peer_id_from_public_key(pair.public_key.to_bytes()) == peer_id

    # A receipt signed with py-libp2p's own private key forms verifies against the peer id.
    receipt = receipt_for(_quote_between(peer_id, PROVIDER.peer_id), signers=())
    signed = sign(receipt, pair.private_key.to_bytes())  # raw 32-byte seed
    assert signed.consumer_signature and not signed.provider_signature
    assert sign(receipt, pair.private_key.serialize()) == signed  # libp2p protobuf key file
    seed_and_public = pair.private_key.to_bytes() + pair.public_key.to_bytes()  # Go's raw form
    assert sign(receipt, seed_and_public) == signed
    with pytest.raises(ReceiptError, match="public half"):
        sign(receipt, pair.private_key.to_bytes() + bytes(32))
    verify_signature(signed, "consumer")


def test_peer_id_refusals() -> None:
    key = bytes(CONSUMER.peer_key.verify_key)
    good = peer_id_from_public_key(key)
    # An RSA-style id hashes its key (sha2-256 multihash, "Qm..."): no key to recover.
    sha_id = b58encode(bytes([0x12, 0x20]) + bytes(32))
    assert sha_id.startswith("Qm")
    proto_reordered = bytes([0x12, 0x20]) + key + bytes([0x08, 0x01])
    reordered = b58encode(bytes([0x00, len(proto_reordered)]) + proto_reordered)
    secp = b58encode(bytes([0x00, 0x25, 0x08, 0x02, 0x12, 0x21]) + bytes(33))
    for bad, why in [
        (sha_id, "hash of its key"),
        (good[:-3], "length"),
        (good.replace(good[10], "0"), "base58"),
        (reordered, "canonical"),
        (secp, "not Ed25519"),
        ("", "empty"),
    ]:
        with pytest.raises(PeerIdError, match=why):
            public_key_from_peer_id(bad)


# ---------------------------------------------------------------- receipts


def _quote_between(consumer_peer: str, provider_peer: str) -> ServiceQuote:
    return ServiceQuote(
        job_id="job-r",
        network="testnet",
        consumer_peer_id=consumer_peer,
        consumer_pkh=CONSUMER.pkh,
        provider_peer_id=provider_peer,
        compute_provider_addr=PROVIDER.address(),
        provider_pkh=PROVIDER.pkh,
        estimated_price=7_000_000,
        deadline=2_000_000_000_000,
        oracle_key="00" * 32,
        oracle_message="00",
        signature="00" * 64,
    )


QUOTE = _quote_between(CONSUMER.peer_id, PROVIDER.peer_id)


def test_receipt_signed_by_both_peers_verifies_and_survives_the_wire() -> None:
    receipt = receipt_for(QUOTE)
    verify(receipt)
    decoded = msgspec.json.decode(msgspec.json.encode(receipt), type=Receipt)
    assert signing_bytes(decoded) == signing_bytes(receipt)
    verify(decoded)
    # Canonical: the same values in another JSON key order sign the same bytes.
    shuffled = dict(reversed(list(json.loads(msgspec.json.encode(receipt)).items())))
    verify(msgspec.json.decode(json.dumps(shuffled).encode(), type=Receipt))


def test_tampered_receipt_fails_verification() -> None:
    receipt = receipt_for(QUOTE, "failed", "provider")
    for change in (
        {"fault": "consumer"},
        {"amount": 7_000_001},
        {"metering": msgspec.structs.replace(receipt.metering, cpu_s=99.0)},
        {"finished_at": receipt.finished_at + 1},
    ):
        with pytest.raises(InvalidSignature, match="consumer's signature does not match"):
            verify(msgspec.structs.replace(receipt, **change))
    # A signature copied from one role to the other is wrong for that role's key.
    swapped = msgspec.structs.replace(receipt, consumer_signature=receipt.provider_signature)
    with pytest.raises(InvalidSignature):
        verify(swapped)


def test_receipt_signed_by_one_peer_fails_verification() -> None:
    only_provider = receipt_for(QUOTE, signers=(PROVIDER,))
    verify_signature(only_provider, "provider")
    with pytest.raises(MissingSignature, match="not signed by the consumer"):
        verify(only_provider)
    with pytest.raises(ReceiptError, match="belongs to neither party"):
        sign(only_provider, bytes(STRANGER.peer_key))


def test_receipt_decoding_rejects_nonsense() -> None:
    good = msgspec.to_builtins(receipt_for(QUOTE))
    for change, why in [
        ({"provider_peer_id": good["consumer_peer_id"]}, "different peers"),
        ({"fault": "provider"}, "completed job"),
        ({"started": False}, "completed job"),
        ({"consumer_pkh": "ab" * 27}, "length"),
        ({"outcome": "exploded"}, "outcome"),
        ({"amount": 0}, "amount"),
        ({"metering": {**good["metering"], "cpu_s": -1.0}}, "cpu_s"),
        ({"extra": 1}, "unknown field"),
        ({"consumer_signature": "zz" * 64}, "consumer_signature"),
    ]:
        with pytest.raises(msgspec.ValidationError, match=why):
            msgspec.convert({**good, **change}, Receipt)


# ---------------------------------------------------------------- models


def test_request_models_check_addresses_and_sizes() -> None:
    good = msgspec.to_builtins(service_request())
    script_address = str(Address(ScriptHash(bytes(28)), network=Network.TESTNET))
    offer = good["offers"][0]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"consumer_address": CONSUMER.address(Network.MAINNET)}, "this is a mainnet address"),
        ({"consumer_address": CONSUMER.address()[:-1] + "q"}, "checksum"),
        ({"consumer_address": script_address}, "pays a script"),
        ({"offers": [{**offer, "address": "stake_test1uzx"}]}, r"stake \(reward account\)"),
        ({"offers": [offer, offer]}, "offered twice"),
        ({"offers": [{**offer, "peer_id": CONSUMER.peer_id}]}, "hire itself"),
        ({"offers": [offer] * 65}, "length <= 64"),
        ({"job_id": "x" * 64}, "length <= 63"),
        ({"job_id": "job id"}, "matching regex"),
        ({"budget": 2 * 10**15}, "budget"),
        ({"network": "preview"}, "network"),
    ]
    for change, why in cases:
        with pytest.raises(msgspec.ValidationError, match=why):
            msgspec.convert({**good, **change}, ServiceRequest)
    report = {"job_id": "j", "tx_hash": "ab" * 32, "reward_type": "withdraw", "status": "confirmed"}
    msgspec.convert(report, StatusReport)
    with pytest.raises(msgspec.ValidationError, match="tx_hash"):
        msgspec.convert({**report, "tx_hash": "AB" * 32}, StatusReport)


# ---------------------------------------------------------------- client x real oracle


@pytest.fixture
def checker() -> LockCheckerDouble:
    return LockCheckerDouble()


@pytest.fixture
def server(tmp_path: Path, checker: LockCheckerDouble) -> Iterator[OracleServer]:
    with running_oracle(tmp_path / "oracle", checker) as server:
        yield server


def test_request_service_outcomes(server: OracleServer) -> None:
    async def main() -> None:
        async with client(server) as oracle:
            info = await oracle.info()
            request = service_request("job-ok")
            quote = await oracle.request_service(request)
            assert quote.oracle_key == info.oracle_key == server.oracle.oracle_key
            assert quote.compute_provider_addr == PROVIDER.address()
            assert quote.provider_pkh == PROVIDER.pkh and quote.consumer_pkh == CONSUMER.pkh
            assert quote.estimated_price == 5_000_000
            quote.verify()  # the provider's check before it runs the job
            forged = msgspec.structs.replace(quote, estimated_price=1)
            with pytest.raises(ValueError, match="does not match"):
                forged.verify()
            # A retried request (reply lost) gets the same quote, not a second registration.
            assert await oracle.request_service(request) == quote
            changed = msgspec.structs.replace(request, budget=9_000_000)
            with pytest.raises(OracleRejected) as unsigned:  # changed after it was signed
                await oracle.request_service(changed)
            assert (unsigned.value.status, unsigned.value.error) == (401, "bad_signature")
            resigned = sign_service_request(changed, bytes(CONSUMER.peer_key))
            with pytest.raises(JobIdTaken):
                await oracle.request_service(resigned)

            with pytest.raises(NoMatchingPeer) as no_peer:
                await oracle.request_service(service_request("job-none", offers=[]))
            assert no_peer.value.status == 404
            assert "no peer with matching specs" in str(no_peer.value)

            with pytest.raises(PriceAboveBudget) as too_dear:
                await oracle.request_service(service_request("job-dear", price=11_000_000))
            assert too_dear.value.status == 400
            assert "estimated price 11 NTX is above the budget 10 NTX" in too_dear.value.reason

            # A request whose lock is not on chain holds no slot (issue 20 §4: one request in
            # anyone's name blocked a provider until its deadline)...
            free = await oracle.request_service(service_request("job-free"))
            assert free.provider_peer_id == PROVIDER.peer_id
            # ... once job-ok's lock is there, it holds PROVIDER's one slot until decided.
            checker = server.oracle.locks
            assert isinstance(checker, LockCheckerDouble)
            checker.add(lock_for(quote))
            with pytest.raises(ProviderBusy) as busy:
                await oracle.request_service(service_request("job-busy"))
            assert busy.value.status == 409
            # ... so the oracle picks the cheapest provider that is free.
            offers = [
                ProviderOffer(peer_id=PROVIDER.peer_id, address=PROVIDER.address(), price=1),
                ProviderOffer(
                    peer_id=OTHER_PROVIDER.peer_id, address=OTHER_PROVIDER.address(), price=3
                ),
            ]
            other = await oracle.request_service(service_request("job-2", offers=offers))
            assert other.provider_peer_id == OTHER_PROVIDER.peer_id

    run(main)


def test_request_reward_outcomes(server: OracleServer, checker: LockCheckerDouble) -> None:
    async def main() -> None:
        async with client(server) as oracle:
            with pytest.raises(JobNotFound) as missing:
                await oracle.request_reward(RewardRequest(job_id="nope"))
            assert missing.value.status == 404

            quote = await oracle.request_service(service_request("job-w"))
            pending = await oracle.request_reward(RewardRequest(job_id="job-w"))
            assert isinstance(pending, RewardPending) and pending.code == 102
            assert "still running" in pending.reason

            ref = checker.add(lock_for(quote))
            # 1.5 s of machine time at 3.6 NTX/h: 1500 base units to the provider.
            t0 = 1_800_000_000_000
            receipt = receipt_for(
                quote,
                price_units_hour=3_600_000,
                min_charge=0,
                subtasks=single_run(t0, t0 + 1_500),
                charge=1_500,
            )
            grant = await oracle.request_reward(RewardRequest(job_id="job-w", receipt=receipt))
            assert isinstance(grant, RewardGrant)
            assert grant.reward_type == "distribute" and grant.beneficiary_pkh == PROVIDER.pkh
            assert grant.shares == (1_500, 5_000_000 - 1_500)
            assert grant.consumer_pkh == CONSUMER.pkh
            assert grant.escrow_utxo == ref  # the signature names the lock it releases
            expected = distribute_message(1_500, ref)
            assert bytes.fromhex(grant.oracle_message) == expected
            grant.verify()
            # Without a receipt, the decision once made.
            assert await oracle.request_reward(RewardRequest(job_id="job-w")) == grant

            refund_quote = await oracle.request_service(
                service_request("job-r", offers=[_offer(OTHER_PROVIDER)])
            )
            checker.add(lock_for(refund_quote))
            failed = receipt_for(
                refund_quote, "failed", "provider", signers=(CONSUMER, OTHER_PROVIDER)
            )
            refund = await oracle.request_reward(RewardRequest(job_id="job-r", receipt=failed))
            assert isinstance(refund, RewardGrant)
            assert refund.reward_type == "refund" and refund.beneficiary_pkh == CONSUMER.pkh

            ack = await oracle.send_status(
                StatusReport(
                    job_id="job-w", tx_hash="ab" * 32, reward_type="withdraw", status="confirmed"
                )
            )
            assert ack.message == "transaction status confirmed acknowledged"
            with pytest.raises(ValueError, match="tx_hash"):  # caught before it is sent
                await oracle.send_status(
                    StatusReport(
                        job_id="job-w", tx_hash="xy", reward_type="refund", status="failed"
                    )
                )

    run(main)
    assert server.oracle.store.tx_reports("job-w")[0].status == "confirmed"


def test_bad_payloads_get_400(server: OracleServer) -> None:
    with httpx.Client(base_url=server.url) as http:
        bad = http.post("/send-status", json={"job_id": "j", "tx_hash": "00", "status": "x"})
        assert bad.status_code == 400 and bad.json()["error"] == "bad_request"
        assert "bad payload" in bad.json()["reason"]
        assert http.post("/request-reward", content=b"{not json").status_code == 400
        assert http.post("/nowhere", json={}).status_code == 404
        huge = http.post("/request-service", content=b" " * (65 * 1024))
        assert huge.status_code == 413


def test_oracle_failure_500_is_retried_then_raised(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    async def main() -> None:
        async with client(server, retries=2) as oracle:
            quote = await oracle.request_service(service_request("job-x"))
            checker.broken = True
            with pytest.raises(OracleFailure) as failure:
                await oracle.request_reward(
                    RewardRequest(job_id="job-x", receipt=receipt_for(quote))
                )
            assert failure.value.status == 500
            assert "failed (500, 3 tries): oracle failure: RuntimeError" in str(failure.value)

    run(main)
    assert checker.lookups == 3


def test_chain_backend_down_reads_as_unavailable(
    server: OracleServer, checker: LockCheckerDouble
) -> None:
    async def main() -> None:
        async with client(server, retries=1) as oracle:
            quote = await oracle.request_service(service_request("job-c"))
            checker.down = True
            with pytest.raises(OracleUnavailable, match=r"unavailable \(503, 2 tries\): cannot"):
                await oracle.request_reward(
                    RewardRequest(job_id="job-c", receipt=receipt_for(quote))
                )
            checker.down = False
            checker.add(lock_for(quote))
            grant = await oracle.request_reward(
                RewardRequest(job_id="job-c", receipt=receipt_for(quote))
            )
            assert isinstance(grant, RewardGrant)

    run(main)


class FlakyHandler(OracleHandler):
    """The real handler behind a front that answers 503 to the first ``failures`` requests."""

    failures = 2
    seen: list[float] = []

    def do_POST(self) -> None:
        type(self).seen.append(time.monotonic())
        if len(type(self).seen) <= type(self).failures:
            length = int(self.headers["Content-Length"])
            self.rfile.read(length)
            self._refuse(503, "internal", "warming up")
            return
        super().do_POST()


def test_retries_with_backoff_until_the_oracle_answers(tmp_path: Path) -> None:
    FlakyHandler.seen = []
    with running_oracle(tmp_path, handler=FlakyHandler) as server:

        async def main() -> ServiceQuote:
            async with OracleClient(server.url, timeout=5, retries=3, backoff=0.1, jitter=0) as c:
                return await c.request_service(service_request("job-f"))

        quote = run(main)
    assert quote.job_id == "job-f"
    seen = FlakyHandler.seen
    assert len(seen) == 3
    gaps = [b - a for a, b in itertools.pairwise(seen)]
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2  # exponential: 0.1 s, then 0.2 s


def test_4xx_is_not_retried(tmp_path: Path) -> None:
    FlakyHandler.seen = []

    class Counting(FlakyHandler):
        failures = 0

    with running_oracle(tmp_path, handler=Counting) as server:

        async def main() -> None:
            async with client(server, retries=3) as oracle:
                with pytest.raises(NoMatchingPeer):
                    await oracle.request_service(service_request("job-n", offers=[]))

        run(main)
    assert len(FlakyHandler.seen) == 1


class LyingHandler(OracleHandler):
    """The real oracle behind a front that says a grant releases another lock than the one
    its signature names."""

    def _send(self, status: int, reply: msgspec.Struct, *, close: bool = False) -> None:
        if isinstance(reply, RewardGrant):
            reply = msgspec.structs.replace(reply, escrow_utxo="ee" * 32 + "#1")
        super()._send(status, reply, close=close)


def test_a_grant_whose_message_does_not_name_its_lock_is_refused(tmp_path: Path) -> None:
    checker = LockCheckerDouble()
    with running_oracle(tmp_path, checker, handler=LyingHandler) as server:

        async def main() -> None:
            async with client(server, retries=0) as oracle:
                quote = await oracle.request_service(service_request("job-lie"))
                checker.add(lock_for(quote))
                request = RewardRequest(job_id="job-lie", receipt=receipt_for(quote))
                with pytest.raises(OracleProtocolError, match="does not match its fields"):
                    await oracle.request_reward(request)

        run(main)


def test_reward_request_names_the_lock_tx() -> None:
    ok = RewardRequest(job_id="job-1", lock_tx="ab" * 32)
    assert msgspec.json.decode(msgspec.json.encode(ok), type=RewardRequest) == ok
    for bad in ("ab" * 31, "AB" * 32, "ab" * 32 + "#0"):
        with pytest.raises(msgspec.ValidationError, match="lock_tx"):
            msgspec.json.decode(json.dumps({"job_id": "job-1", "lock_tx": bad}), type=RewardRequest)


def test_oracle_down_is_unavailable_with_a_plain_message() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"

    async def main() -> None:
        async with OracleClient(url, timeout=2, retries=2, backoff=0.01) as oracle:
            with pytest.raises(OracleUnavailable) as down:
                await oracle.request_reward(RewardRequest(job_id="job-1"))
        assert str(down.value) == (
            f"the oracle at {url} is unreachable: connection refused "
            "(is nunet-oracle running on that host and port?)"
        )

    run(main)


def test_silent_oracle_times_out() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # takes connections and never answers
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:

        async def main() -> None:
            async with OracleClient(url, timeout=0.3, retries=1, backoff=0.01) as oracle:
                with pytest.raises(OracleUnavailable, match=r"unreachable: no reply within 0\.3 s"):
                    await oracle.info()

        run(main)
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


def test_client_works_under_asyncio_too(server: OracleServer) -> None:
    async def main() -> ServiceQuote:
        async with client(server) as oracle:
            return await oracle.request_service(service_request("job-a"))

    assert asyncio.run(main()).job_id == "job-a"


def test_rejections_share_one_base(server: OracleServer) -> None:
    async def main() -> None:
        async with client(server) as oracle:
            with pytest.raises(OracleRejected) as refused:
                await oracle.request_reward(RewardRequest(job_id="ghost"))
        assert refused.value.error == "job_not_found"
        assert str(refused.value) == "the oracle refused (404 job_not_found): no job ghost to claim"

    run(main)


def _offer(party: Party) -> ProviderOffer:
    return ProviderOffer(peer_id=party.peer_id, address=party.address(), price=5_000_000)
