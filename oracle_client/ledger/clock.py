"""The ledger's notion of now: wall clock plus an offset that tests and demos can move.

Deadlines are POSIX milliseconds in the escrow datum and slots in a transaction's validity
interval; this is the one place that converts between them (slot length 1 s, slot 0 at the
genesis system start).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from oracle_client.ledger.params import SLOT_LENGTH_S, SYSTEM_START


class LedgerClock:
    """Thread-safe: request threads read it while a test thread advances it."""

    def __init__(
        self,
        system_start: int = SYSTEM_START,
        offset_s: float = 0.0,
        time_source: Callable[[], float] = time.time,
    ) -> None:
        self.system_start = system_start
        self._offset_s = float(offset_s)
        self._time = time_source
        self._lock = threading.Lock()

    @property
    def offset_s(self) -> float:
        with self._lock:
            return self._offset_s

    def advance(self, seconds: float) -> None:
        """Move the ledger's time forward (or back, with a negative value): no sleeping in tests."""
        with self._lock:
            self._offset_s += float(seconds)

    def set_offset(self, seconds: float) -> None:
        with self._lock:
            self._offset_s = float(seconds)

    def now(self) -> float:
        """POSIX seconds as the ledger sees them."""
        return self._time() + self.offset_s

    def now_ms(self) -> int:
        return int(self.now() * 1000)

    def slot(self) -> int:
        return int(self.now() - self.system_start) // SLOT_LENGTH_S

    def slot_to_posix_ms(self, slot: int) -> int:
        return (self.system_start + slot * SLOT_LENGTH_S) * 1000

    def posix_ms_to_slot(self, ms: int) -> int:
        """The slot that contains this instant (floor)."""
        return (ms // 1000 - self.system_start) // SLOT_LENGTH_S
