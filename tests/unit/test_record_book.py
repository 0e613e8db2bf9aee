"""The DHT stores' book (engine/network/record_book.py): quotas per sender peer, address and
subnet, a reserve strangers cannot use, and who is evicted when the store is full."""

from __future__ import annotations

from collections.abc import Hashable

from engine.network.record_book import FETCHED, OURS, Owner, RecordBook, StoreBounds

SIZE = 100


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def stranger(n: int, host: str) -> Owner:
    return Owner.sender(f"peer{n}", host, protected=False)


def book_of(**bounds: int) -> tuple[RecordBook, Clock, list[Hashable]]:
    clock = Clock()
    return RecordBook(StoreBounds(**bounds), clock), clock, []


def write(book: RecordBook, evicted: list[Hashable], entry: str, owner: Owner) -> bool:
    def evict(victim: Hashable) -> None:
        evicted.append(victim)
        book.release(victim)

    if not book.make_room(owner, SIZE, evict, replacing=entry):
        return False
    book.charge(entry, owner, SIZE, expires=book._clock() + 3600)
    return True


def test_quotas_count_per_peer_address_and_subnet_not_per_identity() -> None:
    book, _, evicted = book_of(per_peer=2, per_address=3, per_subnet=5)
    assert write(book, evicted, "a", stranger(1, "10.0.0.1"))
    assert write(book, evicted, "b", stranger(1, "10.0.0.1"))
    assert not write(book, evicted, "c", stranger(1, "10.0.0.1"))  # the peer's quota
    assert write(book, evicted, "c", stranger(2, "10.0.0.1"))
    assert not write(book, evicted, "d", stranger(3, "10.0.0.1"))  # a fresh key: the address's
    assert write(book, evicted, "d", stranger(3, "10.0.0.2"))
    assert write(book, evicted, "e", stranger(4, "10.0.0.3"))
    assert not write(book, evicted, "f", stranger(5, "10.0.0.4"))  # the /24's
    assert write(book, evicted, "f", stranger(5, "10.0.1.4"))  # another /24
    # A record replacing its own is no extra record.
    assert write(book, evicted, "a", stranger(1, "10.0.0.1"))
    assert evicted == [] and book.refused == 3
    book.release("a")
    assert write(book, evicted, "g", stranger(1, "10.0.0.1"))


def test_a_full_store_evicts_the_heaviest_stranger_subnet_never_the_newcomers_own() -> None:
    book, clock, evicted = book_of(max_records=16, per_peer=100, per_address=100, per_subnet=100)
    # Strangers share 16 - 2 (the reserve): the flood holds 12, an honest stranger 2.
    for n in range(12):
        clock.now += 1
        assert write(book, evicted, f"flood{n}", stranger(n, "127.0.0.2"))
    assert write(book, evicted, "honest1", stranger(100, "127.0.0.1"))
    assert write(book, evicted, "honest2", stranger(101, "127.0.0.1"))
    # The flood's next record would displace only itself: refused, nothing evicted.
    assert not write(book, evicted, "flood12", stranger(12, "127.0.0.2"))
    assert evicted == []
    # A newcomer from elsewhere displaces the oldest record of the heaviest subnet.
    assert write(book, evicted, "newcomer", stranger(200, "127.0.0.3"))
    assert evicted == ["flood0"]
    assert "honest1" in book and "honest2" in book


def test_expired_records_go_first_and_protected_ones_never() -> None:
    book, clock, evicted = book_of(max_records=16, per_peer=100, per_address=100, per_subnet=100)
    partner = Owner.sender("partner", "127.0.0.2", protected=True)
    assert write(book, evicted, "ours", OURS)
    assert write(book, evicted, "partner", partner)
    for n in range(14):  # the strangers' share: the store is full
        clock.now += 1
        assert write(book, evicted, f"flood{n}", stranger(n, "127.0.0.2"))
    assert write(book, evicted, "late", stranger(50, "127.0.0.3"))
    assert evicted == ["flood0"]
    # An expired record goes before anyone's live one.
    book._entries["flood5"].expires = clock.now - 1
    assert write(book, evicted, "later", stranger(51, "127.0.0.4"))
    assert evicted[-1] == "flood5"
    # A partner (good standing) at the flood's own address displaces a stranger's record.
    assert write(book, evicted, "partner2", partner)
    assert book.records == 16
    assert "partner" in book and "ours" in book
    assert write(book, evicted, "ours2", OURS)
    assert all(not str(e).startswith(("ours", "partner")) for e in evicted)


def test_the_byte_bound_holds_like_the_count() -> None:
    book, _, evicted = book_of(max_bytes=SIZE * 16, per_peer=100, per_address=100, per_subnet=100)
    for n in range(14):
        assert write(book, evicted, f"r{n}", stranger(n, "127.0.0.2"))
    assert not write(book, evicted, "r14", stranger(14, "127.0.0.2"))
    assert book.bytes == SIZE * 14


def test_a_full_provider_key_lets_a_lighter_subnet_displace_the_heaviest() -> None:
    book, clock, evicted = book_of()
    entries: list[Hashable] = []
    for n in range(19):
        clock.now += 1
        entries.append(f"fake{n}")
        assert write(book, evicted, f"fake{n}", stranger(n, "127.0.0.2"))
    entries.append("honest")
    assert write(book, evicted, "honest", stranger(99, "127.0.0.1"))
    # Another fake of the heaviest subnet displaces nobody; an honest newcomer does.
    assert book.heaviest_of(entries, stranger(20, "127.0.0.2")) is None
    assert book.heaviest_of(entries, stranger(98, "127.0.0.3")) == "fake0"
    assert book.heaviest_of(entries, FETCHED) == "fake0"
