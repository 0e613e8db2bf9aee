"""Fixtures of the adversarial suite: real daemons (``daemons``) and hostile peers (``hostile``).

Each test attacks a real daemon on 127.0.0.1 and then checks that the victim still serves
an honest peer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from engine.network import wire
from tests.adversarial.hostile import HostilePeer, provider_advert
from tests.daemons import daemons

__all__ = ["daemons", "hostile"]


@pytest.fixture
def hostile() -> Iterator[Callable[..., HostilePeer]]:
    """``hostile(seed=..., bootstrap=[addr], channel=..., advert=Advert | None,
    provider=False)``: a started hostile peer, stopped after the test. ``provider=True``
    publishes a plausible provider advert (``provider_advert``) once it listens."""
    started: list[HostilePeer] = []

    def spawn(
        *,
        seed: bytes | None = None,
        bootstrap: Sequence[str] = (),
        channel: str = "nunet-test",
        advert: wire.Advert | None = None,
        provider: bool = False,
    ) -> HostilePeer:
        peer = HostilePeer(seed=seed, bootstrap=bootstrap, channel=channel, advert=advert)
        started.append(peer)
        peer.start()
        if provider and advert is None:
            peer.set_advert(provider_advert(peer, channel=channel))
        return peer

    yield spawn
    for peer in started:
        peer.stop()
