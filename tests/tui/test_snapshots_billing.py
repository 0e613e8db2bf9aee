"""SVG snapshots of the consumer's billing screens at 80x24 and 160x48: the account of a
finished paid job, the submit form with a provider's spec, estimate and lock, and the cancel
dialog of a running paid job. A real embedded engine (fixed identity, no network) answers
all but the records, which are scripted as the engine keeps them (``FakeEngineClient``: see
tests/tui/test_tui_paid_job_walk.py and tests/tui/test_tui_billing.py). Update with
``pytest --snapshot-update`` and look at the pictures before committing them.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from engine.api import EscrowList, GetJob, GetJobLogs, JobLogs, RewardList
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.screens.job_detail import JobDetailScreen
from tests.tui import test_tui_billing as billing
from tests.tui import test_tui_paid_job_walk as walk
from tests.tui.test_snapshots import _quiet, _until, settled

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]


@pytest.mark.parametrize("size", SIZES)
def test_account(snap_compare: Any, engine_client: Engine, size: tuple[int, int]) -> None:
    """The balance and recharges, and the job: spec, machine time, each figure, its hashes."""
    app = NunetApp(client=walk.client_for(engine_client, "consumer"), clock=lambda: walk.NOW)  # type: ignore[arg-type]

    async def read(pilot: Pilot[Any]) -> None:
        await _until(pilot, lambda: getattr(pilot.app.screen, "account", None) is not None)

    assert snap_compare(
        app, terminal_size=size, run_before=settled("AccountScreen", keys=["a"], then=read)
    )


@pytest.mark.parametrize("size", SIZES)
def test_submit_with_a_spec_estimate_and_lock(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    app = NunetApp(client=billing.consumer_client(engine_client), clock=lambda: billing.T0)  # type: ignore[arg-type]

    async def fill(pilot: Pilot[Any]) -> None:
        screen = pilot.app.screen
        await _until(pilot, lambda: bool(getattr(screen, "peers", None)))
        for field, text in (
            ("script_url", "https://example.org/train.py"),
            ("expected_minutes", "30"),
            ("max_minutes", "60"),
            ("budget_ntx", "1"),
        ):
            screen.query_one(f"#{field}", Input).value = text
        await pilot.pause()
        screen.query_one("#script_url", Input).focus()
        await _quiet(pilot)

    assert snap_compare(
        app, terminal_size=size, run_before=settled("SubmitScreen", keys=["s"], then=fill)
    )


@pytest.mark.parametrize("size", SIZES)
def test_cancel_a_running_paid_job(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    job = billing.running_job()
    client = billing.consumer_client(
        engine_client,
        {
            GetJob: job,
            GetJobLogs: JobLogs(job_id=job.job_id),
            RewardList: EscrowList(escrows=(billing.locked_escrow(),)),
        },
    )
    app = NunetApp(client=client, clock=lambda: billing.T0 + 15 * 60)  # type: ignore[arg-type]

    async def cancel(pilot: Pilot[Any]) -> None:
        pilot.app.push_screen(JobDetailScreen(job.job_id))
        await _until(pilot, lambda: getattr(pilot.app.screen, "escrow", None) is not None)
        await _quiet(pilot)
        await pilot.press("x")
        await _until(pilot, lambda: type(pilot.app.screen).__name__ == "ConfirmScreen")

    assert snap_compare(
        app, terminal_size=size, run_before=settled("ConsumerDashboard", then=cancel)
    )
