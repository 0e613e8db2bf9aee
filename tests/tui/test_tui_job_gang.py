"""A gang's slot in the TUI's job view (issue 25 §2) at 80x24: its rank of the gang, and each
rank's job, provider and state as `job show` gives them (the provider's reasons literally)."""

from __future__ import annotations

import pytest

from engine import api
from engine.api import GetJob, GetJobLogs, GetJobUsage, JobLogs, JobUsage, SetMode
from engine.domain.gang import slot_spec
from engine.domain.spec import JobSpec, StepSpec
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.screens.job_detail import JobDetailScreen
from tests.pilot import FakeEngineClient, anyio_backend, on_screen, text_of, until

__all__ = ["anyio_backend"]


def gang_job() -> api.JobInfo:
    spec = JobSpec(
        framework="pytorch",
        script_url="https://example.org/train.py",
        subtasks=(StepSpec(name="train", replicas=2, distributed=True),),
    )
    return api.JobInfo(
        job_id="j0", role="consumer", state="cancelled", provider="P" * 52, consumer="c" * 20,
        spec=slot_spec(spec, "0a1b2c", 0), updated_at=910.0,
        gang=(
            api.GangMember(rank=0, job_id="j0", provider="P" * 52, state="cancelled"),
            api.GangMember(rank=1, job_id="j1", provider="Q" * 52, state="failed",
                           reason="step 'train' failed: [bold]boom[/]"),
        ),
    )  # fmt: skip


@pytest.mark.anyio
async def test_the_job_view_shows_the_gang_at_80x24(engine_client: Engine) -> None:
    engine_client.call_blocking(SetMode(mode="consumer"))
    client = FakeEngineClient(
        {GetJob: gang_job(), GetJobLogs: JobLogs(job_id="j0"), GetJobUsage: JobUsage(job_id="j0")},
        delegate=engine_client,
    )
    app = NunetApp(client=client, clock=lambda: 910.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        app.push_screen(JobDetailScreen("j0"))
        detail: JobDetailScreen = await on_screen(pilot, JobDetailScreen)
        await until(pilot, lambda: "rank 0 of 2" in text_of(detail, "#job-facts"))
        shown = text_of(detail, "#job-facts")
        assert "0a1b2c" in shown and "j1" in shown and "failed" in shown
        assert "[bold]boom[/]" in shown  # the provider's text, literally
