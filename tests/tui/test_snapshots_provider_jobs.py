"""SVG snapshots of a provider's jobs at 80x24 and 160x48, on a real embedded engine.

The jobs this node ran for others (and their logs) are written into the node's store before
the engine starts, with fixed ids and times; the app's clock is pinned. The engine runs
without the network, so a job stored as running stays running (nothing resumes it) and its
log is what the dashboard polls. The host is the fixed one of tests/doubles/host.py; the job
detail's GPU sparkline comes from the NVML double, whose boards follow a script, one reading
per sample, and then hold still (see ``ScriptedLoad``): the same picture on every run.
Update with ``pytest --snapshot-update`` and look at the pictures before committing them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from engine.api import JobInfo, JobLogLine, JobMetering, OnboardRequest, SetMode
from engine.config import Paths
from engine.domain.spec import JobSpec
from engine.facade import Engine
from engine.jobs.joblog import JobLog
from engine.store import Store
from nunet_tui.app import NunetApp
from tests.conftest import TEST_ADDRESS, make_home
from tests.doubles.fake_pynvml import FakeGpu, FakeNvml
from tests.doubles.host import FIXED_TIME, RIG_GPUS, fixed_host
from tests.tui.test_snapshots import _quiet, _until, settled

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]

T0 = 1_750_000_000.0
NOW = T0 + 7_200
ALICE = "12D3KooWRWcUSHYQhJjq4z1S8u5iEHoYwqHW6dFCzXvL1b8Ztq2a"
CAROL = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW"
SCRIPTS = "http://127.0.0.1:8765/"

EPOCH = "[epoch {0}/100] loss {1:.3f} acc {2:.2f}"
TRAIN_LOG = ["starting a new training on cuda"]
TRAIN_LOG += [EPOCH.format(e, 2.3 - e * 0.04, 0.10 + e * 0.016) for e in range(1, 38)]
# The last line is not a progress line, and peer text stays literal: no markup, no escapes.
TRAIN_LOG += ["saved [bold]outputs/model-37.pt[/bold] \x1b[32m(ok)\x1b[0m"]


def _spec(name: str, script: str, framework: str, **extra: Any) -> JobSpec:
    fields: dict[str, Any] = {"device": "cpu", "tier": "low", "expected_minutes": 5, **extra}
    return JobSpec(name=name, script_url=SCRIPTS + script, framework=framework, **fields)


RUNNING = JobInfo(
    job_id="b7e1c0de4a91",
    role="provider",
    state="running",
    provider="self",
    consumer=ALICE,
    spec=_spec(
        "cifar-10 resnet",
        "cifar10/train.py",
        "pytorch",
        device="gpu",
        tier="moderate",
        expected_minutes=30,
    ),
    price_units_hour=1_000_000,
    estimate_units=500_000,
    executor="docker",
    created_at=NOW - 1_110,
    started_at=NOW - 1_100,
    updated_at=NOW - 60,
    checkpoint=3,
)


def _done(
    job_id: str,
    spec: JobSpec,
    state: str,
    at: float,
    ran: float,
    cost: int | None,
    consumer: str = ALICE,
    **extra: Any,
) -> JobInfo:
    metering = None if cost is None else JobMetering(wall_s=ran, cpu_s=ran, cost_units=cost)
    return JobInfo(
        job_id=job_id,
        role="provider",
        state=state,  # type: ignore[arg-type]
        provider="self",
        consumer=consumer,
        spec=spec,
        price_units_hour=1_000_000,
        estimate_units=80_000,
        executor="docker",
        created_at=at,
        started_at=at + 5,
        finished_at=at + 5 + ran,
        updated_at=at + 5 + ran,
        metering=metering,
        **extra,
    )


FINISHED = [
    _done(
        "51c0a1b2c3d4",
        _spec("iris decision tree", "iris/train.py", "scikit-learn"),
        "completed",
        NOW - 1_800,
        4.2,
        1_200,
        exit_code=0,
    ),
    _done(
        "0e9b77aa12f0",
        _spec("tensor shape error", "tensor_shape_error/fail.py", "pytorch"),
        "failed",
        NOW - 2_400,
        2.0,
        600,
        consumer=CAROL,
        exit_code=1,
        reason="RuntimeError: The size of tensor a (5) must match the size of tensor b (3)",
    ),
    _done(
        "a1b2c3d4e5f6",
        _spec("keras regression", "tensorflow_regression/train.py", "tensorflow"),
        "completed",
        NOW - 3_600,
        290.0,
        80_600,
        exit_code=0,
    ),
    _done(
        "c4ce11ed0001",
        _spec("ticker", "slow.py", "scikit-learn"),
        "cancelled",
        NOW - 5_000,
        90.0,
        25_000,
        consumer=CAROL,
        reason="cancelled by the consumer",
    ),
    _done(
        "7e57ed0ff1ce",
        _spec("big batch", "big/train.py", "pytorch", tier="high"),
        "oom",
        NOW - 6_000,
        41.0,
        None,
        reason="the job went over its 8,000 MB of memory",
    ),
]


def _store(home: Paths, jobs: list[tuple[JobInfo, list[str]]]) -> None:
    store = Store(home.database)
    for job, lines in jobs:
        store.save_job(job)
        log = JobLog(home.state_dir / "jobs" / job.job_id / "log.jsonl")
        log.append(
            JobLogLine(seq=seq, stream="stdout", text=text, at=T0) for seq, text in enumerate(lines)
        )
    store.close()


class ScriptedLoad:
    """The GPU sampler's clock, and the boards' script: one tick per sample.

    Sample ``k`` reads the ``k``-th load of each board and is stamped ``FIXED_TIME + k``;
    after the last load the boards hold still and the clock stops, so however many samples
    the engine takes before the picture, the history it shows is the same.
    """

    LOADS = [41, 55, 72, 90, 97, 88, 93, 99, 84, 87]

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.count = 0
        self._apply(0)

    @property
    def last(self) -> float:
        return FIXED_TIME + len(self.LOADS) - 1

    def _apply(self, step: int) -> None:
        step = min(step, len(self.LOADS) - 1)  # after the script, both boards hold still
        load = self.LOADS[step]
        self.gpus[0].utilization_gpu = load
        self.gpus[0].power_usage_mw = 150_000 + load * 2_000
        self.gpus[1].utilization_gpu = 2 + step % 3

    def __call__(self) -> float:
        at = FIXED_TIME + min(self.count, len(self.LOADS) - 1)
        self.count += 1
        self._apply(self.count)
        return at


# A GPU machine must offer at least 8 GB of RAM and 50 GB of disk: a rig, not a laptop.
RIG_TOML = """\
[machine]
hostname = "rig-01"
cpu_model = "AMD EPYC 7543 32-Core Processor"
cpu_cores = 8
cpu_mhz_per_core = 2800
memory_mb = 64000
disk_mb = 500000
"""


@pytest.fixture
def provider_engine(tmp_path: Path) -> Iterator[Callable[..., Engine]]:
    """``provider_engine(jobs, gpus=..., clock=...)``: stored jobs, onboarded, no network."""
    started: list[Engine] = []
    node_home = make_home(tmp_path / "home", machine_toml=RIG_TOML)

    def start(
        jobs: list[tuple[JobInfo, list[str]]],
        *,
        gpus: Any = 0,
        clock: Callable[[], float] | None = None,
    ) -> Engine:
        _store(node_home, jobs)
        nvml = FakeNvml(gpus=list(gpus)) if not isinstance(gpus, int) else None
        extra = {"clock": clock} if clock is not None else {}
        host = fixed_host(tmp_path / "host", gpus=gpus, nvml=nvml, **extra)
        engine = Engine(node_home, network=False, probes=host.probes).start()
        started.append(engine)
        engine.call_blocking(SetMode(mode="provider"))
        engine.call_blocking(OnboardRequest(memory_mb=8_192, cpu_mhz=8_000, address=TEST_ADDRESS))
        return engine

    yield start
    for engine in started:
        engine.close()


def _rig() -> list[FakeGpu]:
    """Copies of the rig's boards: the scripts below change their readings."""
    return [dataclasses.replace(gpu) for gpu in RIG_GPUS]


async def _listed(pilot: Pilot[Any]) -> None:
    """The recent jobs are in (the screen is the app's before its widgets are mounted)."""

    def listed() -> bool:
        found = pilot.app.screen.query("#recent-list")
        return bool(found) and found.first().option_count > 0  # type: ignore[attr-defined]

    await _until(pilot, listed)


async def _tail_read(pilot: Pilot[Any]) -> None:
    from nunet_tui.widgets.provider_jobs import ProviderJobs

    def read() -> bool:
        found = pilot.app.screen.query(ProviderJobs)
        tail = found.first().tails.get(RUNNING.job_id) if found else None
        return tail is not None and tail.last_seq == len(TRAIN_LOG) - 1

    await _until(pilot, read)
    await _gpu_lines_live(pilot)


async def _gpu_lines_live(pilot: Pilot[Any]) -> None:
    from nunet_tui.widgets.gpu_card import GpuSummary

    def live() -> bool:
        found = pilot.app.screen.query(GpuSummary)
        summary = found.first() if found else None
        return summary is None or not summary.gpus or summary.feed.latest is not None

    await _until(pilot, live)


@pytest.mark.parametrize("size", SIZES)
def test_provider_with_a_running_job(
    snap_compare: Any, provider_engine: Callable[..., Engine], size: tuple[int, int]
) -> None:
    """Running job (time, progress, last line) beside the recent jobs, on a GPU rig."""
    engine = provider_engine(
        [(RUNNING, TRAIN_LOG), *((job, []) for job in FINISHED)], gpus=tuple(RIG_GPUS)
    )
    app = NunetApp(client=engine, clock=lambda: NOW)
    run_before = settled("ProviderDashboard", then=_tail_read)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_provider_with_recent_jobs(
    snap_compare: Any, provider_engine: Callable[..., Engine], size: tuple[int, int]
) -> None:
    """Nothing running: the recent jobs take the row (the wide one says why jobs failed)."""
    engine = provider_engine([(job, []) for job in FINISHED])
    app = NunetApp(client=engine, clock=lambda: NOW)

    run_before = settled("ProviderDashboard", then=_listed)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_job_detail_with_the_gpu_sparkline(
    snap_compare: Any, provider_engine: Callable[..., Engine], size: tuple[int, int]
) -> None:
    """Enter on the running GPU job: its log, and its GPUs' load beside it."""
    gpus = _rig()
    load = ScriptedLoad(gpus)
    engine = provider_engine(
        [(RUNNING, TRAIN_LOG), *((job, []) for job in FINISHED)], gpus=gpus, clock=load
    )
    app = NunetApp(client=engine, clock=lambda: NOW)

    async def open_it(pilot: Pilot[Any]) -> None:
        from nunet_tui.widgets.job_gpus import JobGpus

        await _listed(pilot)
        await pilot.press("enter")  # the newest job: the running one
        await _until(pilot, lambda: type(pilot.app.screen).__name__ == "JobDetailScreen")
        await _until(
            pilot, lambda: len(pilot.app.screen.query_one("#job-log").lines) >= len(TRAIN_LOG)
        )

        def held_still() -> bool:
            widget = pilot.app.screen.query_one(JobGpus)
            return widget.latest is not None and widget.latest.at >= load.last

        await _until(pilot, held_still, timeout=30)
        await _quiet(pilot)

    run_before = settled("ProviderDashboard", then=open_it)
    assert snap_compare(app, terminal_size=size, run_before=run_before)
