"""The provider's job panels and the job detail's GPU strip: what they read, show and open.

Pure parts first (progress lines, log tails, columns, the time sparkline), then Pilot tests
on a real embedded engine without the network: jobs stored as in the snapshot tests, the
running one's log appended on the engine's own thread as an executor's pump would.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine.api import GetJobLogs, JobLogEvent, JobLogLine
from engine.facade import Engine
from engine.jobs.joblog import JobLog
from nunet_tui.app import NunetApp
from nunet_tui.format import DASH
from nunet_tui.widgets.job_gpus import JobGpus, time_spark, uses_gpu
from nunet_tui.widgets.progress import progress_of, visible_text
from nunet_tui.widgets.provider_jobs import ProviderJobs
from nunet_tui.widgets.recent_runs import FIXED_W, NAME_MAX, RunList, columns, earned, why
from nunet_tui.widgets.running_jobs import LogTail, RunningJobs, job_block
from tests.doubles.host import RIG_GPUS
from tests.pilot import anyio_backend, count_log_reads, until
from tests.tui.test_snapshots_provider_jobs import (
    FINISHED,
    NOW,
    RUNNING,
    TRAIN_LOG,
    provider_engine,
)

__all__ = ["anyio_backend", "provider_engine"]

pytestmark = pytest.mark.anyio


# --- progress lines ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "share"),
    [
        ("epoch 37/100 loss 0.81", 0.37),
        ("[epoch 37/100] loss 0.812 acc 0.71", 0.37),
        ("Epoch 3/10", 0.3),
        ("Step 120 of 480: loss 2.1", 0.25),
        (" 40%|████      | 40/100 [00:12<00:21,  3.00it/s]", 0.4),
        ("12/48 [======>.......................] - ETA: 3s - loss: 0.41", 0.25),
        ("progress: 45%", 0.45),
        ("60% done", 0.6),
        ("[epoch 5] loss 0.700", None),
        ("epoch 120/100 (extra epochs)", 1.0),
    ],
)
def test_progress_lines_and_how_far_they_say(line: str, share: float | None) -> None:
    found = progress_of(line)
    assert found is not None
    assert found.text == line.rstrip()
    if share is None:
        assert found.share is None
    else:
        assert found.share == pytest.approx(share)


@pytest.mark.parametrize(
    "line",
    [
        "accuracy: 0.9333",
        "loss went from 2.3 to 0.4 (83% better)",
        "classification report:",
        "",
        "   ",
        "resumed from checkpoint 2",
    ],
)
def test_lines_that_report_no_progress(line: str) -> None:
    assert progress_of(line) is None


def test_a_carriage_return_line_shows_what_a_terminal_would() -> None:
    """tqdm rewrites one line: the newest state is after the last carriage return."""
    raw = " 10%|█         | 1/10\r 20%|██        | 2/10\r 30%|███       | 3/10\r"
    assert visible_text(raw) == " 30%|███       | 3/10"
    found = progress_of(raw)
    assert found is not None and found.share == pytest.approx(0.3)


def test_peer_text_is_cleaned_never_interpreted() -> None:
    shown = visible_text("[bold red]epoch 3/9[/] \x1b[2J\x07")
    assert shown == "[bold red]epoch 3/9[/] \\x1b[2J\\x07"


# --- the running job's block ---------------------------------------------------------------


def _lines(texts: list[str], first: int = 0, stream: str = "stdout") -> list[JobLogLine]:
    return [
        JobLogLine(seq=first + i, stream=stream, text=text, at=0.0)  # type: ignore[arg-type]
        for i, text in enumerate(texts)
    ]


def test_a_log_tail_keeps_the_last_line_and_the_last_progress_line() -> None:
    tail = LogTail()
    tail.take(_lines(["epoch 1/4 loss 2", "epoch 2/4 loss 1", "saved model", ""]))
    assert tail.last_seq == 3
    assert tail.last_line == "saved model"  # the blank line after it is not "the last line"
    assert tail.progress is not None and tail.progress.text == "epoch 2/4 loss 1"
    # A later batch without progress keeps the last progress line; lines already seen are
    # ignored (a page may overlap the previous one).
    tail.take(_lines(["saved model", "uploading"], first=2))
    assert tail.last_seq == 3 and tail.last_line == "saved model"
    tail.take(_lines(["uploading"], first=4))
    assert tail.last_line == "uploading"
    assert tail.progress.text == "epoch 2/4 loss 1"
    tail.take(_lines(["checkpoint 3 written"], first=5, stream="system"))
    assert tail.last_line == "» checkpoint 3 written"


def _plain(job: Any, tail: LogTail | None, now: float, width: int = 100) -> list[str]:
    return [line.plain for line in job_block(job, tail, now, width)]


def test_the_block_says_time_against_expected_progress_and_the_last_line() -> None:
    tail = LogTail()
    tail.take(_lines(TRAIN_LOG))
    rows = _plain(RUNNING, tail, NOW)
    assert rows[0].startswith("Job       b7e1c0de4a91 · cifar-10 resnet · ● running")
    assert "checkpoint 3" in rows[0]
    # Priced in base units: the machine time so far at 1 NTX/h, metered (issue 23).
    assert rows[1].startswith("Consumer  12D3KooW…tq2a · 0.305555 NTX metered (1 NTX/h)")
    assert rows[2] == "Runs as   pytorch · GPU · Moderate · docker executor"
    assert rows[3].startswith("Time      00:18:20 of 00:30:00") and rows[3].endswith("61%")
    assert rows[4].startswith("Progress  [epoch 37/100] loss 0.820") and rows[4].endswith("37%")
    # Literal: the markup and the escape sequence are shown as the job printed them.
    assert rows[5] == "Last      saved [bold]outputs/model-37.pt[/bold] \\x1b[32m(ok)\\x1b[0m"
    assert all(len(row) <= 100 for row in rows)


def test_the_block_before_the_start_and_past_the_expected_time() -> None:
    waiting = msgspec.structs.replace(RUNNING, state="accepted", started_at=None)
    rows = _plain(waiting, None, NOW)
    assert rows[3].startswith("Time      preparing")
    assert rows[4] == "Progress  none reported yet"
    assert rows[5] == "Last      no output yet"
    late = _plain(RUNNING, None, NOW + 1_000)  # 35 min into a 30 min job
    assert "over by 00:05:00" in late[3] and late[3].endswith("117%")


def test_the_block_fits_a_narrow_panel() -> None:
    tail = LogTail()
    tail.take(_lines(["x" * 500]))
    rows = [line.cell_length for line in job_block(RUNNING, tail, NOW, 40)]
    assert max(rows) <= 40


# --- recent jobs -----------------------------------------------------------------------------


def test_columns_give_way_to_the_width() -> None:
    assert columns(FIXED_W + 3) == (0, 0)  # no room for a name
    assert columns(FIXED_W + 10) == (10, 0)
    assert columns(FIXED_W + NAME_MAX + 1) == (NAME_MAX, 0)
    name, note = columns(FIXED_W + NAME_MAX + 40)
    assert name == NAME_MAX and note == 38  # the rest says why a job ended


def test_the_why_column_only_when_a_job_says_why() -> None:
    assert columns(FIXED_W + NAME_MAX + 40, notes=False) == (NAME_MAX, 0)
    completed, failed, _keras, cancelled, _oom = FINISHED
    assert why(completed).plain == "" and why(RUNNING).plain == ""
    assert why(failed).plain.startswith("RuntimeError: The size of tensor a (5)")
    assert why(cancelled).plain == "cancelled by the consumer"


def test_earned_is_metered_once_done_and_quoted_while_running() -> None:
    completed, _failed, _keras, _cancelled, oom = FINISHED
    assert earned(completed).plain == "0.001166"  # 4.2 s at 1 NTX/h, floored
    assert earned(oom).plain == "0.011388"  # its machine time is billed, metering or not
    never = msgspec.structs.replace(oom, started_at=None, finished_at=None, runs=())
    assert earned(never).plain == DASH  # never ran: nothing to claim
    assert earned(RUNNING).plain == "≈0.5"
    # A paid job from before billing that completed was paid its escrowed quote.
    paid = msgspec.structs.replace(
        completed, receipt="{}", estimate_units=250_000, price_units_hour=None
    )
    assert earned(paid).plain == "0.25"


# --- GPUs beside the log ------------------------------------------------------------------


def test_the_time_sparkline_places_samples_by_their_time() -> None:
    points = [(10.0, 0.0), (11.0, 50.0), (13.0, 100.0)]
    assert time_spark(points, newest=13.0, width=6, interval=1.0) == "  ▁▅ █"
    # More samples at the same moment (a sampler that held still) draw the same picture.
    assert time_spark([*points, (13.0, 100.0), (13.0, 20.0)], 13.0, 6, 1.0) == "  ▁▅ █"
    assert time_spark(points, newest=13.0, width=2, interval=1.0) == " █"


def test_only_a_running_gpu_job_of_this_provider_wants_the_gpus() -> None:
    assert uses_gpu(RUNNING)
    assert not uses_gpu(msgspec.structs.replace(RUNNING, role="consumer"))
    assert not uses_gpu(
        msgspec.structs.replace(RUNNING, spec=msgspec.structs.replace(RUNNING.spec, device="cpu"))
    )
    assert not uses_gpu(msgspec.structs.replace(RUNNING, state="completed"))
    assert not uses_gpu(None)


def test_the_engine_reads_a_log_from_its_newest_lines(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "log.jsonl")
    log.append(_lines([f"line {i}" for i in range(100)]))
    assert [line.seq for line in log.read(-1, 3, newest=True)] == [97, 98, 99]
    assert [line.seq for line in log.read(98, 3, newest=True)] == [99]
    assert [line.seq for line in log.read(-1, 3)] == [0, 1, 2]
    assert GetJobLogs(job_id="x").newest is False  # older callers read from the start


# --- on the real engine ----------------------------------------------------------------------


def _jobs_panel(app: NunetApp) -> ProviderJobs | None:
    found = app.screen.query(ProviderJobs)
    return found.first() if found else None


async def test_a_provider_without_jobs_sees_its_machine_first(
    provider_engine: Callable[..., Engine],
) -> None:
    app = NunetApp(client=provider_engine([]), clock=lambda: NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")
        await until(pilot, lambda: bool(app.screen.query("#machine-line")))
        await pilot.pause(0.5)
        panel = _jobs_panel(app)
        assert panel is not None and not panel.display
        assert app.focused is None  # the empty list does not take the keys
        assert "select" not in {b.binding.action for b in app.screen.active_bindings.values()}


async def test_the_running_job_follows_its_log_and_enter_opens_it(
    provider_engine: Callable[..., Engine],
) -> None:
    engine = provider_engine([(RUNNING, TRAIN_LOG), *((job, []) for job in FINISHED)])
    app = NunetApp(client=engine, clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")

        def tail() -> LogTail | None:
            panel = _jobs_panel(app)
            return panel.tails.get(RUNNING.job_id) if panel is not None else None

        await until(pilot, lambda: (t := tail()) is not None and t.last_seq == len(TRAIN_LOG) - 1)
        running = app.screen.query_one(RunningJobs)
        assert running.display and [job.job_id for job in running.jobs] == [RUNNING.job_id]
        rows = app.screen.query_one(RunList)
        await until(pilot, lambda: rows.option_count == 5)  # drawn once it has a width
        assert app.focused is rows

        # New lines, written on the engine's thread as the executor's pump does (the log,
        # then the batched event, engine/jobs/log_events.py): the panel takes them from the
        # event, progress and last line both, without reading the log again.
        joblog = engine.node.jobs().provider.job_log(RUNNING.job_id)
        fresh = _lines(["[epoch 38/100] loss 0.780 acc 0.70", "saved"], first=len(TRAIN_LOG))
        reads = count_log_reads(engine, newest=True)

        def pump() -> None:
            joblog.append(fresh)
            engine.node.ctx.emit(JobLogEvent(at=NOW, job_id=RUNNING.job_id, lines=tuple(fresh)))

        engine._thread.run_sync_soon(pump)  # type: ignore[union-attr]
        await until(pilot, lambda: (t := tail()) is not None and t.last_line == "saved")
        assert tail().progress.share == pytest.approx(0.38)  # type: ignore[union-attr]
        assert reads == []

        # A gap in the line numbers (events missed): the tail is read again.
        later = _lines(["[epoch 40/100] loss 0.700 acc 0.72"], first=len(TRAIN_LOG) + 3)
        skipped = _lines(["a", "b"], first=len(TRAIN_LOG) + 2)[:1]

        def pump_with_gap() -> None:
            joblog.append(skipped + later)
            engine.node.ctx.emit(JobLogEvent(at=NOW, job_id=RUNNING.job_id, lines=tuple(later)))

        engine._thread.run_sync_soon(pump_with_gap)  # type: ignore[union-attr]
        await until(pilot, lambda: (t := tail()) is not None and t.last_seq == len(TRAIN_LOG) + 3)
        assert len(reads) == 1 and tail().progress.share == pytest.approx(0.40)  # type: ignore[union-attr]

        await pilot.press("enter")  # the newest row: the running job
        await until(pilot, lambda: type(app.screen).__name__ == "JobDetailScreen")
        assert app.screen.job_id == RUNNING.job_id  # type: ignore[attr-defined]
        await pilot.press("down", "escape")
        await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")
        await pilot.press("down", "down", "enter")  # the third: the failed one
        await until(pilot, lambda: type(app.screen).__name__ == "JobDetailScreen")
        assert app.screen.job_id == FINISHED[1].job_id  # type: ignore[attr-defined]


async def test_no_gpu_box_without_a_gpu(provider_engine: Callable[..., Engine]) -> None:
    """A GPU job on a node whose sampler reads no board: no GPU panel, not an empty one."""
    engine = provider_engine([(RUNNING, TRAIN_LOG)])
    app = NunetApp(client=engine, clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: bool(app.screen.query(RunList)))
        await until(pilot, lambda: app.screen.query_one(RunList).option_count == 1)
        await pilot.press("enter")
        await until(pilot, lambda: type(app.screen).__name__ == "JobDetailScreen")
        gpus = app.screen.query_one(JobGpus)
        await until(pilot, lambda: gpus.latest is not None)
        assert gpus.active and not gpus.latest.gpus  # type: ignore[union-attr]
        assert not gpus.display


async def test_the_gpu_strip_on_a_rig_and_not_for_a_cpu_job(
    provider_engine: Callable[..., Engine],
) -> None:
    cpu_job = msgspec.structs.replace(
        RUNNING,
        job_id="c9u0000000aa",
        spec=msgspec.structs.replace(RUNNING.spec, device="cpu"),
        created_at=NOW,
    )
    engine = provider_engine([(RUNNING, TRAIN_LOG), (cpu_job, [])], gpus=tuple(RIG_GPUS))
    app = NunetApp(client=engine, clock=lambda: NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: bool(app.screen.query(RunList)))
        await until(pilot, lambda: app.screen.query_one(RunList).option_count == 2)
        await pilot.press("enter")  # the newest: the CPU job
        await until(pilot, lambda: type(app.screen).__name__ == "JobDetailScreen")
        await pilot.pause(0.5)
        assert not app.screen.query_one(JobGpus).display
        await pilot.press("escape")
        await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")
        await pilot.press("down", "enter")  # the GPU job
        await until(pilot, lambda: type(app.screen).__name__ == "JobDetailScreen")
        gpus = app.screen.query_one(JobGpus)
        await until(pilot, lambda: gpus.display)
        shown = gpus.render().plain.splitlines()
        assert shown[0].startswith("GPU0  RTX 3090") and "87%" in shown[0]
        assert shown[1].startswith("GPU1  RTX 4070")
