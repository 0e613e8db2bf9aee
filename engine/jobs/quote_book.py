"""Unconfirmed quotes, held for their Confirm: each with its signed offer and quote (the
evidence stored once the Confirm makes the job), dropped at their expiry and bounded per
peer and in all; and a Confirm in flight, whose repeat waits for its answer."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from engine.domain.spec import JobSpec
from engine.jobs import protocol as p

# Unconfirmed quotes held (each keeps its offer, at most p.MAX_REQUEST_BYTES): per peer, all.
QUOTES_PER_PEER = 4
QUOTES_TOTAL = 64


@dataclass
class HeldQuote:
    """A quote waiting for its Confirm, with the signed offer and quote kept as evidence."""

    quote: p.Quote
    spec: JobSpec
    consumer: str
    offer_raw: bytes
    quote_raw: bytes
    # The script as fetched before quoting: the run uses these bytes, so what the consumer
    # locked NTX for is what runs (None: a git source, fetched when the job starts).
    script: bytes | None = None


@dataclass
class QuoteBook:
    """Unconfirmed quotes: dropped at their expiry, bounded per peer and in all."""

    per_peer: int = QUOTES_PER_PEER
    total: int = QUOTES_TOTAL
    _held: dict[str, HeldQuote] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._held)

    def get(self, job_id: str) -> HeldQuote | None:
        return self._held.get(job_id)

    def pop(self, job_id: str) -> HeldQuote | None:
        return self._held.pop(job_id, None)

    def evict_expired(self, now: float) -> int:
        expired = [job_id for job_id, h in self._held.items() if h.quote.expires_at <= now]
        for job_id in expired:
            del self._held[job_id]
        return len(expired)

    def no_room(self, consumer: str, now: float) -> str:
        """Why no new quote can be held for ``consumer`` now ("" when one can)."""
        self.evict_expired(now)
        mine = sum(1 for h in self._held.values() if h.consumer == consumer)
        if mine >= self.per_peer:
            return (
                f"you hold {mine} unconfirmed quotes here already: confirm one or let them "
                "expire, then ask again"
            )
        if len(self._held) >= self.total:
            return "busy: too many unconfirmed quotes here; ask again in a minute"
        return ""

    def add(self, held: HeldQuote) -> None:
        self._held[held.quote.job_id] = held


@dataclass
class ConfirmInFlight:
    """A Confirm whose lock is being checked: a repeat of it waits for its answer instead of
    checking again, and a Release that comes meanwhile makes that answer a refusal."""

    consumer: str
    done: trio.Event = field(default_factory=trio.Event)
    answer: p.Accepted | p.Refusal | None = None
    released: bool = False
