"""Signed envelopes and the DHT advert validator, on real keys."""

from __future__ import annotations

import msgspec
import pytest
from nacl.signing import SigningKey

from engine.domain import wire
from engine.identity import Identity
from engine.network import adverts
from engine.network.peers import PeerTable

ALICE = Identity(SigningKey(b"\x01" * 32))
MALLORY = Identity(SigningKey(b"\x02" * 32))


def advert(who: Identity, seq: int = 1, channel: str = "ch") -> wire.Advert:
    base = wire.Advert(peer_id="", channel="", cpu_mhz=1000, prices={"basic": 0.5})
    addrs = (f"/ip4/127.0.0.1/tcp/4001/p2p/{who.peer_id}",)
    return adverts.stamp(base, peer_id=who.peer_id, channel=channel, seq=seq, addrs=addrs, ttl_s=60)


def test_signed_advert_round_trips() -> None:
    sealed = wire.seal(ALICE, "advert", advert(ALICE))
    opened = adverts.verify_advert(sealed)
    assert opened.peer_id == ALICE.peer_id and opened.prices == {"basic": 0.5}


def test_advert_prices_are_exact_base_units_or_the_advert_is_malformed() -> None:
    exact = advert(ALICE)
    assert wire.price_units_of(exact.prices) == {"basic": 500_000}
    assert wire.wire_prices({"low": 123_456, "high": 1}) == {"low": 0.123456, "high": 0.000001}
    for bad in ({"low": 0.1234567}, {"low": -1.0}, {"low": 2e9}):
        fine = advert(ALICE)
        msgspec.structs.force_setattr(fine, "prices", bad)
        with pytest.raises(wire.Malformed):
            adverts.verify_advert(wire.seal(ALICE, "advert", fine))


def test_advert_signed_by_someone_else_is_rejected() -> None:
    # Mallory signs an advert that names Alice.
    forged = wire.seal(MALLORY, "advert", advert(ALICE))
    with pytest.raises(wire.BadSignature):
        adverts.verify_advert(forged)


def test_tampered_and_unsigned_adverts_are_rejected() -> None:
    envelope = msgspec.msgpack.decode(wire.seal(ALICE, "advert", advert(ALICE)))
    tampered = dict(envelope, payload=wire._encoder.encode(advert(ALICE, seq=99)))
    with pytest.raises(wire.BadSignature):
        adverts.verify_advert(msgspec.msgpack.encode(tampered))
    with pytest.raises(wire.BadSignature):
        adverts.verify_advert(msgspec.msgpack.encode(dict(envelope, sig=b"")))
    swapped = dict(envelope, signer=MALLORY.peer_id)
    with pytest.raises(wire.BadSignature):
        adverts.verify_advert(msgspec.msgpack.encode(swapped))


def test_heartbeat_signature_cannot_be_replayed_as_advert() -> None:
    beat = wire.Heartbeat(peer_id=ALICE.peer_id, channel="ch", seq=1, at=1.0)
    with pytest.raises(wire.Malformed):
        adverts.verify_advert(wire.seal(ALICE, "heartbeat", beat))


def test_validator_checks_key_peer_and_channel_and_selects_newest() -> None:
    validator = adverts.AdvertValidator()
    key = adverts.advert_key("ch", ALICE.peer_id)
    old, new = (wire.seal(ALICE, "advert", advert(ALICE, seq)) for seq in (1, 2))
    validator.validate(key, new)
    with pytest.raises(wire.BadSignature):
        validator.validate(adverts.advert_key("ch", MALLORY.peer_id), new)
    with pytest.raises(wire.BadSignature):
        validator.validate(adverts.advert_key("other", ALICE.peer_id), new)
    with pytest.raises(wire.WireError):
        validator.validate(key, wire.seal(MALLORY, "advert", advert(ALICE, 5)))
    assert validator.select(key, [old, new]) == 1
    assert validator.select(key, [new, old]) == 0
    assert validator.select(key, [b"junk", old]) == 1


def test_peer_table_keeps_channels_apart_and_drops_silent_peers() -> None:
    now = [1000.0]
    changes: list[tuple[str, bool]] = []
    table = PeerTable(
        "ch", 1.0, lambda p, i: changes.append((p, i is not None)), clock=lambda: now[0]
    )
    foreign = msgspec.structs.replace(advert(MALLORY, channel="other"), at=now[0])
    assert not table.on_advert(foreign)
    mine = msgspec.structs.replace(advert(ALICE), at=now[0], expires_at=now[0] + 60)
    assert table.on_advert(mine)
    assert [p.peer_id for p in table.snapshot()] == [ALICE.peer_id]
    now[0] += 3.5
    assert table.expire() == [ALICE.peer_id]
    assert not table.on_advert(mine)  # the DHT's old copy does not bring it back
    beat = wire.Heartbeat(peer_id=ALICE.peer_id, channel="ch", seq=5, at=now[0])
    assert table.on_heartbeat(beat)
    assert changes[-1] == (ALICE.peer_id, True)


def test_the_provider_key_is_a_cid_other_dht_implementations_accept() -> None:
    """Go and js DHT servers decode provider keys as CIDs: ours is a CIDv0 (sha2-256
    multihash), and py-libp2p's KadDHT sends exactly that multihash on the wire."""
    from libp2p.bitswap.cid import parse_cid
    from libp2p.kad_dht.kad_dht import _encode_key

    key = adverts.provider_key("nunet-test")
    assert key.startswith("Qm")
    digest = bytes.fromhex(wire.channel_digest("providers/nunet-test"))
    assert _encode_key(key) == bytes([0x12, 0x20]) + digest
    assert parse_cid(key).multihash == bytes([0x12, 0x20]) + digest
    assert adverts.provider_key("other") != key
