"""Wire formats: varint-framed messages, typed schemas with size limits, signed envelopes.

Pure Python on purpose (no libp2p import): the decoders are fuzzed and must stay cheap to load.
Every decoder either returns a typed object or raises a ``WireError`` subclass; nothing a peer
sends may raise anything else. Schemas carry a ``v`` field so that a later version can be
told apart instead of mis-parsed.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Annotated, Any, Literal, Protocol, TypeVar

import base58
import msgspec
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from engine.domain.peer_names import MAX_DISPLAY_NAME
from engine.identity import Identity
from oracle_client.ntx import ntx_of, units_of

WIRE_VERSION = 1
# libp2p crypto.proto, Ed25519 public key: KeyType=1, 32 bytes of data.
_ED25519_PUB_PREFIX = bytes([0x08, 0x01, 0x12, 0x20])
# A 32-bit length never needs more than 5 varint bytes; more is hostile input.
_MAX_VARINT_BYTES = 5

MAX_ADVERT_BYTES = 16 * 1024
MAX_HEARTBEAT_BYTES = 4 * 1024
MAX_CHAT_TEXT_BYTES = 4 * 1024
MAX_CHAT_FRAME_BYTES = 8 * 1024
# Envelope overhead: signer id (~52 chars), 64-byte signature, kind, msgpack framing.
_ENVELOPE_OVERHEAD = 512


class WireError(Exception):
    """Anything wrong with bytes that came from a peer."""


class FrameTooLarge(WireError):
    pass


class Malformed(WireError):
    pass


class BadSignature(WireError):
    pass


class StreamLike(Protocol):
    """The part of a libp2p stream the framing needs (kept abstract for tests)."""

    async def read(self, n: int | None = None) -> bytes: ...

    async def write(self, data: bytes) -> None: ...

    async def reset(self) -> None: ...


# --- varint framing ------------------------------------------------------------------------


def encode_varint(value: int) -> bytes:
    if value < 0:
        raise ValueError("varint must be non-negative")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(data: bytes) -> tuple[int, int]:
    """(value, bytes consumed) of the varint at the start of ``data``."""
    value = 0
    for index, byte in enumerate(data[:_MAX_VARINT_BYTES]):
        value |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            if index > 0 and byte == 0:
                raise Malformed("non-minimal varint")
            return value, index + 1
    if len(data) >= _MAX_VARINT_BYTES:
        raise Malformed("varint longer than 5 bytes")
    raise Malformed("truncated varint")


def frame(payload: bytes) -> bytes:
    return encode_varint(len(payload)) + payload


async def write_frame(stream: StreamLike, payload: bytes, max_size: int) -> None:
    if len(payload) > max_size:
        raise FrameTooLarge(f"message of {len(payload)} bytes exceeds the {max_size}-byte limit")
    await stream.write(frame(payload))


async def read_frame(stream: StreamLike, max_size: int) -> bytes | None:
    """One length-prefixed frame; None on a clean end of stream before a frame starts.

    Reads the length one byte at a time so nothing past the frame is consumed, then never
    asks for more than the announced (and checked) length. Oversized or broken input resets
    the stream: a peer that lies about lengths gets no further reads.
    """
    header = bytearray()
    while True:
        byte = await _read_some(stream, 1)
        if not byte:
            if header:
                await _reset(stream)
                raise Malformed("stream ended inside a length prefix")
            return None
        header += byte
        if not byte[0] & 0x80:
            break
        if len(header) >= _MAX_VARINT_BYTES:
            await _reset(stream)
            raise Malformed("length prefix longer than 5 bytes")
    try:
        length, _ = decode_varint(bytes(header))
    except Malformed:
        await _reset(stream)
        raise
    if length > max_size:
        await _reset(stream)
        raise FrameTooLarge(f"peer announced {length} bytes; the limit is {max_size}")
    body = bytearray()
    while len(body) < length:
        chunk = await _read_some(stream, length - len(body))
        if not chunk:
            await _reset(stream)
            raise Malformed(f"stream ended after {len(body)} of {length} bytes")
        body += chunk
    return bytes(body)


async def _read_some(stream: StreamLike, n: int) -> bytes:
    try:
        return await stream.read(n)
    except WireError:
        raise
    except Exception as exc:  # libp2p raises EOF/reset errors of many types
        if type(exc).__name__ in ("StreamEOF", "EOFError", "IncompleteReadError"):
            return b""
        raise Malformed(f"stream failed: {type(exc).__name__}: {exc}") from exc


async def at_end(stream: StreamLike) -> bool:
    """True when the peer's side ends here (its FIN); False when it sent more, or broke."""
    try:
        return await _read_some(stream, 1) == b""
    except WireError:
        return False


async def _reset(stream: StreamLike) -> None:
    with contextlib.suppress(Exception):  # a reset of a dead stream has nothing left to fail
        await stream.reset()


# --- schemas ---------------------------------------------------------------------------------


class Schema(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    v: int = WIRE_VERSION


class Gpu(Schema, frozen=True):
    vendor: str
    model: str
    vram_mb: int


class _Part(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """A record inside an advert (no version of its own: the advert's covers it)."""


# What an advert's specs and pools may hold (issue 12). Peers are hostile: every field and
# count is bounded here, and names are plain text (no control characters reach a screen).
MAX_ADVERT_SPECS = 16
MAX_ADVERT_POOLS = 8
MAX_ADVERT_MEMBERS = 128  # peer ids, in all pools together (~7 KiB of the 16 KiB advert)
MAX_UNITS = 10**15  # base units: a price of a billion NTX an hour is past any real one
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._+ -]*$"
SpecName = Annotated[str, msgspec.Meta(min_length=1, max_length=40, pattern=_NAME)]
PeerIdText = Annotated[
    str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[1-9A-HJ-NP-Za-km-z]+$")
]
Units = Annotated[int, msgspec.Meta(ge=0, le=MAX_UNITS)]
# A tier price as adverts carry it: NTX per hour as a JSON decimal, as older peers read it (they
# refuse a field they do not know, so an integer field would hide every provider from them).
# It is exact all the same: at most 6 decimals (one base unit), checked at the boundary, and
# turned into base units there (``price_units_of``); nothing inside the node holds the decimal.
WirePrice = Annotated[float, msgspec.Meta(ge=0, le=MAX_UNITS / 1_000_000)]


def wire_prices(price_units: dict[str, int]) -> dict[str, float]:
    """Tier prices in base units, as an advert carries them (exact decimals)."""
    return {tier: ntx_of(units) for tier, units in price_units.items()}


def price_units_of(prices: dict[str, float]) -> dict[str, int]:
    """An advert's tier prices in base units (``Advert`` checked each is exact)."""
    return {tier: units_of(price) for tier, price in prices.items()}


class AdvertSpec(_Part, frozen=True):
    """A resource spec a provider sells: resources and a price per machine-hour (base units)."""

    name: SpecName
    cpu_cores: Annotated[int, msgspec.Meta(ge=1, le=65_536)]
    ram_mb: Annotated[int, msgspec.Meta(ge=1, le=1 << 30)]
    price_units_hour: Units
    disk_mb: Annotated[int, msgspec.Meta(ge=0, le=1 << 40)] = 0
    gpus: Annotated[int, msgspec.Meta(ge=0, le=64)] = 0
    gpu_resource: SpecName | None = None
    min_charge_units: Units = 0
    pool: SpecName = "default"


class AdvertPool(_Part, frozen=True):
    """Who may use a pool's specs: its members (groups filled in) and the groups' names."""

    name: SpecName
    members: Annotated[tuple[PeerIdText, ...], msgspec.Meta(max_length=MAX_ADVERT_MEMBERS)] = ()
    groups: Annotated[tuple[SpecName, ...], msgspec.Meta(max_length=16)] = ()


class Advert(Schema, frozen=True, omit_defaults=True):
    """What a provider offers on a channel. ``withdrawn`` marks a tombstone.

    Encoded without the fields at their defaults: a field added later (``no_shell``) then
    reaches older peers, which refuse unknown fields, only when it says something, and every
    field they know decodes to the same value as before (each has the same default)."""

    peer_id: str
    channel: str
    cpu_mhz: int = 0
    ram_mb: int = 0
    disk_mb: int = 0
    gpus: tuple[Gpu, ...] = ()
    # tier -> NTX/hour, exact to the base unit (``WirePrice``); read with ``price_units_of``
    prices: Annotated[dict[str, WirePrice], msgspec.Meta(max_length=16)] = msgspec.field(
        default_factory=dict
    )
    executors: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()
    version: str = ""
    slots: int = 1  # jobs it runs at once
    addrs: tuple[str, ...] = ()
    seq: int = 0
    at: float = 0.0
    expires_at: float = 0.0
    withdrawn: bool = False
    no_shell: bool = False  # [jobs] allow_shell = false: `job shell` is refused here
    # Issue 12: the specs it sells and the pools reserving some (only when it defined specs:
    # a provider selling NuNet's default tiers says so by ``prices`` alone, as before).
    specs: Annotated[tuple[AdvertSpec, ...], msgspec.Meta(max_length=MAX_ADVERT_SPECS)] = ()
    pools: Annotated[tuple[AdvertPool, ...], msgspec.Meta(max_length=MAX_ADVERT_POOLS)] = ()
    # Issue 22: ``[provider] display_name``, shown with the peer id (engine/domain/peer_names.py).
    # Longer than the bound: the whole advert is malformed, as with any field out of bounds;
    # within it but against the rule: ``adverts.verify_advert`` keeps the advert, name dropped.
    display_name: Annotated[str, msgspec.Meta(max_length=MAX_DISPLAY_NAME)] = ""

    def __post_init__(self) -> None:
        members = sum(len(pool.members) for pool in self.pools)
        if members > MAX_ADVERT_MEMBERS:
            raise ValueError(f"{members} pool members: at most {MAX_ADVERT_MEMBERS}")
        if len({spec.name for spec in self.specs}) != len(self.specs):
            raise ValueError("two specs share a name")
        for tier, price in self.prices.items():
            if ntx_of(units_of(price)) != price:
                raise ValueError(f"price of {tier!r} is finer than one base unit (6 decimals)")


class Heartbeat(Schema, frozen=True):
    peer_id: str
    channel: str
    seq: int
    at: float
    cpu_mhz: int = 0
    ram_mb: int = 0
    gpus: int = 0
    vram_mb: int = 0
    free_cpu_mhz: int = 0
    free_ram_mb: int = 0
    free_gpus: int = 0
    free_vram_mb: int = 0
    running_jobs: int = 0
    ntx_claimed: int = 0  # NTX base units (6 decimals) claimed from escrows
    uptime_s: float = 0.0


class ChatFrame(Schema, frozen=True, tag_field="t"):
    pass


class ChatHello(ChatFrame, frozen=True, tag="hello"):
    """First frame on a chat stream: which conversation, and whether it is a request."""

    conversation: str
    request: bool = False  # True for ``chat start``: the peer should see a chat request


class ChatJoin(ChatFrame, frozen=True, tag="join"):
    conversation: str


class ChatText(ChatFrame, frozen=True, tag="text"):
    conversation: str
    seq: int
    text: str
    at: float


class ChatAck(ChatFrame, frozen=True, tag="ack"):
    conversation: str
    seq: int


class ChatError(ChatFrame, frozen=True, tag="error"):
    code: str
    message: str


ChatMessage = ChatHello | ChatJoin | ChatText | ChatAck | ChatError

_chat_decoder = msgspec.msgpack.Decoder(ChatMessage)
_encoder = msgspec.msgpack.Encoder()


def encode_chat(message: ChatFrame) -> bytes:
    return _encoder.encode(message)


def decode_chat(data: bytes) -> ChatMessage:
    if len(data) > MAX_CHAT_FRAME_BYTES:
        raise FrameTooLarge(f"chat frame of {len(data)} bytes exceeds {MAX_CHAT_FRAME_BYTES}")
    try:
        message = _chat_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Malformed(f"bad chat frame: {exc}") from exc
    except Exception as exc:  # msgspec may raise others on odd ext types; never crash
        raise Malformed(f"bad chat frame: {type(exc).__name__}") from exc
    _check_version(message)
    if isinstance(message, ChatText) and len(message.text.encode()) > MAX_CHAT_TEXT_BYTES:
        raise FrameTooLarge(f"chat text exceeds {MAX_CHAT_TEXT_BYTES} bytes")
    return message


def _check_version(message: Schema) -> None:
    if message.v != WIRE_VERSION:
        raise Malformed(f"unsupported message version {message.v} (we speak {WIRE_VERSION})")


# --- signed envelopes ----------------------------------------------------------------------

Kind = Literal["advert", "heartbeat"]
_LIMITS: dict[str, int] = {"advert": MAX_ADVERT_BYTES, "heartbeat": MAX_HEARTBEAT_BYTES}


class AdvertQuery(Schema, frozen=True):
    """Ask a peer for the signed adverts it holds on one channel (peer exchange)."""

    channel_digest: str


MAX_QUERY_BYTES = 256
_query_decoder = msgspec.msgpack.Decoder(AdvertQuery)


def encode_query(query: AdvertQuery) -> bytes:
    return _encoder.encode(query)


def decode_query(data: bytes) -> AdvertQuery:
    if len(data) > MAX_QUERY_BYTES:
        raise FrameTooLarge("advert query too large")
    try:
        query = _query_decoder.decode(data)
    except Exception as exc:  # DecodeError, ValidationError, or anything odd: typed error
        raise Malformed(f"bad advert query: {type(exc).__name__}") from exc
    _check_version(query)
    return query


class Envelope(Schema, frozen=True):
    kind: str
    signer: str  # base58 peer id; its identity multihash carries the public key
    payload: bytes
    sig: bytes


_envelope_decoder = msgspec.msgpack.Decoder(Envelope)
S = TypeVar("S", Advert, Heartbeat)


def _signing_bytes(kind: str, payload: bytes) -> bytes:
    # Domain separation: an advert signature can never be replayed as a heartbeat.
    return b"nunet-envelope/1\x00" + kind.encode() + b"\x00" + payload


def seal(identity: Identity, kind: Kind, message: Advert | Heartbeat) -> bytes:
    payload = _encoder.encode(message)
    if len(payload) > _LIMITS[kind]:
        raise FrameTooLarge(f"{kind} of {len(payload)} bytes exceeds {_LIMITS[kind]}")
    envelope = Envelope(
        kind=kind,
        signer=identity.peer_id,
        payload=payload,
        sig=identity.sign(_signing_bytes(kind, payload)),
    )
    return _encoder.encode(envelope)


def public_key_of(peer_id: str) -> VerifyKey:
    """The Ed25519 key embedded in a peer id (identity multihash), or BadSignature."""
    try:
        raw = base58.b58decode(peer_id)
    except Exception as exc:
        raise BadSignature(f"signer {peer_id[:60]!r} is not base58") from exc
    # identity multihash: code 0x00, length, then the protobuf public key
    if len(raw) != 2 + 36 or raw[0] != 0x00 or raw[1] != 36:
        raise BadSignature("signer is not an Ed25519 peer id (no embedded public key)")
    proto = raw[2:]
    if not proto.startswith(_ED25519_PUB_PREFIX):
        raise BadSignature("signer key is not Ed25519")
    try:
        return VerifyKey(proto[len(_ED25519_PUB_PREFIX) :])
    except Exception as exc:
        raise BadSignature("signer key is invalid") from exc


def open_envelope(data: bytes, kind: Kind, schema: type[S]) -> S:
    """Decode, verify the signature, check that the message names its signer."""
    limit = _LIMITS[kind] + _ENVELOPE_OVERHEAD
    if len(data) > limit:
        raise FrameTooLarge(f"{kind} envelope of {len(data)} bytes exceeds {limit}")
    try:
        envelope = _envelope_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Malformed(f"bad envelope: {exc}") from exc
    except Exception as exc:
        raise Malformed(f"bad envelope: {type(exc).__name__}") from exc
    _check_version(envelope)
    if envelope.kind != kind:
        raise Malformed(f"expected a {kind}, got {envelope.kind[:40]!r}")
    if not envelope.sig:
        raise BadSignature(f"unsigned {kind}")
    key = public_key_of(envelope.signer)
    try:
        key.verify(_signing_bytes(kind, envelope.payload), envelope.sig)
    except (BadSignatureError, ValueError, TypeError) as exc:
        raise BadSignature(f"{kind} signature does not match {envelope.signer}") from exc
    try:
        message: Any = msgspec.msgpack.decode(envelope.payload, type=schema)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Malformed(f"bad {kind}: {exc}") from exc
    except Exception as exc:
        raise Malformed(f"bad {kind}: {type(exc).__name__}") from exc
    _check_version(message)
    if message.peer_id != envelope.signer:
        raise BadSignature(f"{kind} names {message.peer_id} but is signed by {envelope.signer}")
    return message


def channel_digest(channel: str) -> str:
    """A fixed-size, slash-free name for a channel, used in DHT keys and topics."""
    return hashlib.sha256(b"nunet-channel/" + channel.encode()).hexdigest()


def seal_payload(identity: Identity, kind: str, payload: bytes) -> bytes:
    """Sign arbitrary bytes under ``kind`` (the job protocol's messages use this)."""
    envelope = Envelope(
        kind=kind,
        signer=identity.peer_id,
        payload=payload,
        sig=identity.sign(_signing_bytes(kind, payload)),
    )
    return _encoder.encode(envelope)


def open_payload(data: bytes, limit: int) -> Envelope:
    """Decode an envelope of any kind and verify its signature; the caller checks the kind
    and that the signer is the peer it expects."""
    if len(data) > limit + _ENVELOPE_OVERHEAD:
        raise FrameTooLarge(f"envelope of {len(data)} bytes exceeds {limit}")
    try:
        envelope = _envelope_decoder.decode(data)
    except Exception as exc:  # DecodeError, ValidationError or anything odd: typed error
        raise Malformed(f"bad envelope: {type(exc).__name__}") from exc
    _check_version(envelope)
    if not envelope.sig:
        raise BadSignature(f"unsigned {envelope.kind[:40]}")
    key = public_key_of(envelope.signer)
    try:
        key.verify(_signing_bytes(envelope.kind, envelope.payload), envelope.sig)
    except (BadSignatureError, ValueError, TypeError) as exc:
        raise BadSignature(f"signature does not match {envelope.signer}") from exc
    return envelope
