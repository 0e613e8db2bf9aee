"""Resubmit from the job view and the Jobs list (issue 22 §1), against real daemons (the
market of tests/tui/test_tui_jobs.py): ``ctrl+r`` on a finished job asks, submits its spec
again and opens the new job; on a running one it says why not, in one line."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import DataTable

from engine.api import CancelJob, JobInfo, SubmitJob
from engine.control_client import ControlClient
from engine.domain.spec import JobSpec
from nunet_tui.app import NunetApp
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.screens.job_detail import JobDetailScreen
from nunet_tui.screens.jobs import JobsScreen
from tests.daemon_harness import Daemon, daemons
from tests.pilot import anyio_backend, on_screen, until
from tests.tui.test_tui_jobs import SIZE, market, scripts

__all__ = ["anyio_backend", "daemons", "market", "scripts"]

pytestmark = pytest.mark.anyio


def toasts(app: NunetApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


def footer_keys(app: NunetApp) -> set[str]:
    return {b.binding.description for b in app.screen.active_bindings.values() if b.enabled}


@pytest.mark.timeout(180)
async def test_a_finished_job_runs_again_from_its_view_and_the_list(
    market: tuple[Daemon, Daemon, ControlClient], scripts: str
) -> None:
    provider, _, client = market
    spec = JobSpec(
        framework="scikit-learn", script_url=f"{scripts}/slow.py", expected_minutes=1, name="again"
    )
    first: JobInfo = client.call_blocking(SubmitJob(spec=spec), timeout=120)
    app = NunetApp(client=client)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        await pilot.press("j")
        jobs: JobsScreen = await on_screen(pilot, JobsScreen)
        await until(pilot, lambda: jobs.selected_job() is not None)
        # Running: the key is not in the footer, and pressed anyway it says why not.
        assert "Resubmit" not in {
            b.binding.description
            for b in jobs.active_bindings.values()
            if b.enabled and b.binding.show
        }
        await pilot.press("ctrl+r")
        await until(pilot, lambda: any("still" in t for t in toasts(app)))
        assert f"Job {first.job_id} is still" in toasts(app)[-1]
        assert isinstance(app.screen, JobsScreen)  # nothing asked, nothing opened

        await pilot.press("enter")
        detail: JobDetailScreen = await on_screen(pilot, JobDetailScreen)
        await until(pilot, lambda: detail.job is not None and detail.job.state == "running")
        await pilot.press("ctrl+r")
        await until(pilot, lambda: len([t for t in toasts(app) if "still" in t]) == 2)
        assert isinstance(app.screen, JobDetailScreen)

        client.call_blocking(CancelJob(job_id=first.job_id), timeout=90)
        await until(pilot, lambda: detail.job is not None and detail.job.state == "cancelled")
        await until(pilot, lambda: "Resubmit" in footer_keys(app))
        # Asked first; declined, nothing happens.
        await pilot.press("ctrl+r")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("n")
        await on_screen(pilot, JobDetailScreen)
        await pilot.press("ctrl+r")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("y")
        await until(
            pilot,
            lambda: isinstance(app.screen, JobDetailScreen) and app.screen.job_id != first.job_id,
            timeout=60,
        )
        again: JobDetailScreen = app.screen  # type: ignore[assignment]
        assert again.job is not None and again.job.spec == first.spec
        assert again.job.provider == provider.peer_id
        second = again.job.job_id
        await until(pilot, lambda: again.job is not None and again.job.state == "running")
        client.call_blocking(CancelJob(job_id=second), timeout=90)
        await until(pilot, lambda: again.job is not None and again.job.state == "cancelled")

        # From the list: the finished job selected, ^r in its footer, a third job opened.
        await pilot.press("escape")
        jobs = await on_screen(pilot, JobsScreen)
        table: Any = jobs.query_one("#jobs-table", DataTable)
        await until(pilot, lambda: table.row_count == 2)
        table.move_cursor(row=table.get_row_index(first.job_id))
        await until(pilot, lambda: "Resubmit" in footer_keys(app))
        await pilot.press("ctrl+r")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("y")
        await until(
            pilot,
            lambda: (
                isinstance(app.screen, JobDetailScreen)
                and app.screen.job_id not in (first.job_id, second)
            ),
            timeout=60,
        )
        third: JobDetailScreen = app.screen  # type: ignore[assignment]
        client.call_blocking(CancelJob(job_id=third.job_id), timeout=90)
