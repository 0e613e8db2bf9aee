"""The per-peer token bucket (engine/domain/ratelimit.py), on a clock the test moves."""

from __future__ import annotations

from engine.domain.ratelimit import PeerRateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_the_rate_and_each_peer_its_own_bucket() -> None:
    clock = FakeClock()
    limit = PeerRateLimiter(2.0, 3.0, clock=clock)
    assert [limit.allow("a") for _ in range(4)] == [True, True, True, False]
    assert limit.allow("b")  # another peer is not slowed by the first
    clock.now += 0.5  # one token back at 2 a second
    assert limit.allow("a") and not limit.allow("a")


def test_wait_s_says_when_the_next_one_passes_and_takes_nothing() -> None:
    clock = FakeClock()
    limit = PeerRateLimiter(2.0, 2.0, clock=clock)
    assert limit.wait_s("a") == 0.0
    assert limit.allow("a") and limit.allow("a")
    assert limit.wait_s("a") == 0.5
    assert limit.wait_s("a") == 0.5  # asking twice took no token
    clock.now += 0.25
    assert limit.wait_s("a") == 0.25
    clock.now += 0.25
    assert limit.wait_s("a") == 0.0 and limit.allow("a")
