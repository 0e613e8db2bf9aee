"""A job's steps in the TUI (issue 25 §1): the submit form's Steps field ("name x N: command",
"; " between steps) at 80x24, its problems under it, the SubmitJob it sends; and the job
view's rows, one a step, each replica's state and machine time."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from textual.widgets import Input

from engine import api
from engine.api import (
    GetJob,
    GetJobLogs,
    GetJobUsage,
    JobChanged,
    JobInfo,
    JobLogs,
    JobUsage,
    SetMode,
    SubmitJob,
)
from engine.domain.spec import JobSpec, StepSpec
from engine.errors import EngineError
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.screens.job_detail import JobDetailScreen
from nunet_tui.widgets.job_facts import facts
from tests.pilot import FakeEngineClient, anyio_backend, on_screen, text_of, until
from tests.tui.test_tui_jobs import _submit_form

__all__ = ["anyio_backend"]


@pytest.mark.anyio
async def test_the_form_takes_steps_and_names_a_bad_one(engine_client: Engine) -> None:
    sent: list[SubmitJob] = []

    def submit(command: SubmitJob) -> JobInfo:
        sent.append(command)
        raise EngineError("no_match", "no provider can run this job")

    client = FakeEngineClient({SubmitJob: submit}, delegate=engine_client)
    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=client)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _submit_form(app, pilot)
        await pilot.press(*"http://127.0.0.1:9/train.py")
        steps = screen.query_one("#subtasks", Input)
        steps.focus()
        await pilot.press(*"prep: python3 prep.py; train x 99")
        await until(pilot, lambda: "subtasks[2].replicas" in text_of(screen, "#subtasks-problems"))
        assert "1 to 64, not 99" in text_of(screen, "#subtasks-problems")
        await pilot.press(*["backspace"] * 2, "2")
        await until(pilot, lambda: not text_of(screen, "#subtasks-problems").strip())
        await pilot.press("ctrl+s")
        await until(pilot, lambda: bool(sent))
    assert sent[0].spec.subtasks == (
        StepSpec(name="prep", command="python3 prep.py"),
        StepSpec(name="train", replicas=2),
    )


def steps_job(**extra: Any) -> JobInfo:
    spec = JobSpec(
        framework="scikit-learn",
        script_url="https://example.org/t.py",
        subtasks=(StepSpec(name="prep"), StepSpec(name="train", replicas=2)),
    )
    job = api.JobInfo(
        job_id="j1", role="consumer", state="running", provider="p" * 20, consumer="c" * 20,
        spec=spec,
        steps=(
            api.StepInfo(name="prep", replicas=(
                api.ReplicaInfo(state="done", started_at=900.0, ended_at=904.0),)),
            api.StepInfo(name="train", replicas=(
                api.ReplicaInfo(state="running", started_at=904.0),
                api.ReplicaInfo(state="failed", started_at=904.0, ended_at=906.0,
                                reason="exit code 3: [bold]boom[/]"),
            )),
        ),
        updated_at=910.0,
    )  # fmt: skip
    return msgspec.structs.replace(job, **extra)


def test_the_job_view_shows_each_step_and_replica() -> None:
    rows: dict[str, Any] = dict(facts(steps_job(), now=910.0))
    assert rows["Steps"] == "2 steps · 1 of 3 replicas done"
    assert rows[" prep"] == "#1 done 4.0 s"
    # Running: its machine time so far; failed: why, literally (no markup).
    assert rows[" train"] == "#1 running 6.0 s · #2 failed 2.0 s · exit code 3: [bold]boom[/]"


@pytest.mark.anyio
async def test_the_job_view_follows_its_replicas_at_80x24(engine_client: Engine) -> None:
    engine_client.call_blocking(SetMode(mode="consumer"))
    client = FakeEngineClient(
        {
            GetJob: steps_job(),
            GetJobLogs: JobLogs(job_id="j1"),
            GetJobUsage: JobUsage(job_id="j1"),
        },
        delegate=engine_client,
    )
    app = NunetApp(client=client, clock=lambda: 910.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        app.push_screen(JobDetailScreen("j1"))
        detail: JobDetailScreen = await on_screen(pilot, JobDetailScreen)
        await until(pilot, lambda: "1 of 3 replicas done" in text_of(detail, "#job-facts"))
        shown = text_of(detail, "#job-facts")
        assert "#1 running" in shown and "#2 failed 2.0 s" in shown
        assert "[bold]boom[/]" in shown  # the provider's text, literally
        # The provider's next Update: the running replica is done.
        done = steps_job().steps[1].replicas[0]
        train = msgspec.structs.replace(
            steps_job().steps[1],
            replicas=(
                msgspec.structs.replace(done, state="done", ended_at=909.0),
                steps_job().steps[1].replicas[1],
            ),
        )
        client.emit(JobChanged(at=911.0, job=steps_job(steps=(steps_job().steps[0], train))))
        await until(pilot, lambda: "2 of 3 replicas done" in text_of(detail, "#job-facts"))
        assert "#1 done 5.0 s" in text_of(detail, "#job-facts")
