"""The job view's live usage line (issue 22 §3): CPU, RAM and GPU sparklines with the latest
figures, fed by ``GetJobUsage`` and by the job's own latest sample (``JobChanged``); waiting
before the first sample, no GPU part for a job without one, gone once the job ended, and
within 80 columns. A real embedded engine answers everything but the job and its samples
(scripted with ``FakeEngineClient``)."""

from __future__ import annotations

import msgspec
import pytest

from engine.api import (
    GetJob,
    GetJobLogs,
    GetJobUsage,
    JobChanged,
    JobInfo,
    JobLogs,
    JobUsage,
    SetMode,
    UsageSample,
)
from engine.domain.spec import JobSpec
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.screens.job_detail import JobDetailScreen
from nunet_tui.viewmodels.usage import usage_line
from nunet_tui.widgets.job_usage import LiveUsage
from tests.pilot import FakeEngineClient, anyio_backend, on_screen, until

__all__ = ["anyio_backend"]

pytestmark = pytest.mark.anyio
T0 = 1_750_000_000.0


def job(**extra: object) -> JobInfo:
    base = JobInfo(
        job_id="5e6f7a8b9c0d",
        role="consumer",
        state="running",
        provider="12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW",
        consumer="12D3KooWme",
        spec=JobSpec(script_url="https://example.org/train.py", framework="pytorch", name="t"),
        executor="docker",
        created_at=T0 - 60,
        updated_at=T0,
        started_at=T0 - 30,
    )
    return msgspec.structs.replace(base, **extra)


def sample(at: float, cores: float, ram: int, gpu: float | None = None) -> UsageSample:
    gpus = 0 if gpu is None else 1
    return UsageSample(at=at, cpu_cores=cores, ram_mb=ram, ram_limit_mb=4096, gpus=gpus,
                       gpu_percent=gpu, gpu_mem_mb=None if gpu is None else 5222)  # fmt: skip


def usage_text(screen: JobDetailScreen) -> str:
    widget = screen.query_one(LiveUsage)
    return str(widget.render()) if widget.display else ""


async def test_the_sparklines_follow_the_provider_s_samples(engine_client: Engine) -> None:
    engine_client.call_blocking(SetMode(mode="consumer"))
    history = [sample(T0 - 20 + i * 5, 0.5 + i * 0.3, 700 + i * 40, 40.0 + i * 8) for i in range(4)]
    usage = JobUsage(job_id=job().job_id, samples=())
    client = FakeEngineClient(
        {
            GetJob: job(),
            GetJobLogs: JobLogs(job_id=job().job_id),
            GetJobUsage: lambda _: usage,
        },
        delegate=engine_client,
    )
    app = NunetApp(client=client, clock=lambda: T0)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        app.push_screen(JobDetailScreen(job().job_id))
        detail: JobDetailScreen = await on_screen(pilot, JobDetailScreen)
        # Running, nothing sampled yet.
        await until(pilot, lambda: "waiting for the provider's first sample" in usage_text(detail))
        # The engine's history arrives: the latest figures, a sparkline before each.
        usage = JobUsage(job_id=job().job_id, samples=tuple(history), interval_s=5.0)
        detail.query_one(LiveUsage).ask()
        await until(pilot, lambda: "1.4 cores" in usage_text(detail))
        shown = usage_text(detail)
        assert "RAM" in shown and "820 MB of 4,096" in shown and "GPU" in shown
        assert "64 % · 5.1 GB" in shown
        assert any(block in shown for block in "▁▂▃▄▅▆▇█")
        assert len(shown) <= 78  # one line inside the screen's padding at 80 columns
        # A newer sample in the job's own record (a JobChanged) is added at once.
        newer = job(usage=sample(T0 + 5, 2.0, 900, 90.0))
        client.emit(JobChanged(at=T0 + 5, job=newer))
        await until(pilot, lambda: "2.0 cores" in usage_text(detail))
        assert "900 MB of 4,096" in usage_text(detail) and "90 %" in usage_text(detail)
        assert len(detail.query_one(LiveUsage).samples) == 5
        # Once the job ended, the live line goes.
        client.emit(JobChanged(at=T0 + 6, job=job(state="completed", finished_at=T0 + 6)))
        await until(pilot, lambda: not detail.query_one(LiveUsage).display)


async def test_a_job_without_gpus_has_no_gpu_part(engine_client: Engine) -> None:
    engine_client.call_blocking(SetMode(mode="consumer"))
    running = job(usage=sample(T0, 1.4, 812))
    client = FakeEngineClient(
        {
            GetJob: running,
            GetJobLogs: JobLogs(job_id=running.job_id),
            GetJobUsage: JobUsage(job_id=running.job_id),  # after a restart: no history
        },
        delegate=engine_client,
    )
    app = NunetApp(client=client, clock=lambda: T0)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        app.push_screen(JobDetailScreen(running.job_id))
        detail: JobDetailScreen = await on_screen(pilot, JobDetailScreen)
        await until(pilot, lambda: "1.4 cores" in usage_text(detail))
        shown = usage_text(detail)
        assert "RAM" in shown and "812 MB of 4,096" in shown and "GPU" not in shown


def test_the_usage_line_of_job_show() -> None:
    assert usage_line(None) == "waiting for the provider's first sample"
    assert usage_line(sample(T0, 1.44, 812)) == "CPU 1.4 cores · RAM 812 MB of 4,096 · no GPU"
    assert (
        usage_line(sample(T0, 1.4, 812, 63.0))
        == "CPU 1.4 cores · RAM 812 MB of 4,096 · GPU 63 % · 5.1 GB"
    )


def test_job_show_has_the_usage_line_while_the_job_runs() -> None:
    from nunet_tui.cli.job_output import _detail

    assert "  usage     CPU 1.4 cores · RAM 812 MB of 4,096 · no GPU" in _detail(
        job(usage=sample(T0, 1.4, 812))
    )
    assert "  usage     waiting for the provider's first sample" in _detail(job())
    assert "usage" not in _detail(job(state="completed", usage=sample(T0, 1.4, 812)))
