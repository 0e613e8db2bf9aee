"""Fixtures of the adversarial suite: real daemons (``daemons``) and hostile peers (``hostile``).

Each test attacks a real daemon on 127.0.0.1 and then checks that the victim still serves
an honest peer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from engine.domain import wire
from tests.adversarial.hostile import HostilePeer, provider_advert
from tests.daemon_harness import daemons

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
        if provider and advert is None:
            # Before start, so its very first heartbeat already reports the advert's free
            # RAM: set after, a beat of zeros could be the latest a victim saw, and a
            # submit then failed on "busy: 0 MB RAM free" before any offer went out.
            peer.callbacks.advert_value = provider_advert(peer, channel=channel)
        started.append(peer)
        peer.start()
        return peer

    yield spawn
    for peer in started:
        peer.stop()
