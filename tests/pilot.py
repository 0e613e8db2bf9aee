"""What the TUI tests share: waiting on a Pilot, reading what a screen shows, and
``FakeEngineClient``, an engine client with scripted replies.

Import the ``anyio_backend`` fixture into a test module (``from tests.pilot import
anyio_backend``, listed in its ``__all__``) to run its async tests on asyncio, as Textual does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable
from textual.worker import WorkerCancelled, WorkerFailed

from engine.api import Command, Event, GetJobLogs
from engine.client import EngineClient, EventCallback
from engine.errors import EngineError
from nunet_tui.widgets.key_table import KeyTable


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Textual runs on asyncio; the engine brings its own trio thread


async def until(pilot: Pilot[Any], predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Let the app run until ``predicate()`` holds (engine calls finish in their own time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out; screen is {pilot.app.screen!r}")
        await pilot.pause(0.02)
    await pilot.pause()


async def on_screen(pilot: Pilot[Any], kind: type, timeout: float = 30.0) -> Any:
    """Wait until a ``kind`` screen is on top; that screen."""
    await until(pilot, lambda: isinstance(pilot.app.screen, kind), timeout)
    return pilot.app.screen


async def settle(pilot: Pilot[Any], *groups: str) -> None:
    """Wait for the workers of ``groups`` (not the ones waiting on a screen to close)."""
    groups = groups or ("validate", "submit", "refresh")
    for worker in [worker for worker in pilot.app.workers if worker.group in groups]:
        with contextlib.suppress(WorkerCancelled, WorkerFailed):
            await worker.wait()
    await pilot.pause()


def text_of(screen: Any, selector: str) -> str:
    """What the widget at ``selector`` shows, as plain text (a KeyTable's rows too)."""
    widget = screen.query_one(selector)
    if isinstance(widget, KeyTable):
        return widget.plain_text()
    return str(widget.render())


def rows(table: DataTable[Any]) -> list[str]:
    """A table's rows, each as its cells joined by spaces."""
    return [" ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]


Reply = Any | EngineError | Callable[[Command], Any]


class FakeEngineClient:
    """An EngineClient whose replies to some command types are scripted; every other
    command goes to ``delegate`` (a real engine), or fails as an unscripted EngineError.

    ``replies[type]`` is the reply, an EngineError to raise, or a function of the command.
    ``calls`` records every command in order; ``emit`` delivers an event to subscribers as
    the engine's thread would.
    """

    def __init__(
        self,
        replies: Mapping[type[Command], Reply] | None = None,
        *,
        delegate: EngineClient | None = None,
    ) -> None:
        self.replies: dict[type[Command], Reply] = dict(replies or {})
        self.delegate = delegate
        self.calls: list[Command] = []
        self._callbacks: list[EventCallback] = []
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def embedded(self) -> bool:
        return self.delegate.embedded if self.delegate is not None else True

    def _scripted(self, command: Command) -> Any:
        reply = self.replies[type(command)]
        if isinstance(reply, EngineError):
            raise reply
        return reply(command) if callable(reply) else reply

    async def call(self, command: Command) -> Any:
        self.calls.append(command)
        if type(command) in self.replies:
            return self._scripted(command)
        if self.delegate is None:
            raise EngineError("not_scripted", f"no scripted reply to {type(command).__name__}")
        return await self.delegate.call(command)

    def call_blocking(self, command: Command, timeout: float = 30.0) -> Any:
        self.calls.append(command)
        if type(command) in self.replies:
            return self._scripted(command)
        if self.delegate is None:
            raise EngineError("not_scripted", f"no scripted reply to {type(command).__name__}")
        return self.delegate.call_blocking(command, timeout)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        self._callbacks.append(callback)
        if self.delegate is not None and self._unsubscribe is None:
            self._unsubscribe = self.delegate.subscribe(self.emit)

        def unsubscribe() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return unsubscribe

    def emit(self, event: Event) -> None:
        for callback in list(self._callbacks):
            callback(event)

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None


def count_log_reads(engine: Any, *, newest: bool) -> list[GetJobLogs]:
    """Every ``GetJobLogs`` asked of ``engine`` from now on whose ``newest`` is ``newest``: the
    dashboard's running-jobs panel reads tails (newest), the job view reads pages (not)."""
    reads: list[GetJobLogs] = []
    call = engine.call

    async def counting(command: Any) -> Any:
        if isinstance(command, GetJobLogs) and command.newest is newest:
            reads.append(command)
        return await call(command)

    engine.call = counting
    return reads
