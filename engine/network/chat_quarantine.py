"""Chat from peers whose request was not accepted: held in memory, bounded, never on disk.

Before issue 21 every ``ChatText`` from any peer was written to the database as it came:
10 fresh identities at the per-peer rate grew it by 95 MB in 100 s. Now a message from a
peer we have no accepted chat with waits here, shown as its request's preview, and is
written only when the user accepts (joins the request, or writes to the peer). The bounds
are per peer and in all, in messages and in bytes; past one, the oldest message goes first
(of that peer, or of everyone), so the newest request still shows what it says.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

PER_PEER_MESSAGES = 16
PER_PEER_BYTES = 16 << 10
TOTAL_MESSAGES = 1000
TOTAL_BYTES = 1 << 20


@dataclass(eq=False)
class Held:
    peer_id: str
    conversation: str
    seq: int
    text: str
    at: float
    size: int
    dropped: bool = field(default=False)


class ChatQuarantine:
    def __init__(
        self,
        per_peer_messages: int = PER_PEER_MESSAGES,
        per_peer_bytes: int = PER_PEER_BYTES,
        total_messages: int = TOTAL_MESSAGES,
        total_bytes: int = TOTAL_BYTES,
    ) -> None:
        self.per_peer_messages = per_peer_messages
        self.per_peer_bytes = per_peer_bytes
        self.total_messages = total_messages
        self.total_bytes = total_bytes
        self._peers: dict[str, deque[Held]] = {}
        self._peer_bytes: dict[str, int] = {}
        # Arrival order across peers; entries dropped per peer are skipped lazily (and the
        # deque compacted when they outnumber the live ones, so it stays bounded too).
        self._order: deque[Held] = deque()
        self.count = 0
        self.bytes = 0
        self.dropped = 0

    def add(self, peer_id: str, conversation: str, seq: int, text: str, at: float) -> None:
        size = len(text.encode()) + len(conversation) + 64  # the text and what keeps it
        held = Held(peer_id, conversation, seq, text, at, size)
        self._peers.setdefault(peer_id, deque()).append(held)
        self._peer_bytes[peer_id] = self._peer_bytes.get(peer_id, 0) + size
        self._order.append(held)
        self.count += 1
        self.bytes += size
        mine = self._peers[peer_id]
        while len(mine) > self.per_peer_messages or self._peer_bytes[peer_id] > self.per_peer_bytes:
            self._drop(mine[0])
        while self.count > self.total_messages or self.bytes > self.total_bytes:
            oldest = self._order[0]
            if oldest.dropped:
                self._order.popleft()
            else:
                self._drop(oldest)
        if len(self._order) > 2 * self.count + 64:
            self._order = deque(h for h in self._order if not h.dropped)

    def _drop(self, held: Held) -> None:
        self._remove(held)
        self.dropped += 1

    def _remove(self, held: Held) -> None:
        mine = self._peers[held.peer_id]
        mine.remove(held)  # the oldest of its peer: at the left, found at once
        held.dropped = True
        self.count -= 1
        self.bytes -= held.size
        self._peer_bytes[held.peer_id] -= held.size
        if not mine:
            del self._peers[held.peer_id]
            del self._peer_bytes[held.peer_id]

    def messages(self, peer_id: str) -> list[Held]:
        """What ``peer_id`` sent, oldest first (kept here)."""
        return list(self._peers.get(peer_id, ()))

    def take(self, peer_id: str) -> list[Held]:
        """What ``peer_id`` sent, oldest first, and forget it (the user accepted)."""
        taken = self.messages(peer_id)
        for held in taken:
            self._remove(held)
        return taken

    def preview(self, peer_id: str, lines: int = 3, chars: int = 200) -> tuple[str, ...]:
        """The newest few messages, shortened: what the request shows."""
        return tuple(h.text[:chars] for h in self.messages(peer_id)[-lines:])
