"""The limits of issue 21 on their own: scopes of an address, the scoped stream limiter's
reserve for peers in good standing, and the chat quarantine's bounds."""

from __future__ import annotations

from engine.domain.ratelimit import ScopedRateLimiter, ScopedStreamLimiter, address_scopes
from engine.network.chat_quarantine import ChatQuarantine


def test_address_scopes() -> None:
    assert address_scopes("203.0.113.2") == ("203.0.113.2", "203.0.113.0/24")
    assert address_scopes("127.0.0.2") == ("127.0.0.2", "127.0.0.2")  # loopback: its own
    assert address_scopes("::ffff:10.1.2.3") == ("10.1.2.3", "10.1.2.0/24")
    assert address_scopes("2001:db8:1:2:3::4") == ("2001:db8:1:2::/64", "2001:db8:1::/56")
    assert address_scopes(None) == ("?", "?")


def test_strangers_cannot_take_the_reserve_or_more_than_their_subnet() -> None:
    limiter = ScopedStreamLimiter(per_peer=2, per_address=3, per_subnet=5, total=8, reserve=2)
    leases = [limiter.acquire(f"x{i}", f"203.0.113.{i % 3 + 1}", lambda: False) for i in range(50)]
    assert sum(lease is not None for lease in leases) == 5  # the /24's cap
    other = [limiter.acquire(f"y{i}", "10.0.0.1", lambda: False) for i in range(10)]
    assert sum(lease is not None for lease in other) == 1  # total - reserve = 6
    # An honest peer at the attacker's address, in good standing: the reserve is its.
    honest = limiter.acquire("honest", "203.0.113.1", lambda: True)
    assert honest is not None
    for lease in leases + other + [honest]:
        if lease is not None:
            limiter.release(lease)
    assert limiter.held() == 0


def test_a_trusted_peer_keeps_its_rate_when_its_address_floods() -> None:
    limiter = ScopedRateLimiter((100.0, 100.0), (1.0, 5.0), (1.0, 5.0))
    passed = sum(limiter.allow(f"x{i}", "203.0.113.1", False) for i in range(50))
    assert passed == 5
    assert all(limiter.allow("honest", "203.0.113.1", True) for _ in range(20))


def test_quarantine_is_bounded_per_peer_and_in_all_oldest_first() -> None:
    q = ChatQuarantine(per_peer_messages=3, per_peer_bytes=10**6, total_messages=5)
    for seq in range(10):
        q.add("a", "c", seq, f"t{seq}", 0.0)
    assert [h.seq for h in q.messages("a")] == [7, 8, 9]
    for peer in "bcd":
        q.add(peer, "c", 1, "x", 0.0)
    assert q.count == 5 and [h.seq for h in q.messages("a")] == [8, 9]
    assert q.preview("a") == ("t8", "t9")
    assert [h.text for h in q.take("a")] == ["t8", "t9"] and q.count == 3
    big = ChatQuarantine(per_peer_bytes=5000, total_bytes=12_000)
    for i in range(100):
        big.add(f"p{i}", "c", 1, "x" * 4000, 0.0)
    assert big.bytes <= 12_000 and big.count == 2
