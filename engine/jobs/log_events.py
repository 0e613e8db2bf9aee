"""A job's new log lines as ``JobLogEvent``s, batched: the provider side's live log.

The consumer side emits one event per signed Update it receives (already batched by its
provider). On the provider the lines come from the executor's pump, a batch whenever the
job printed something, which for a chatty job is hundreds of times a second. Every event
crosses to each subscriber (the TUI's ``post_message``, a control client's queue of at
most ``EVENT_BACKLOG`` events, which disconnects one that falls behind), so the lines are
collected here and sent at most once every ``BATCH_S`` per job: a job printing ten
thousand lines a second costs five events a second, whatever its rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Final

import trio

from engine import api

BATCH_S: Final = 0.2  # at most one event per job this often
MAX_EVENT_LINES: Final = 20_000  # lines per event (a signed Update carries as many)


class LogEvents:
    """Collects one job's new lines (``add``) and emits them (``run``) in ``JobLogEvent``s,
    oldest first, at most one batch per ``interval``; ``close`` sends the rest and ends
    ``run``. A line is sent once, in the order it was added."""

    def __init__(
        self,
        emit: Callable[[api.Event], None],
        job_id: str,
        *,
        interval: float = BATCH_S,
    ) -> None:
        self._emit = emit
        self.job_id = job_id
        self.interval = interval
        self._pending: list[api.JobLogLine] = []
        self._closed = False
        self._wake = trio.Event()

    def add(self, lines: Iterable[api.JobLogLine]) -> None:
        self._pending.extend(lines)
        if self._pending:
            self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    def flush(self) -> None:
        """Emit what is pending now (in events of at most ``MAX_EVENT_LINES`` lines)."""
        pending, self._pending = self._pending, []
        for start in range(0, len(pending), MAX_EVENT_LINES):
            lines = tuple(pending[start : start + MAX_EVENT_LINES])
            self._emit(api.JobLogEvent(at=time.time(), job_id=self.job_id, lines=lines))

    async def run(self) -> None:
        """Send batches until ``close`` (then the last one). A cancelled run loses only
        events: the lines are in the job's log, where a view reads any gap."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            self.flush()
            if self._closed:
                return
            await trio.sleep(self.interval)  # what arrives meanwhile waits for the next batch
