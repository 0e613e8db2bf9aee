"""After r, the cursor stays on the job it was on (Enter opened another job)."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import DataTable

from engine.api import JobInfo, JobList, ListJobs, SetMode
from engine.domain.spec import JobSpec
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.widgets.table_rows import selected_key
from tests.pilot import FakeEngineClient, anyio_backend, until

__all__ = ["anyio_backend"]


def _job(job_id: str, created_at: float) -> JobInfo:
    return JobInfo(
        job_id=job_id,
        role="consumer",
        state="completed",
        provider="p",
        consumer="c",
        spec=JobSpec(framework="scikit-learn", script_url="http://127.0.0.1:9/x.py"),
        created_at=created_at,
    )


@pytest.mark.anyio
async def test_r_keeps_the_cursor_on_the_job(engine_client: Engine) -> None:
    engine_client.call_blocking(SetMode(mode="consumer"))
    jobs = [_job("aaaaaaaaaaaa", 3.0), _job("bbbbbbbbbbbb", 2.0), _job("cccccccccccc", 1.0)]
    client = FakeEngineClient(
        {ListJobs: lambda c: JobList(jobs=tuple(jobs))}, delegate=engine_client
    )
    app = NunetApp(client=client)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        await pilot.press("j")
        await until(pilot, lambda: type(app.screen).__name__ == "JobsScreen")
        screen: Any = app.screen
        table = screen.query_one("#jobs-table", DataTable)
        await until(pilot, lambda: table.row_count == 3)
        await pilot.press("down")
        assert selected_key(table) == "bbbbbbbbbbbb"
        jobs.insert(0, _job("dddddddddddd", 4.0))
        await pilot.press("r")
        await until(pilot, lambda: table.row_count == 4)
        await pilot.pause()
        assert selected_key(table) == "bbbbbbbbbbbb"
