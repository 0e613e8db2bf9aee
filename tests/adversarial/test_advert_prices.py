"""Tier prices from the wire (issue 23 §2): an advert carries them as NTX decimals (older
peers read them so), and a consumer turns them into base units at the boundary. A price finer
than one base unit, or below zero, makes the whole advert malformed: nothing inside the node
ever holds a figure it would have to round. Against a real consumer daemon."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from nacl.signing import SigningKey

from engine.domain import wire
from engine.identity import Identity
from tests.adversarial.hostile import HostilePeer
from tests.daemon_harness import Daemon, wait_for


def _advert(seed: bytes, prices: dict[str, float]) -> wire.Advert:
    advert = wire.Advert(
        peer_id=Identity(SigningKey(seed)).peer_id,
        channel="nunet-test",
        cpu_mhz=8000,
        ram_mb=16000,
        executors=("process",),
        frameworks=("scikit-learn",),
        version="hostile",
    )
    # Past the constructor's check, as a hostile encoder would write it.
    msgspec.structs.force_setattr(advert, "prices", prices)
    return advert


def test_a_price_finer_than_a_base_unit_refuses_the_advert(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    victim = daemons("consumer", 71)
    boot = victim.addrs()
    adverts = {
        "exact": _advert(b"\x71" * 32, {"low": 0.123456, "high": 1_000_000.5}),
        "finer": _advert(b"\x72" * 32, {"low": 0.1234567}),
        "negative": _advert(b"\x73" * 32, {"low": -1.0}),
    }
    for role, advert in adverts.items():
        hostile(seed=bytes([0x71 + list(adverts).index(role)]) * 32, bootstrap=boot, advert=advert)
    ids = {role: advert.peer_id for role, advert in adverts.items()}

    def listed() -> dict[str, Any] | None:
        peers = {p["peer_id"]: p for p in victim.cli("peer", "list")["peers"]}
        exact = peers.get(ids["exact"])
        if exact is None or not (exact["resources"] or {}).get("executors"):
            return None
        # The others' heartbeats list them; their adverts never got in.
        if any(peers.get(ids[role]) is None for role in ("finer", "negative")):
            return None
        return peers

    peers = wait_for(listed, "the victim never listed the three providers", timeout=40)
    assert peers[ids["exact"]]["resources"]["price_units"] == {
        "low": 123_456,
        "high": 1_000_000_500_000,
    }
    for role in ("finer", "negative"):
        resources = peers[ids[role]]["resources"]
        assert resources is None or (resources["executors"] == [] and not resources["price_units"])
