"""The oracle's HTTP API as typed requests and replies (NuNet's oracle outcomes).

Requests forbid unknown fields (the oracle signs for money: a misspelt field must fail loudly);
replies accept them, so an older client keeps working against a newer oracle. Every field is
bounded and checked on decode: sizes and hex lengths by ``oracle_client.fields``, addresses by
bech32 checksum and network in ``__post_init__`` (msgspec turns its ValueError into a
ValidationError).

Wire shapes (JSON bodies; see docs/payments.md):

- ``GET /info`` -> ``OracleInfo``
- ``POST /request-service`` ``ServiceRequest`` -> 200 ``ServiceQuote``; errors ``ErrorReply``:
  404 no_matching_peer, 400 price_above_budget, 409 provider_busy, 409 job_id_taken
- ``POST /request-reward`` ``RewardRequest`` (with the consumer's ``lock_tx``) -> 200
  ``RewardGrant``, whose signature releases the one output ``escrow_utxo``; 202 ``RewardPending``
  (NuNet's 102: HTTP clients treat a real 1xx as an interim reply and wait for another, so it
  travels as 202 with ``code: 102`` in the body); errors 404 job_not_found, 400/403 receipt
  problems, 409 decision_conflict / lock_not_found, 422 undecidable, 500 internal, 503
  chain_unavailable
- ``POST /send-status`` ``StatusReport`` -> 200 ``StatusAck``; 400 bad_request, 404

A provider running a paid job says so on ``/request-reward`` too: a ``RewardRequest`` with a
``LivenessReport`` (no receipt), signed with its peer key, at the start and every interval; the
answer is the decision if there is one, else 202 ``RewardPending``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import cbor2
import msgspec
from msgspec import Meta
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from oracle_client.cardano.address import AddressError, parse_payment_address
from oracle_client.escrow.receipt import Receipt, _signing_key
from oracle_client.fields import (
    AddressText,
    Amount,
    JobId,
    KeyHashHex,
    MessageHex,
    Network,
    PeerIdText,
    PosixMs,
    PublicKeyHex,
    Reason,
    RewardType,
    SignatureHex,
    TxHashHex,
    Units,
    UtxoRef,
)
from oracle_client.peerid import PeerIdError, public_key_from_peer_id

# What a quote signature covers starts with this tag; escrow release messages are CBOR
# constructors (first byte 0xd8), so a quote can never be replayed as a withdraw or refund.
QUOTE_DOMAIN = b"nunet-oracle-quote/v1\x00"
# A liveness report's signature covers this tag first: it can never pass for a receipt (whose
# tag differs) or for a release message, nor they for it.
LIVENESS_DOMAIN = b"nunet-job-liveness/v1\x00"
# A service request is signed by its consumer's peer key (issue 20 §4: anyone could register
# jobs in any consumer's name, and each held a provider's slot).
REQUEST_DOMAIN = b"nunet-oracle-request/v1\x00"
MAX_OFFERS = 64

ErrorKind = Literal[
    "bad_request",
    "no_matching_peer",
    "price_above_budget",
    "provider_busy",
    "job_id_taken",
    "job_not_found",
    "receipt_mismatch",
    "receipt_unsigned",
    "receipt_invalid",
    "undecidable",
    "decision_conflict",
    "lock_not_found",
    "chain_unavailable",
    "payload_too_large",
    "not_found",
    "bad_signature",
    "too_many_pending",
    "rate_limited",
    "internal",
]
TxStatus = Literal["submitted", "confirmed", "failed"]


def _check_address(field: str, text: str, network: Network) -> None:
    try:
        parse_payment_address(text, network)
    except AddressError as exc:
        raise ValueError(f"{field}: {exc}") from None


class ProviderOffer(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A provider the consumer found matching its job's specs, at the price it quoted."""

    peer_id: PeerIdText
    address: AddressText  # where the provider is paid (its payment key hash goes in the datum)
    price: Amount  # NTX base units for the whole job
    slots: Annotated[int, Meta(ge=1, le=1024)] = 1  # jobs it runs at once


class ServiceRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    job_id: JobId
    network: Network
    consumer_peer_id: PeerIdText
    consumer_address: AddressText
    budget: Amount  # the most the consumer will lock, NTX base units
    deadline: PosixMs  # the escrow's deadline: after it the consumer may take the lock back
    offers: Annotated[list[ProviderOffer], Meta(max_length=MAX_OFFERS)]
    signature: SignatureHex  # by consumer_peer_id's key, of service_request_message(...)

    def verify(self) -> None:
        """Raise ValueError unless the consumer named in the request signed exactly it."""
        _verify_signed(
            "consumer_peer_id", self.consumer_peer_id, service_request_message(self),
            self.signature, "the request is not signed by its consumer",
        )  # fmt: skip

    def __post_init__(self) -> None:
        _check_address("consumer_address", self.consumer_address, self.network)
        seen: set[str] = set()
        for offer in self.offers:
            _check_address(f"offer {offer.peer_id} address", offer.address, self.network)
            if offer.peer_id == self.consumer_peer_id:
                raise ValueError("a consumer cannot hire itself")
            if offer.peer_id in seen:
                raise ValueError(f"provider {offer.peer_id} is offered twice")
            seen.add(offer.peer_id)


def _verify_signed(field: str, peer_id: str, message: bytes, signature: str, refusal: str) -> None:
    """Raise ValueError unless ``peer_id``'s own key signed ``message``."""
    try:
        key = VerifyKey(public_key_from_peer_id(peer_id))
    except PeerIdError as exc:
        raise ValueError(f"{field}: {exc}") from None
    try:
        key.verify(message, bytes.fromhex(signature))
    except BadSignatureError:
        raise ValueError(refusal) from None


def service_request_message(request: ServiceRequest) -> bytes:
    """The bytes a consumer signs for a service request: domain tag + canonical CBOR of every
    field but the signature."""
    body = {
        "job_id": request.job_id,
        "network": request.network,
        "consumer_peer_id": request.consumer_peer_id,
        "consumer_address": request.consumer_address,
        "budget": request.budget,
        "deadline": request.deadline,
        "offers": [
            [offer.peer_id, offer.address, offer.price, offer.slots] for offer in request.offers
        ],
    }
    return REQUEST_DOMAIN + cbor2.dumps(body, canonical=True)


def sign_service_request(request: ServiceRequest, private_key: bytes) -> ServiceRequest:
    """``request`` signed with its consumer's libp2p key (any form receipt.sign takes)."""
    signature = _signing_key(private_key).sign(service_request_message(request)).signature.hex()
    return msgspec.structs.replace(request, signature=signature)


class ServiceQuote(msgspec.Struct, frozen=True, kw_only=True):
    """The oracle registered the job with this provider at this price and signed the terms."""

    job_id: JobId
    network: Network
    consumer_peer_id: PeerIdText
    consumer_pkh: KeyHashHex
    provider_peer_id: PeerIdText
    compute_provider_addr: AddressText
    provider_pkh: KeyHashHex
    estimated_price: Amount  # the amount the escrow datum must hold
    deadline: PosixMs
    oracle_key: PublicKeyHex
    oracle_message: MessageHex  # quote_message(...) of the fields above
    signature: SignatureHex

    def verify(self) -> None:
        """Raise ValueError unless the message is this quote's and the oracle key signed it:
        what a provider checks before it runs a job on this quote."""
        if bytes.fromhex(self.oracle_message) != quote_message(self):
            raise ValueError("the quote's oracle message does not match its fields")
        try:
            VerifyKey(bytes.fromhex(self.oracle_key)).verify(
                bytes.fromhex(self.oracle_message), bytes.fromhex(self.signature)
            )
        except BadSignatureError:
            raise ValueError("the quote is not signed by its oracle key") from None


def quote_message(quote: ServiceQuote) -> bytes:
    """The bytes the oracle signs for a quote: domain tag + canonical CBOR of the terms."""
    terms = {
        "job_id": quote.job_id,
        "network": quote.network,
        "consumer_peer_id": quote.consumer_peer_id,
        "consumer_pkh": quote.consumer_pkh,
        "provider_peer_id": quote.provider_peer_id,
        "provider_pkh": quote.provider_pkh,
        "amount": quote.estimated_price,
        "deadline": quote.deadline,
        "oracle_key": quote.oracle_key,
    }
    return QUOTE_DOMAIN + cbor2.dumps(terms, canonical=True)


class LivenessReport(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The provider says "I am running this job" at ``at``, signed with its peer key: the
    oracle's own evidence that the provider did not vanish (rules.decide_vanished)."""

    job_id: JobId
    provider_peer_id: PeerIdText
    at: PosixMs  # when the provider signed it; the oracle refuses one far from its own clock
    kind: Literal["running"] = "running"
    signature: SignatureHex

    def verify(self) -> None:
        """Raise ValueError unless the provider named in the report signed exactly it."""
        _verify_signed(
            "provider_peer_id", self.provider_peer_id, liveness_message(self), self.signature,
            "the liveness report is not signed by its provider",
        )  # fmt: skip


def liveness_message(report: LivenessReport) -> bytes:
    body = {
        "kind": report.kind,
        "job_id": report.job_id,
        "provider_peer_id": report.provider_peer_id,
        "at": report.at,
    }
    return LIVENESS_DOMAIN + cbor2.dumps(body, canonical=True)


def sign_liveness(
    job_id: str, provider_peer_id: str, at_ms: int, private_key: bytes
) -> LivenessReport:
    """A liveness report signed with the provider's libp2p key (any form receipt.sign takes)."""
    unsigned = LivenessReport(
        job_id=job_id, provider_peer_id=provider_peer_id, at=at_ms, signature="00" * 64
    )
    signature = _signing_key(private_key).sign(liveness_message(unsigned)).signature.hex()
    return msgspec.structs.replace(unsigned, signature=signature)


class RewardRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Ask for the release signature. Without a receipt: "is it decided yet?" (202/102 until
    a receipt signed by both peers was accepted, then the decision)."""

    job_id: JobId
    receipt: Receipt | None = None
    # The tx that locked this job's escrow, as the consumer named it in its Confirm. The
    # signature names one output, and the oracle signs only for a lock made by this tx: with
    # several outputs carrying the job's terms, a request without it is refused.
    lock_tx: TxHashHex | None = None
    # The provider's "still running" (no receipt with it).
    liveness: LivenessReport | None = None

    def __post_init__(self) -> None:
        if self.receipt is not None and self.receipt.job_id != self.job_id:
            raise ValueError("the receipt is for another job")
        if self.liveness is not None:
            if self.receipt is not None:
                raise ValueError("a liveness report travels alone, without a receipt")
            if self.liveness.job_id != self.job_id:
                raise ValueError("the liveness report is for another job")


class RewardGrant(msgspec.Struct, frozen=True, kw_only=True):
    """The oracle's one decision for a job: a signature the beneficiary spends the lock with."""

    job_id: JobId
    # distribute: the provider gets provider_amount, the consumer the rest, in one tx;
    # refund: the consumer takes it all back; withdraw (older oracles): the provider claims.
    reward_type: RewardType
    beneficiary_pkh: KeyHashHex  # distribute: the provider's
    amount: Amount  # the whole lock
    oracle_key: PublicKeyHex
    # withdraw/refund: contract.datum.oracle_message(reward_type, job_id, beneficiary_pkh,
    # amount, escrow_utxo); distribute: distribute_message(provider_amount, escrow_utxo) (the
    # output's datum fixes the job, parties and lock amount)
    oracle_message: MessageHex
    signature: SignatureHex
    decided_at: PosixMs
    # The escrow output ("txhash#index") the signature releases, and no other: the escrow
    # script checks that the signed message names the output it spends.
    escrow_utxo: UtxoRef
    provider_amount: Units = 0  # distribute only
    consumer_amount: Units = 0  # distribute only
    consumer_pkh: KeyHashHex | None = None  # distribute only
    # distribute only, not signed: where each share goes (the submitter builds both outputs;
    # the script checks only the payment key hashes, which the signature names).
    provider_address: AddressText | None = None
    consumer_address: AddressText | None = None

    def __post_init__(self) -> None:
        if self.reward_type == "distribute":
            if self.consumer_pkh is None:
                raise ValueError("a distribute grant names the consumer's key hash")
            if self.provider_amount + self.consumer_amount != self.amount:
                raise ValueError(
                    f"a distribute grant's shares ({self.provider_amount} + "
                    f"{self.consumer_amount}) must make up the lock ({self.amount})"
                )

    @property
    def shares(self) -> tuple[int, int]:
        """(provider's, consumer's) base units of the lock."""
        if self.reward_type == "distribute":
            return self.provider_amount, self.consumer_amount
        if self.reward_type == "withdraw":
            return self.amount, 0
        return 0, self.amount

    def verify_signature(self) -> None:
        try:
            VerifyKey(bytes.fromhex(self.oracle_key)).verify(
                bytes.fromhex(self.oracle_message), bytes.fromhex(self.signature)
            )
        except BadSignatureError:
            raise ValueError("the grant is not signed by its oracle key") from None

    def verify(self) -> None:
        """Raise ValueError unless the signed message is exactly the release these fields
        describe (kind, job, beneficiary, amount, escrow output) and its oracle key signed it."""
        # Imported here: it pulls in pycardano, which the app's imports of models must not.
        from oracle_client.escrow.contract.datum import distribute_message, oracle_message

        if self.reward_type == "distribute":
            assert self.consumer_pkh is not None  # __post_init__
            expected = distribute_message(self.provider_amount, self.escrow_utxo)
        else:
            expected = oracle_message(
                self.reward_type,
                self.job_id,
                bytes.fromhex(self.beneficiary_pkh),
                self.amount,
                self.escrow_utxo,
            )
        if bytes.fromhex(self.oracle_message) != expected:
            raise ValueError("the grant's oracle message does not match its fields")
        self.verify_signature()


class RewardPending(msgspec.Struct, frozen=True, kw_only=True):
    job_id: JobId
    reason: Reason
    code: Literal[102] = 102
    # When asking again can bring the decision (seconds from the answer): a provider's
    # liveness grace running out (issue 22). None: no time is known (it waits on a peer).
    retry_after_s: Annotated[float, Meta(ge=0, le=86_400)] | None = None


class StatusReport(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    job_id: JobId
    tx_hash: TxHashHex
    reward_type: RewardType
    status: TxStatus


class StatusAck(msgspec.Struct, frozen=True, kw_only=True):
    message: Reason  # "transaction status confirmed acknowledged"


class OracleInfo(msgspec.Struct, frozen=True, kw_only=True):
    oracle_key: PublicKeyHex
    network: Network
    escrow_address: AddressText | None = None


class ErrorReply(msgspec.Struct, frozen=True, kw_only=True):
    code: Annotated[int, Meta(ge=100, le=599)]
    # One of ErrorKind; typed as text so a client still reads kinds a newer oracle adds.
    error: Annotated[str, Meta(max_length=64)] = "bad_request"
    reason: Reason = ""
