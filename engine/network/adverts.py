"""Signed resource adverts: DHT keys, the record validator, and building an advert.

Each provider's advert lives under its own key inside its channel's namespace,
``/nunet-adv/<channel digest>/<peer id>``; the channel key (a provider record) lists who
advertises there. The validator accepts only a record signed by the peer its key names, on
the channel its key names, and ``select`` keeps the highest sequence number.
"""

from __future__ import annotations

import logging
import time

import base58
import msgspec
from libp2p.records.validator import Validator

from engine.domain import wire
from engine.domain.peer_names import received_name
from engine.domain.wire import Advert
from engine.network.addrs import is_usable

log = logging.getLogger("nunet.network.adverts")

NAMESPACE = "nunet-adv"
DEFAULT_TTL_S = 3600.0
_SHA2_256_MULTIHASH = bytes([0x12, 0x20])  # multihash code sha2-256, 32-byte digest


def advert_key(channel: str, peer_id: str) -> str:
    return f"/{NAMESPACE}/{wire.channel_digest(channel)}/{peer_id}"


def provider_key(channel: str) -> str:
    """The channel's provider-record key: a CIDv0 (a sha2-256 multihash, base58).

    Go and js DHT servers decode a provider key as a CID and answered "Invalid CID" to the
    bare 32-byte digest we used to send; py-libp2p's KadDHT turns this string back into the
    multihash bytes (``_encode_key``), so every implementation stores the same key."""
    digest = bytes.fromhex(wire.channel_digest("providers/" + channel))
    return base58.b58encode(_SHA2_256_MULTIHASH + digest).decode("ascii")


def verify_advert(data: bytes) -> Advert:
    """A signed advert, checked; a display name against the rule is dropped, not the advert.

    Why not refuse it: ``str.isprintable`` follows the receiver's Unicode tables, so a name
    with a character newer than this Python's would otherwise hide an honest provider from
    older peers. Dropped, the peer is shown by its id alone (engine/domain/peer_names.py)."""
    advert = wire.open_envelope(data, "advert", Advert)
    if advert.display_name and not received_name(advert.display_name):
        log.debug("advert of %s: display name dropped (against the rule)", advert.peer_id)
        return msgspec.structs.replace(advert, display_name="")
    return advert


class AdvertValidator(Validator):  # libp2p's base class; untyped to mypy
    """DHT record validator for the ``nunet-adv`` namespace."""

    def validate(self, key: str, value: bytes) -> None:
        parts = key.split("/")
        if len(parts) != 4 or parts[1] != NAMESPACE:
            raise wire.Malformed(f"not an advert key: {key[:80]!r}")
        advert = verify_advert(value)
        if advert.peer_id != parts[3]:
            raise wire.BadSignature("advert stored under another peer's key")
        if wire.channel_digest(advert.channel) != parts[2]:
            raise wire.BadSignature("advert stored under another channel's key")
        if not is_usable(advert):
            raise wire.Malformed("advert without a dialable address")

    def select(self, key: str, values: list[bytes]) -> int:
        best, best_rank = 0, (-1, -1.0)
        for index, value in enumerate(values):
            try:
                advert = verify_advert(value)
            except wire.WireError:
                continue  # an invalid value never wins
            rank = (advert.seq, advert.at)
            if rank > best_rank:
                best, best_rank = index, rank
        return best


def stamp(
    advert: Advert, *, peer_id: str, channel: str, seq: int, addrs: tuple[str, ...], ttl_s: float
) -> Advert:
    """Fill in what the network layer owns: identity, channel, sequence, time, expiry."""
    now = time.time()
    # Every field the provider built is kept as it is (its specs and pools too).
    return msgspec.structs.replace(
        advert,
        peer_id=peer_id,
        channel=channel,
        prices=dict(advert.prices),
        addrs=addrs,
        seq=seq,
        at=now,
        expires_at=now + ttl_s,
    )


def tombstone(*, peer_id: str, channel: str, seq: int) -> Advert:
    now = time.time()
    return Advert(peer_id=peer_id, channel=channel, seq=seq, at=now, expires_at=now, withdrawn=True)
