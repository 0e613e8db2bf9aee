"""Pilot test of the Notebooks screen's keys on a real embedded engine (its store holds the
snapshot tests' notebooks); the commands that need a provider (forward, stop, delete, submit)
get scripted replies (tests/pilot.py FakeEngineClient), so the test sees exactly what the
screen asks for: o forwards the notebook's declared port and opens the URL with its token,
s stops it, d deletes only once confirmed, n submits a notebook spec with a fresh token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from textual.widgets import DataTable, Input

from engine import api
from engine.api import notebooks as nb
from engine.config import Paths
from engine.facade import Engine
from engine.store import Store
from nunet_tui.app import NunetApp
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.screens.help import HelpScreen
from nunet_tui.screens.notebooks import LauncherUrlScreen, NotebooksScreen
from tests.pilot import FakeEngineClient, anyio_backend, on_screen, rows, text_of, until
from tests.tui.test_snapshots_notebooks import LAUNCHER, NOTEBOOKS, NOW, TOKENS

__all__ = ["anyio_backend"]

pytestmark = pytest.mark.anyio
RUNNING, STOPPED = NOTEBOOKS[0], NOTEBOOKS[1]


@pytest.fixture
def notebook_engine(node_home: Paths) -> Iterator[Engine]:
    store = Store(node_home.database)
    for job in NOTEBOOKS:
        store.save_job(job)
    store.close()
    engine = Engine(node_home, network=False).start()
    engine.call_blocking(api.SetMode(mode="consumer"))
    try:
        yield engine
    finally:
        engine.close()


async def test_the_notebook_keys(notebook_engine: Engine) -> None:
    forwards: list[api.TunnelForward] = []

    def forward(command: api.JobForward) -> api.TunnelForward:
        made = api.TunnelForward(
            forward_id="f1",
            job_id=command.job_id,
            local_port=41_000,
            remote_port=command.remote_port,
            url="http://127.0.0.1:41000/",
        )
        forwards.append(made)
        return made

    def submitted(command: api.SubmitJob) -> api.JobInfo:
        return msgspec.structs.replace(
            RUNNING, job_id="0d0e0f101112", state="accepted", spec=command.spec
        )

    client = FakeEngineClient(
        {
            api.ListForwards: lambda c: api.ForwardList(forwards=tuple(forwards)),
            api.JobForward: forward,
            api.StopJob: lambda c: msgspec.structs.replace(RUNNING, state="completed"),
            api.DeleteJobResults: api.Done(message="deleted on its provider"),
            api.SubmitJob: submitted,
        },
        delegate=notebook_engine,
    )
    app = NunetApp(client=client, clock=lambda: NOW)
    opened: list[str] = []
    app.open_url = lambda url, **kw: opened.append(url)  # type: ignore[method-assign]
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.node is not None)
        await pilot.press("b")
        screen = await on_screen(pilot, NotebooksScreen)
        await until(pilot, lambda: len(screen.notebooks) == len(NOTEBOOKS))
        table: DataTable[Any] = screen.query_one("#notebooks-table", DataTable)

        # o on the running one: its declared port forwarded, the URL with its own token.
        await pilot.press("o")
        await until(pilot, lambda: bool(opened))
        (asked,) = [c for c in client.calls if isinstance(c, api.JobForward)]
        assert (asked.job_id, asked.remote_port) == (RUNNING.job_id, 24_811)
        assert opened == [f"http://127.0.0.1:41000/lab?token={TOKENS[0]}"]
        await until(pilot, lambda: "127.0.0.1:41000" in rows(table)[0])
        assert not any(token in " ".join(rows(table)) for token in TOKENS)

        await pilot.press("s")
        await until(pilot, lambda: any(isinstance(c, api.StopJob) for c in client.calls))

        # d asks first: no is nothing; yes deletes the selected one.
        await pilot.press("down", "d")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("n")
        await on_screen(pilot, NotebooksScreen)
        assert not any(isinstance(c, api.DeleteJobResults) for c in client.calls)
        await pilot.press("d")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: any(isinstance(c, api.DeleteJobResults) for c in client.calls))
        (deleted,) = [c for c in client.calls if isinstance(c, api.DeleteJobResults)]
        assert deleted.job_id == STOPPED.job_id

        # n: the launcher's URL, then a notebook spec with a token of its own.
        await pilot.press("n")
        dialog = await on_screen(pilot, LauncherUrlScreen)
        dialog.query_one("#launcher-url", Input).value = LAUNCHER
        await pilot.press("enter")
        await until(pilot, lambda: any(isinstance(c, api.SubmitJob) for c in client.calls))
        (submit,) = [c for c in client.calls if isinstance(c, api.SubmitJob)]
        spec = submit.spec
        assert (spec.script_url, spec.kind, spec.outputs) == (LAUNCHER, "service", ("notebooks",))
        token = spec.env[nb.TOKEN_ENV]
        assert len(token) == 48 and token not in TOKENS
        assert spec.ports == (int(spec.env[nb.PORT_ENV]),)

        await on_screen(pilot, NotebooksScreen)
        await pilot.press("question_mark")
        help_screen = await on_screen(pilot, HelpScreen)
        keys = text_of(help_screen, "#here KeyTable")
        for said in ("Start a notebook", "Forward it", "Stop it", "Delete its files"):
            assert said in keys, keys
