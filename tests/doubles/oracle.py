"""Builders and one double for the oracle tests.

- ``Party``: a peer with a libp2p Ed25519 key (its peer id) and a Cardano payment key (its
  address and key hash), made from a fixed seed so failures are reproducible.
- ``LockCheckerDouble``: stands in for the chain behind ``LockChecker`` (the escrow UTxOs): a
  dict of locks the test says exist, a switch for "the chain backend is down", and a count of
  lookups. Everything else (HTTP server, client, store, signing, rules) is the real code.
- ``running_oracle``: the real ``OracleServer`` on 127.0.0.1 with a real SQLite store and key
  file under a test folder.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey
from pycardano import Address, Network, PaymentVerificationKey

from oracle_client.escrow.contract.datum import EscrowDatum, NoStakingCredential
from oracle_client.escrow.receipt import Fault, Metering, Outcome, Receipt, sign
from oracle_client.models import ProviderOffer, ServiceQuote, ServiceRequest, sign_service_request
from oracle_client.oracle_server.keys import load_or_create_key
from oracle_client.oracle_server.locks import ChainUnavailable, ExpectedLock, pick_lock
from oracle_client.oracle_server.server import OracleHandler, OracleServer
from oracle_client.oracle_server.service import Oracle
from oracle_client.oracle_server.store import Store
from oracle_client.peerid import peer_id_from_public_key


@dataclass(frozen=True)
class Party:
    peer_key: SigningKey  # libp2p identity
    payment_key: SigningKey  # Cardano payment key

    @classmethod
    def from_seed(cls, n: int) -> Party:
        return cls(SigningKey(bytes([n]) * 32), SigningKey(bytes([n + 100]) * 32))

    @property
    def peer_id(self) -> str:
        return peer_id_from_public_key(bytes(self.peer_key.verify_key))

    @property
    def pkh(self) -> str:
        return PaymentVerificationKey(bytes(self.payment_key.verify_key)).hash().payload.hex()

    def address(self, network: Network = Network.TESTNET) -> str:
        vk = PaymentVerificationKey(bytes(self.payment_key.verify_key))
        return str(Address(vk.hash(), network=network))


CONSUMER = Party.from_seed(1)
PROVIDER = Party.from_seed(2)
OTHER_PROVIDER = Party.from_seed(3)
STRANGER = Party.from_seed(4)


@dataclass
class LockCheckerDouble:
    """In-process stand-in for the chain's escrow UTxOs (see module docstring)."""

    locks: dict[str, ExpectedLock] = field(default_factory=dict)
    down: bool = False
    broken: bool = False  # raises a bug-like error: the oracle must answer 500
    lookups: int = 0

    def add(self, expected: ExpectedLock, ref: str | None = None) -> str:
        ref = ref or f"{len(self.locks):064x}#0"
        self.locks[ref] = expected
        return ref

    def check_lock(self, expected: ExpectedLock) -> str:
        self.lookups += 1
        if self.broken:
            raise RuntimeError("checker bug")
        if self.down:
            raise ChainUnavailable("cannot read the escrow address: connection refused")
        # The terms match as on chain; which of several matching outputs is the real code's rule.
        terms = replace(expected, lock_tx=None)
        refs = sorted(ref for ref, lock in self.locks.items() if lock == terms)
        return pick_lock(refs, expected, "the double's escrow address")

    def locked_jobs(self, expected: Sequence[ExpectedLock]) -> set[str]:
        self.lookups += 1
        if self.down:
            raise ChainUnavailable("cannot read the escrow address: connection refused")
        held = set(self.locks.values())
        return {lock.job_id for lock in expected if replace(lock, lock_tx=None) in held}


def lock_for(quote: ServiceQuote, amount: int | None = None) -> ExpectedLock:
    return ExpectedLock(
        job_id=quote.job_id,
        consumer_pkh=bytes.fromhex(quote.consumer_pkh),
        provider_pkh=bytes.fromhex(quote.provider_pkh),
        oracle_key=bytes.fromhex(quote.oracle_key),
        amount=quote.estimated_price if amount is None else amount,
    )


def service_request(
    job_id: str = "job-1",
    *,
    offers: list[ProviderOffer] | None = None,
    price: int = 5_000_000,
    budget: int = 10_000_000,
    slots: int = 1,
) -> ServiceRequest:
    if offers is None:
        offers = [
            ProviderOffer(
                peer_id=PROVIDER.peer_id, address=PROVIDER.address(), price=price, slots=slots
            )
        ]
    unsigned = ServiceRequest(
        job_id=job_id,
        network="testnet",
        consumer_peer_id=CONSUMER.peer_id,
        consumer_address=CONSUMER.address(),
        budget=budget,
        deadline=int(time.time() * 1000) + 3_600_000,
        offers=offers,
        signature="00" * 64,
    )
    return sign_service_request(unsigned, bytes(CONSUMER.peer_key))


def receipt_for(
    quote: ServiceQuote,
    outcome: Outcome = "completed",
    fault: Fault = "none",
    *,
    started: bool = True,
    signers: tuple[Party, ...] = (CONSUMER, PROVIDER),
    **billing: Any,
) -> Receipt:
    # Unless told otherwise, the whole lock is charged (the minimum charge is the lock), as a
    # job quoted before resource specs pays (issue 12).
    billing.setdefault("min_charge", quote.estimated_price)
    billing.setdefault("charge", quote.estimated_price if started else 0)
    receipt = Receipt(
        job_id=quote.job_id,
        consumer_peer_id=quote.consumer_peer_id,
        provider_peer_id=quote.provider_peer_id,
        consumer_pkh=quote.consumer_pkh,
        provider_pkh=quote.provider_pkh,
        amount=quote.estimated_price,
        outcome=outcome,
        fault=fault,
        started=started,
        metering=Metering(wall_s=12.5, cpu_s=11.25, gpu_s=0.0, max_memory_mb=512.0),
        finished_at=int(time.time() * 1000),
        **billing,
    )
    for party in signers:
        receipt = sign(receipt, bytes(party.peer_key))
    return receipt


@contextmanager
def running_oracle(
    root: Path,
    checker: LockCheckerDouble | None = None,
    handler: type[OracleHandler] = OracleHandler,
) -> Iterator[OracleServer]:
    """The real oracle over HTTP on 127.0.0.1; the same ``root`` means the same key and db."""
    store = Store(root / "oracle.db")
    oracle = Oracle(
        load_or_create_key(root / "oracle.key"),
        store,
        checker if checker is not None else LockCheckerDouble(),
        "testnet",
    )
    server = OracleServer(oracle, handler=handler, poll_interval=0.05).start()
    try:
        yield server
    finally:
        server.close()
        store.close()


def datum_for(quote: ServiceQuote) -> EscrowDatum:
    """The escrow datum a consumer locks under these terms."""
    return EscrowDatum(
        consumer=bytes.fromhex(quote.consumer_pkh),
        consumer_stake=NoStakingCredential(),  # Party.address(): an enterprise address
        provider=bytes.fromhex(quote.provider_pkh),
        oracle_key=bytes.fromhex(quote.oracle_key),
        job_id=quote.job_id.encode(),
        amount=quote.estimated_price,
        deadline=quote.deadline,
    )
