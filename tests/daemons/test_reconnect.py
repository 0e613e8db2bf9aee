"""An attached client (the TUI on a daemon) sees its daemon go at once and follows it back.

Against a real daemon process: killed with SIGKILL, stopped with SIGTERM, then started again on
the same home. Before: the attached TUI still read "online · ready" 18 s after the daemon
stopped, and never reconnected.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from engine import api
from engine.connect import open_client
from engine.control_client import DAEMON_GONE
from engine.errors import EngineError
from engine.reconnect import MAX_RETRY_S, ReconnectingClient, backoff
from nunet_tui.app import NunetApp
from nunet_tui.widgets.node_header import NodeHeader
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.pilot import anyio_backend, until

__all__ = ["anyio_backend", "daemons"]


def test_the_backoff_doubles_from_a_quarter_second_up_to_ten() -> None:
    assert [backoff(n) for n in range(8)] == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff(10_000) == MAX_RETRY_S


class Events:
    def __init__(self) -> None:
        self.seen: list[api.Event] = []
        self.lock = threading.Lock()

    def __call__(self, event: api.Event) -> None:
        with self.lock:
            self.seen.append(event)

    def connections(self) -> list[bool]:
        with self.lock:
            return [e.online for e in self.seen if isinstance(e, api.DaemonConnection)]

    def modes(self) -> list[str]:
        with self.lock:
            return [e.mode for e in self.seen if isinstance(e, api.ModeChanged)]


@pytest.mark.parametrize("kill", [True, False], ids=["sigkill", "sigterm"])
def test_a_daemon_that_goes_is_noticed_at_once_and_followed_back(
    daemons: Callable[..., Daemon], kill: bool
) -> None:
    daemon = daemons("node", 11)
    client = open_client(daemon.home, attach=True, reconnect=True)
    assert isinstance(client, ReconnectingClient)
    events = Events()
    client.subscribe(events)
    try:
        assert client.call_blocking(api.GetInfo()).daemon
        daemon.stop(kill=kill)
        gone_at = time.monotonic()
        wait_for(lambda: events.connections() == [False], "the loss was never told", 5)
        assert time.monotonic() - gone_at < 2.0  # at once, not at the next poll
        with pytest.raises(EngineError) as raised:
            client.call_blocking(api.GetInfo())
        assert raised.value.code == DAEMON_GONE
        assert "reconnecting (next try in" in raised.value.message
        daemon.start()  # the same home, a new process
        wait_for(lambda: events.connections() == [False, True], "never reconnected", 30)
        assert client.call_blocking(api.GetInfo()).daemon
        # Events flow again, on the new connection.
        client.call_blocking(api.SetMode(mode="consumer"))
        wait_for(lambda: "consumer" in events.modes(), "no event after reconnecting", 10)
    finally:
        client.close()


def test_a_closed_client_stops_trying(daemons: Callable[..., Daemon]) -> None:
    daemon = daemons("node", 12)
    client = open_client(daemon.home, attach=True, reconnect=True)
    events = Events()
    client.subscribe(events)
    daemon.stop(kill=True)
    wait_for(lambda: events.connections() == [False], "the loss was never told", 5)
    client.close()
    daemon.start()
    # The reconnecting thread is woken by close() and ends without trying again.
    wait_for(
        lambda: not any(t.name == "nunet-reconnect" for t in threading.enumerate()),
        "the reconnecting thread outlived close()",
        5,
    )
    assert events.connections() == [False]
    with pytest.raises(EngineError):
        client.call_blocking(api.GetInfo())


@pytest.mark.anyio
async def test_the_attached_tui_shows_the_daemon_offline_at_once_and_ready_again(
    daemons: Callable[..., Daemon],
) -> None:
    daemon = daemons("node", 13)
    client = open_client(daemon.home, attach=True, reconnect=True)
    client.call_blocking(api.SetMode(mode="consumer"))
    app = NunetApp(client=client)
    notices: list[str] = []
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.engine_state == "ready" and app.node is not None)
            original: Any = app.notify

            def noting(message: str, **kwargs: Any) -> None:
                notices.append(message)
                original(message, **kwargs)

            app.notify = noting  # type: ignore[method-assign]
            header = app.screen.query_one(NodeHeader)
            daemon.stop(kill=True)
            await until(pilot, lambda: app.engine_state == "offline", timeout=5)
            engine_text = str(header.query_one("#engine").render())
            assert "daemon offline · reconnecting" in engine_text
            assert any("The daemon went away" in n for n in notices), notices
            daemon.start()
            await until(pilot, lambda: app.engine_state == "ready", timeout=30)
            await until(pilot, lambda: "Reconnected to the daemon" in notices, timeout=5)
            assert "daemon" in str(header.query_one("#engine").render())
    finally:
        client.close()
