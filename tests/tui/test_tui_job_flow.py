"""The job view's data flow: a provider-side job's log lines arrive as events (nothing
polls), and every place that opens a job goes through one path (``OpenJob``, handled by the
app, the only code that builds a ``JobDetailScreen``).

Pilot tests on a real embedded engine without the network, its jobs stored as in the
provider snapshots; the new lines are written on the engine's own thread and emitted by the
same ``LogEvents`` the provider's log pump uses."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.api import JobLogLine
from engine.facade import Engine
from engine.jobs.log_events import LogEvents
from nunet_tui.app import NunetApp
from nunet_tui.messages import OpenJob
from nunet_tui.screens.job_detail import JobDetailScreen
from nunet_tui.widgets.job_log import JobLogView
from nunet_tui.widgets.job_log_panel import JobLogPanel
from tests.pilot import anyio_backend, count_log_reads, on_screen, until
from tests.tui.test_snapshots_provider_jobs import (
    FINISHED,
    NOW,
    RUNNING,
    TRAIN_LOG,
    provider_engine,
)

__all__ = ["anyio_backend", "provider_engine"]

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


class RecordingApp(NunetApp):
    """Notes every ``OpenJob`` the app handles (the app's own handler still runs)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.opened: list[OpenJob] = []

    def on_open_job(self, message: OpenJob) -> None:
        self.opened.append(message)


async def test_a_provider_side_jobs_new_lines_reach_its_view_as_events_not_polls(
    provider_engine: Callable[..., Engine],
) -> None:
    engine = provider_engine([(RUNNING, TRAIN_LOG)])
    reads = count_log_reads(engine, newest=False)
    app = NunetApp(client=engine, clock=lambda: NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")
        app.post_message(OpenJob(RUNNING.job_id))
        detail: JobDetailScreen = await on_screen(pilot, JobDetailScreen)
        panel = detail.query_one(JobLogPanel)
        view = detail.query_one(JobLogView)
        await until(pilot, lambda: panel.loaded and view.total == len(TRAIN_LOG))
        assert detail.job is not None and detail.job.role == "provider"
        backlog_reads = len(reads)
        # A running job on the provider's own node: nothing reads its log on a timer (the
        # view used to, twice a second). Only a wait can show that nothing happens.
        await pilot.pause(1.2)
        assert len(reads) == backlog_reads

        # The provider's pump: lines into the job's log, and out as batched events.
        joblog = engine.node.jobs().provider.job_log(RUNNING.job_id)
        events = LogEvents(engine.node.emit, RUNNING.job_id)
        fresh = [
            JobLogLine(seq=len(TRAIN_LOG) + i, stream="stdout", text=f"[epoch {38 + i}/100]", at=0)
            for i in range(3)
        ]

        def pump() -> None:
            events.add(joblog.append(fresh))
            events.flush()

        engine._thread.run_sync_soon(pump)  # type: ignore[union-attr]
        await until(pilot, lambda: view.total == len(TRAIN_LOG) + 3)
        assert list(view.lines[-3:]) == ["[epoch 38/100]", "[epoch 39/100]", "[epoch 40/100]"]
        assert len(reads) == backlog_reads  # the lines came as an event: nothing was read
        assert panel.last_seq == len(TRAIN_LOG) + 2


async def test_the_dashboard_and_the_jobs_list_open_a_job_through_open_job(
    provider_engine: Callable[..., Engine],
) -> None:
    engine = provider_engine([(RUNNING, TRAIN_LOG), *((job, []) for job in FINISHED)])
    app = RecordingApp(client=engine, clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")
        await until(pilot, lambda: app.screen.query_one("#recent-list").option_count > 0)  # type: ignore[attr-defined]
        await pilot.press("enter")
        detail: JobDetailScreen = await on_screen(pilot, JobDetailScreen)
        assert [m.job_id for m in app.opened] == [detail.job_id] == [RUNNING.job_id]
        assert not app.opened[0].replace

        await pilot.press("escape")
        await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")
        await pilot.press("j")
        await until(pilot, lambda: type(app.screen).__name__ == "JobsScreen")
        jobs: Any = app.screen
        await until(pilot, lambda: RUNNING.job_id in jobs.jobs)
        await pilot.press("enter")
        await on_screen(pilot, JobDetailScreen)
        assert len(app.opened) == 2 and app.opened[1].job is not None  # what the list knew
        assert len(app.screen_stack) == 3  # dashboard, jobs, the job: on top (Esc comes back)


async def test_replace_puts_the_new_jobs_view_in_place_of_the_one_on_top(
    provider_engine: Callable[..., Engine],
) -> None:
    """What submitting and resubmitting ask for: the form's (or the old job's) place."""
    engine = provider_engine([(RUNNING, TRAIN_LOG), *((job, []) for job in FINISHED)])
    app = NunetApp(client=engine, clock=lambda: NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")
        app.post_message(OpenJob(RUNNING.job_id))
        first: JobDetailScreen = await on_screen(pilot, JobDetailScreen)
        depth = len(app.screen_stack)
        first.post_message(OpenJob(FINISHED[0].job_id, FINISHED[0], replace=True))
        await until(pilot, lambda: getattr(app.screen, "job_id", "") == FINISHED[0].job_id)
        assert len(app.screen_stack) == depth


def test_only_the_app_builds_a_job_view() -> None:
    """Screens and widgets post OpenJob; none of them builds the screen itself."""
    builders = []
    for path in sorted((ROOT / "nunet_tui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            called = node.func if isinstance(node, ast.Call) else None
            if isinstance(called, ast.Name) and called.id == "JobDetailScreen":
                builders.append(path.relative_to(ROOT).as_posix())
    assert builders == ["nunet_tui/app.py"]
