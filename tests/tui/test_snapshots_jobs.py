"""SVG snapshots of the job screens at 80x24 and 120x40, on a real embedded engine.

The jobs are written into the node's store (and their logs into the node's job folders)
before the engine starts, with fixed times; the app's clock is pinned, so "started 10 min
ago" and durations are the same on every run. The submit form uses the demo's example jobs
(examples/jobs/*/job.toml) as presets. Update with ``pytest --snapshot-update`` and look at
the pictures before committing them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from textual.pilot import Pilot

from engine.api import (
    JobInfo,
    JobLogLine,
    JobMetering,
    SetMode,
    SubmitJob,
    SubmitProgress,
    UsageSample,
)
from engine.config import Paths
from engine.domain.spec import JobSpec
from engine.jobs.joblog import JobLog
from engine.store import Store
from nunet_tui.app import NunetApp
from tests.tui.test_snapshots import (
    SIZES,
    EngineFactory,
    _quiet,
    _until,
    host_engine,
    settled,
)

__all__ = ["host_engine"]

T0 = 1_750_000_000.0
NOW = T0 + 1_800
PROVIDER = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW"
OTHER = "12D3KooWRWcUSHYQhJjq4z1S8u5iEHoYwqHW6dFCzXvL1b8Ztq2a"
SCRIPTS = "http://127.0.0.1:8765/"
EXAMPLES = {
    "scripts_url": SCRIPTS,
    "examples": {"iris": "", "pytorch_checkpoint": "", "tensor_shape_error": ""},
}
IRIS_LOG = [
    "training a decision tree on 105 samples, testing on 45",
    "accuracy: 0.9333",
    "classification report:",
    "              precision    recall  f1-score   support",
    "",
    "      setosa       1.00      1.00      1.00        15",
    "  versicolor       0.88      0.93      0.90        15",
    "   virginica       0.93      0.87      0.90        15",
    "",
    "confusion matrix:",
    "[[15  0  0]",
    " [ 0 14  1]",
    " [ 0  2 13]]",
    "results written to outputs/metrics.json and outputs/report.txt",
]
FAIL_LOG = [
    "building tensors a (5, 2) and b (3, 2)",
    "[bold red]not markup[/] and \x1b[2J stay literal",
    "Traceback (most recent call last):",
    '  File "/workspace/fail.py", line 9, in <module>',
    "    c = a + b",
    "        ~~^~~",
    "RuntimeError: The size of tensor a (5) must match the size of tensor b (3) "
    "at non-singleton dimension 0",
]
EPOCH = "[epoch {0}] loss {1:.3f} acc {2:.2f}"
TRAIN_LOG = [EPOCH.format(e, 1.2 - e * 0.09, 0.41 + e * 0.04) for e in range(1, 4)]
TRAIN_LOG += ["resumed from checkpoint 2"]
TRAIN_LOG += [EPOCH.format(e, 1.2 - e * 0.09, 0.41 + e * 0.04) for e in range(3, 7)]


def _spec(name: str, script: str, framework: str, **extra: Any) -> JobSpec:
    fields: dict[str, Any] = {"device": "cpu", "tier": "low", "expected_minutes": 5, **extra}
    return JobSpec(name=name, script_url=SCRIPTS + script, framework=framework, **fields)


JOBS = [
    (
        JobInfo(
            job_id="51c0a1b2c3d4",
            role="consumer",
            state="completed",
            provider=PROVIDER,
            consumer="self",
            spec=_spec("iris decision tree", "iris/train.py", "scikit-learn"),
            exit_code=0,
            price_units_hour=600_000,
            estimate_units=20_000,
            executor="process",
            created_at=T0,
            started_at=T0 + 1,
            finished_at=T0 + 5,
            updated_at=T0 + 5,
            log_lines=len(IRIS_LOG),
            metering=JobMetering(
                wall_s=4.2, cpu_s=3.1, mticks=7.8, ram_mb_s=412, peak_ram_mb=118, cost_units=700
            ),
            results_sha256="9f2c4e1a" * 8,
            results_size=2_048,
            # Already fetched: an engine on the network would otherwise try to fetch it from
            # a provider that is not there.
            results_dir="/var/lib/nunet/jobs/51c0a1b2c3d4/results.tar.gz",
        ),
        IRIS_LOG,
    ),
    (
        JobInfo(
            job_id="0e9b77aa12f0",
            role="consumer",
            state="failed",
            provider=PROVIDER,
            consumer="self",
            spec=_spec("tensor shape error", "tensor_shape_error/fail.py", "pytorch"),
            reason="RuntimeError: The size of tensor a (5) must match the size of tensor b (3)",
            exit_code=1,
            price_units_hour=600_000,
            estimate_units=10_000,
            executor="process",
            created_at=T0 + 60,
            started_at=T0 + 61,
            finished_at=T0 + 63,
            updated_at=T0 + 63,
            log_lines=len(FAIL_LOG),
            metering=JobMetering(
                wall_s=2.0, cpu_s=1.4, mticks=3.5, ram_mb_s=160, peak_ram_mb=80, cost_units=300
            ),
        ),
        FAIL_LOG,
    ),
    (
        JobInfo(
            job_id="7f3a90c1d2e3",
            role="consumer",
            state="running",
            provider=PROVIDER,
            consumer="self",
            spec=_spec("pytorch checkpointed training", "pytorch_checkpoint/train.py", "pytorch"),
            price_units_hour=600_000,
            estimate_units=50_000,
            executor="process",
            created_at=T0 + 600,
            started_at=T0 + 601,
            updated_at=T0 + 1_700,
            checkpoint=3,
            resumed_from=2,
            log_lines=len(TRAIN_LOG),
            # The provider's latest live sample (the history is kept in memory only).
            usage=UsageSample(at=T0 + 1_700, cpu_cores=1.4, ram_mb=812, ram_limit_mb=4096),
        ),
        TRAIN_LOG,
    ),
    (
        JobInfo(
            job_id="a1b2c3d4e5f6",
            role="provider",
            state="completed",
            provider="self",
            consumer=OTHER,
            spec=_spec("", "train.py", "tensorflow"),
            exit_code=0,
            price_units_hour=1_000_000,
            estimate_units=80_000,
            executor="docker",
            created_at=T0 - 3_600,
            started_at=T0 - 3_590,
            finished_at=T0 - 3_300,
            updated_at=T0 - 3_300,
            metering=JobMetering(wall_s=290, cpu_s=500, mticks=1_250, cost_units=80_600),
        ),
        [],
    ),
    (
        JobInfo(
            job_id="c4ce11ed0001",
            role="consumer",
            state="cancelled",
            provider=OTHER,
            consumer="self",
            spec=_spec("ticker", "slow.py", "scikit-learn"),
            reason="cancelled by the consumer",
            estimate_units=10_000,
            created_at=T0 - 7_200,
            started_at=T0 - 7_190,
            finished_at=T0 - 7_100,
            updated_at=T0 - 7_100,
        ),
        [],
    ),
]


@pytest.fixture
def stored_jobs(node_home: Paths) -> Iterator[Paths]:
    """The jobs above in the node's store and their logs in its job folders."""
    store = Store(node_home.database)
    for job, lines in JOBS:
        store.save_job(job)
        log = JobLog(node_home.state_dir / "jobs" / job.job_id / "log.jsonl")
        log.append(
            JobLogLine(
                seq=seq,
                stream="system" if text.startswith("resumed") else "stdout",
                text=text,
                at=T0,
            )
            for seq, text in enumerate(lines)
        )
    store.close()
    yield node_home


def _consumer_app(host_engine: EngineFactory, **kwargs: Any) -> NunetApp:
    engine = host_engine()
    engine.call_blocking(SetMode(mode="consumer"))
    return NunetApp(client=engine, clock=lambda: NOW, **kwargs)


async def _log_in(pilot: Pilot[Any], count: int) -> None:
    await _until(
        pilot,
        lambda: len(pilot.app.screen.query_one("#job-log").lines) >= count,  # type: ignore[attr-defined]
    )


@pytest.mark.parametrize("size", SIZES)
def test_jobs_list(
    snap_compare: Any, stored_jobs: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    app = _consumer_app(host_engine)
    assert snap_compare(app, terminal_size=size, run_before=settled("JobsScreen", keys=["j"]))


@pytest.mark.parametrize("size", SIZES)
def test_consumer_dashboard_with_recent_jobs(
    snap_compare: Any, stored_jobs: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    app = _consumer_app(host_engine)
    assert snap_compare(app, terminal_size=size, run_before=settled("ConsumerDashboard"))


@pytest.mark.parametrize("size", SIZES)
def test_job_detail_failed(
    snap_compare: Any, stored_jobs: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    """The traceback's tail and the exit code; peer text stays literal."""
    app = _consumer_app(host_engine)

    async def open_it(pilot: Pilot[Any]) -> None:
        await pilot.press("down", "enter")  # the second newest: the failed one
        await _until(pilot, lambda: type(pilot.app.screen).__name__ == "JobDetailScreen")
        await _log_in(pilot, len(FAIL_LOG))
        await _quiet(pilot)

    run_before = settled("JobsScreen", keys=["j"], then=open_it)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_job_detail_running_resumed(
    snap_compare: Any, stored_jobs: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    app = _consumer_app(host_engine)

    async def open_it(pilot: Pilot[Any]) -> None:
        await pilot.press("enter")  # the newest: running, resumed from a checkpoint
        await _until(pilot, lambda: type(pilot.app.screen).__name__ == "JobDetailScreen")
        await _log_in(pilot, len(TRAIN_LOG))
        await _quiet(pilot)

    run_before = settled("JobsScreen", keys=["j"], then=open_it)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_submit_form_with_a_preset_and_an_error(
    snap_compare: Any, stored_jobs: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    """F1 loads the iris example; a bad dependency is then flagged under its field."""
    app = _consumer_app(host_engine, examples=EXAMPLES)

    async def preset_then_typo(pilot: Pilot[Any]) -> None:
        await pilot.press("f1")
        await pilot.press("tab", "tab", "tab", "tab", "tab")  # to the deps field
        await pilot.press(*"numpy, not a req!")
        await _until(pilot, lambda: pilot.app.screen.query_one("#deps-field").has_class("-invalid"))
        await pilot.press("tab")
        pilot.app.clear_notifications()

    run_before = settled("SubmitScreen", keys=["s"], then=preset_then_typo)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


SERVICE = JobInfo(
    job_id="5e41ce0000aa",
    role="consumer",
    state="running",
    provider=PROVIDER,
    consumer="self",
    spec=_spec("gradio chat", "gradio_chat/chat.py", "pytorch", kind="service", ports=(7860, 8888)),
    price_units_hour=600_000,
    estimate_units=600_000,
    executor="docker",
    created_at=T0 + 900,
    started_at=T0 + 901,
    updated_at=T0 + 1_700,
    log_lines=2,
)
SERVICE_LOG = ["Running on local URL:  http://127.0.0.1:7860", "conversation saved (3 turns)"]


@pytest.fixture
def stored_service(node_home: Paths) -> Iterator[Paths]:
    """One running service job with two declared ports, and its log."""
    store = Store(node_home.database)
    store.save_job(SERVICE)
    store.close()
    log = JobLog(node_home.state_dir / "jobs" / SERVICE.job_id / "log.jsonl")
    log.append(
        JobLogLine(seq=seq, stream="stdout", text=text, at=T0)
        for seq, text in enumerate(SERVICE_LOG)
    )
    yield node_home


@pytest.mark.parametrize("size", SIZES)
def test_job_detail_service_ports(
    snap_compare: Any, stored_service: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    """A service job's ports panel: each declared port, and the keys to forward and shell."""
    app = _consumer_app(host_engine)

    async def open_it(pilot: Pilot[Any]) -> None:
        await pilot.press("enter")
        await _until(pilot, lambda: type(pilot.app.screen).__name__ == "JobDetailScreen")
        await _log_in(pilot, len(SERVICE_LOG))
        await _quiet(pilot)

    run_before = settled("JobsScreen", keys=["j"], then=open_it)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


class _SubmitsSlowly:
    """The embedded engine, except that a submit says its steps (SubmitProgress, as the
    consumer's jobs room does) and then waits for the chain: the form mid-submit."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.held = asyncio.Event()  # never set: the picture is taken while it waits

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    async def call(self, command: Any) -> Any:
        if not isinstance(command, SubmitJob):
            return await self.engine.call(command)
        for step, detail, elapsed in (
            ("matching", "1 provider of 1 on this channel can run it", 0.1),
            ("asking", f"provider {PROVIDER[:8]}…{PROVIDER[-4:]}", 0.4),
            ("quoted", "0.033333 NTX estimate · 0.033333 NTX locked, spec low", 1.2),
            ("locking", "lock tx 6fee1b3d…b7b6: waiting for the chain", 1.3),
        ):
            event = SubmitProgress(
                at=T0, submit_id=command.submit_id, step=step, detail=detail, elapsed_s=elapsed
            )
            self.engine.node.ctx.emit(event)
        await self.held.wait()
        raise AssertionError("the picture is taken before the submit ends")


@pytest.mark.parametrize("size", SIZES)
def test_submit_form_while_it_submits(
    snap_compare: Any, stored_jobs: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    """Ctrl-S: each step of the submit under the button as it happens, with its time (issue
    22 §2: "Submitting…" used to say nothing for up to a minute)."""
    engine = host_engine()
    engine.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=_SubmitsSlowly(engine), clock=lambda: NOW, examples=EXAMPLES)  # type: ignore[arg-type]

    async def submit(pilot: Pilot[Any]) -> None:
        await pilot.press("f1")
        await pilot.press("ctrl+s")
        await _until(
            pilot, lambda: "locking" in str(pilot.app.screen.query_one("#progress").render())
        )
        pilot.app.clear_notifications()

    run_before = settled("SubmitScreen", keys=["s"], then=submit)
    assert snap_compare(app, terminal_size=size, run_before=run_before)
