"""The job receipt: what consumer and provider both sign when a job ends.

The oracle releases escrowed NTX only on a receipt that both peers signed with their libp2p
Ed25519 peer keys, so neither side can invent an outcome alone. A signature covers
``signing_bytes(receipt)``: a domain tag and the canonical CBOR (RFC 8949 deterministic
encoding) of every field but the two signatures, so any implementation that encodes the same
values gets the same bytes, and a receipt signature can never pass for any other message.

Each peer's public key is recovered from its peer id (oracle_client.peerid): a receipt needs no
key directory.
"""

from __future__ import annotations

from typing import Literal

import cbor2
import msgspec
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from oracle_client import billing
from oracle_client.fields import (
    Amount,
    JobId,
    KeyHashHex,
    MaybeSignatureHex,
    MemoryMb,
    PeerIdText,
    PosixMs,
    Seconds,
    ShortText,
    Units,
)
from oracle_client.peerid import PeerIdError, peer_id_from_public_key, public_key_from_peer_id

# The engine's executor outcomes (engine/jobs/executors/base.py Outcome), spelled the same.
Outcome = Literal["completed", "failed", "oom", "timeout", "cancelled", "interrupted"]
# Whose fault a job that did not complete was, as both peers agree by signing.
Fault = Literal["provider", "consumer", "none"]
Role = Literal["consumer", "provider"]
ROLES: tuple[Role, Role] = ("consumer", "provider")

SIGNING_DOMAIN = b"nunet-job-receipt/v1\x00"
_SIGNATURE_FIELDS = ("consumer_signature", "provider_signature")


class ReceiptError(ValueError):
    """A receipt is malformed, unsigned or wrongly signed."""


class MissingSignature(ReceiptError):
    def __init__(self, role: Role) -> None:
        super().__init__(f"the receipt is not signed by the {role}")
        self.role = role


class InvalidSignature(ReceiptError):
    def __init__(self, role: Role) -> None:
        super().__init__(
            f"the {role}'s signature does not match the receipt: it was changed after signing "
            f"or signed by another key"
        )
        self.role = role


class Metering(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    wall_s: Seconds = 0.0
    cpu_s: Seconds = 0.0
    gpu_s: Seconds = 0.0
    max_memory_mb: MemoryMb = 0.0


class Receipt(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    job_id: JobId
    consumer_peer_id: PeerIdText
    provider_peer_id: PeerIdText
    consumer_pkh: KeyHashHex
    provider_pkh: KeyHashHex
    amount: Amount
    outcome: Outcome
    fault: Fault
    started: bool  # False: the job never began running (cancelled or failed while preparing)
    metering: Metering
    finished_at: PosixMs
    # Billing (issue 12): the spec the job ran on, its price per machine-hour and minimum
    # charge (base units), the machine time as subtasks and replicas, and the charge that
    # follows from them (oracle_client.billing.charge, capped at ``amount``, the lock). The
    # oracle pays the provider ``charge`` and the consumer the rest on the metered outcomes.
    spec: ShortText = ""
    price_units_hour: Units = 0
    min_charge: Units = 0
    subtasks: billing.Subtasks = ()
    charge: Units = 0
    consumer_signature: MaybeSignatureHex = ""
    provider_signature: MaybeSignatureHex = ""

    def __post_init__(self) -> None:
        # msgspec runs this on decode and turns ValueError into a ValidationError, so a
        # receipt that is self-contradictory never even parses.
        for role in ROLES:
            try:
                public_key_from_peer_id(self.peer_id(role))
            except PeerIdError as exc:
                raise ValueError(f"{role}_peer_id: {exc}") from None
        if self.consumer_peer_id == self.provider_peer_id:
            raise ValueError("consumer and provider must be different peers")
        if self.outcome == "completed" and (self.fault != "none" or not self.started):
            raise ValueError("a completed job has started and has no fault")
        expected = self.expected_charge()
        if self.charge != expected:
            raise ValueError(
                f"charge {self.charge} is not what the receipt's price, minimum charge and "
                f"machine time ({self.machine_ms} ms) make: {expected} base units"
            )

    @property
    def machine_ms(self) -> int:
        return billing.machine_time_ms(self.subtasks)

    def expected_charge(self) -> int:
        return billing.charge(
            self.price_units_hour,
            self.machine_ms,
            min_charge=self.min_charge,
            cap=self.amount,
            started=self.started,
        )

    def peer_id(self, role: Role) -> str:
        return self.consumer_peer_id if role == "consumer" else self.provider_peer_id

    def signature(self, role: Role) -> str:
        return self.consumer_signature if role == "consumer" else self.provider_signature

    def unsigned(self) -> Receipt:
        return msgspec.structs.replace(self, consumer_signature="", provider_signature="")


def validate(receipt: Receipt) -> Receipt:
    """Check every constraint: msgspec only checks on decode, not on construction in Python."""
    try:
        return msgspec.convert(msgspec.to_builtins(receipt), Receipt)
    except msgspec.ValidationError as exc:
        raise ReceiptError(f"invalid receipt: {exc}") from None


def signing_bytes(receipt: Receipt) -> bytes:
    body = msgspec.to_builtins(receipt)
    for name in _SIGNATURE_FIELDS:
        del body[name]
    return SIGNING_DOMAIN + cbor2.dumps(body, canonical=True)


def sign(receipt: Receipt, private_key: bytes) -> Receipt:
    """``receipt`` with this peer's signature added; the role follows from the key.

    ``private_key``: a libp2p Ed25519 private key as raw 32-byte seed, 64-byte seed+public key
    (py-libp2p's and Go's raw form) or the protobuf PrivateKey that libp2p writes to key files.
    """
    receipt = validate(receipt)
    signing_key = _signing_key(private_key)
    peer_id = peer_id_from_public_key(bytes(signing_key.verify_key))
    roles = [role for role in ROLES if receipt.peer_id(role) == peer_id]
    if not roles:
        raise ReceiptError(f"key of peer {peer_id} belongs to neither party of the receipt")
    signature = signing_key.sign(signing_bytes(receipt)).signature.hex()
    return msgspec.structs.replace(receipt, **{f"{roles[0]}_signature": signature})


def verify_signature(receipt: Receipt, role: Role) -> None:
    """Raise unless ``role`` signed exactly this receipt (e.g. before countersigning)."""
    receipt = validate(receipt)
    signature = receipt.signature(role)
    if not signature:
        raise MissingSignature(role)
    key = VerifyKey(public_key_from_peer_id(receipt.peer_id(role)))
    try:
        key.verify(signing_bytes(receipt), bytes.fromhex(signature))
    except BadSignatureError:
        raise InvalidSignature(role) from None


def verify(receipt: Receipt) -> None:
    """Raise unless both the consumer and the provider signed exactly this receipt."""
    for role in ROLES:
        verify_signature(receipt, role)


def _signing_key(private_key: bytes) -> SigningKey:
    raw = private_key
    # protobuf PrivateKey { Type = Ed25519 (1); Data = 64 or 32 bytes }
    if len(raw) in (36, 68) and raw[:3] == b"\x08\x01\x12" and raw[3] == len(raw) - 4:
        raw = raw[4:]
    if len(raw) == 64:
        key = SigningKey(raw[:32])
        if bytes(key.verify_key) != raw[32:]:
            raise ReceiptError("private key's public half does not match its seed")
        return key
    if len(raw) == 32:
        return SigningKey(raw)
    raise ReceiptError("not an Ed25519 private key (32-byte seed, 64 bytes or libp2p protobuf)")
