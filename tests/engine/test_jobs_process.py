"""The process executor with real processes: iris, live logs, failures, limits, checkpoints.

Also the shared helpers of the executor tests (the Docker ones import them).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
import zipfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from engine.domain.spec import JobSpec
from engine.jobs.executors.base import (
    BaseExecutor,
    ExitStatus,
    JobRun,
    Limits,
    LogLine,
    StderrTail,
    failure_reason,
    running,
)
from engine.jobs.executors.process import ProcessExecutor
from engine.jobs.results import safe_unpack
from tests.conftest import LOOPBACK_FETCH, REPO

EXAMPLES = REPO / "examples" / "jobs"
LIMITS = Limits(memory_mb=1024, cpu_cores=1.0, timeout_s=120.0, pids=128)
HAS_SKLEARN = importlib.util.find_spec("sklearn") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None

LIVE = """
import time
for i in range(4):
    print(f"line {i} {time.time()!r}")
    time.sleep(0.4)
import sys
print(f"to stderr {time.time()!r}", file=sys.stderr)
"""
FAIL = """
print("about to fail")
def inner():
    raise ValueError("shapes (5, 2) and (3, 2) do not add up")
inner()
"""
FOREVER = """
import time
print("started", flush=True)
while True:
    time.sleep(0.1)
"""
HOG = """
print("allocating", flush=True)
blocks = [bytearray(50 << 20) for _ in range(40)]  # 2 GB, far above the limit
print("allocated", len(blocks))
"""
EPOCHS = """
import os, time
from pathlib import Path
state = Path("state"); state.mkdir(exist_ok=True)
counter = state / "epoch.txt"
start = int(counter.read_text()) if counter.exists() else 0
print(f"resuming from epoch {start}" if start else "starting fresh")
for epoch in range(start, 6):
    time.sleep(float(os.environ.get("PAUSE", "0.3")))
    counter.write_text(str(epoch + 1))
    print(f"epoch {epoch + 1} done")
Path("outputs/final.txt").write_text(f"trained from {start} to 6")
"""


def spec(framework: str = "scikit-learn", **fields: Any) -> JobSpec:
    return JobSpec(framework=framework, script_url="http://127.0.0.1/job.py", **fields)


def new_run(tmp_path: Path, job: JobSpec, limits: Limits = LIMITS, job_id: str = "job-1") -> JobRun:
    workspace = tmp_path / job_id / "workspace"
    return JobRun(
        job_id=job_id,
        spec=job,
        workspace=workspace,
        limits=limits,
        node_id="node-t",
        fetch_policy=LOOPBACK_FETCH,  # git sources are served on 127.0.0.1 (test_jobs_git)
    )


async def collect(executor: BaseExecutor, run: JobRun) -> tuple[ExitStatus, list[LogLine]]:
    lines = [line async for line in executor.logs(run)]
    return await executor.wait(run), lines


def run_job(
    executor: BaseExecutor,
    run: JobRun,
    script: str | bytes,
    during: Callable[[BaseExecutor, JobRun], Awaitable[None]] | None = None,
) -> tuple[ExitStatus, list[LogLine]]:
    """prepare + start + every log line + the exit status; ``during`` runs alongside."""
    data = script.encode() if isinstance(script, str) else script

    async def main() -> tuple[ExitStatus, list[LogLine]]:
        async with running(executor), trio.open_nursery() as nursery:
            await executor.prepare(run, data)
            await executor.start(run)
            if during is not None:
                nursery.start_soon(during, executor, run)
            return await collect(executor, run)

    return trio.run(main)


def texts(lines: list[LogLine], stream: str = "stdout") -> list[str]:
    return [line.text for line in lines if line.stream == stream]


def make_wheel(folder: Path) -> Path:
    """A tiny pure-Python wheel, so installing a dependency needs no index and no build."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "nunetdep-1.0-py3-none-any.whl"
    files = {
        "nunetdep/__init__.py": "ANSWER = 42\n",
        "nunetdep-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: nunetdep\nVersion: 1.0\n",
        "nunetdep-1.0.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{name},,\n" for name in files) + "nunetdep-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr("nunetdep-1.0.dist-info/RECORD", record)
    return wheel


@pytest.mark.skipif(
    not HAS_SKLEARN, reason="scikit-learn is not installed (pip install -e .[test])"
)
def test_iris_runs_and_results_come_back(tmp_path: Path) -> None:
    executor = ProcessExecutor()
    run = new_run(tmp_path, spec())
    script = (EXAMPLES / "iris" / "train.py").read_bytes()
    status, lines = run_job(executor, run, script)
    assert status == ExitStatus(0, "completed", "")
    out = texts(lines)
    assert any(line.startswith("accuracy: 0.9") for line in out)
    assert "confusion matrix:" in out and "classification report:" in out
    usage = executor.usage(run)
    assert usage.wall_s > 0 and usage.cpu_s > 0 and usage.mticks > 0 and usage.samples >= 1

    async def results() -> Path:
        archive = await executor.collect_results(run, tmp_path / "archives")
        return safe_unpack(archive.path, tmp_path / "results", run.job_id)

    unpacked = trio.run(results)
    assert '"accuracy"' in (unpacked / "outputs" / "metrics.json").read_text()


def test_log_lines_arrive_as_they_are_printed(tmp_path: Path) -> None:
    status, lines = run_job(ProcessExecutor(), new_run(tmp_path, spec()), LIVE)
    assert status.outcome == "completed"
    printed = [line for line in lines if line.stream in ("stdout", "stderr")]
    assert [line.text.rsplit(" ", 1)[0] for line in printed] == [
        "line 0",
        "line 1",
        "line 2",
        "line 3",
        "to stderr",
    ]
    for line in printed:
        delay = line.at - float(line.text.rsplit(" ", 1)[1])
        assert 0 <= delay < 1.0, f"{line.text!r} arrived {delay:.3f} s after it was printed"
    assert [line.seq for line in lines] == list(range(len(lines)))


def test_a_failing_script_keeps_its_traceback_and_exit_code(tmp_path: Path) -> None:
    status, lines = run_job(ProcessExecutor(), new_run(tmp_path, spec()), FAIL)
    assert status.outcome == "failed" and status.exit_code == 1
    assert status.reason == "exit code 1: ValueError: shapes (5, 2) and (3, 2) do not add up"
    stderr = texts(lines, "stderr")
    assert stderr[0] == "Traceback (most recent call last):"
    assert any("in inner" in line for line in stderr)


def test_the_failure_reason_survives_a_pipe_chunk_that_ends_inside_a_line() -> None:
    # The CI run that found this: "ValueError" arrived in one chunk, ": shapes ..." in the next.
    tail = StderrTail(keep=3)
    for chunk in [
        b'Traceback (most recent call last):\n  File "x", line 1\nValue',
        b"Err",
        b"or: bad\n",
    ]:
        tail.feed(chunk)
    assert failure_reason(1, tail.lines) == "exit code 1: ValueError: bad"
    tail.feed(b"no newline at the end")
    assert tail.lines[-1] == "no newline at the end" and len(tail.lines) == 4


def test_cancel_ends_the_job_and_its_children(tmp_path: Path) -> None:
    async def cancel_after_first_line(executor: BaseExecutor, run: JobRun) -> None:
        async for line in executor.logs(run):
            if line.text == "started":
                await executor.cancel(run)
                return

    began = time.monotonic()
    status, _ = run_job(
        ProcessExecutor(), new_run(tmp_path, spec()), FOREVER, cancel_after_first_line
    )
    assert status.outcome == "cancelled" and status.reason == "cancelled by the consumer"
    assert time.monotonic() - began < 10


def test_timeout(tmp_path: Path) -> None:
    limits = Limits(memory_mb=512, cpu_cores=1.0, timeout_s=1.5)
    status, lines = run_job(ProcessExecutor(), new_run(tmp_path, spec(), limits), FOREVER)
    assert status.outcome == "timeout"
    assert status.reason == "ran past its time limit of 2 s (expected 10 min)"
    assert texts(lines) == ["started"]


def test_memory_limit(tmp_path: Path) -> None:
    limits = Limits(memory_mb=300, cpu_cores=1.0, timeout_s=60)
    status, lines = run_job(ProcessExecutor(), new_run(tmp_path, spec(), limits), HOG)
    assert status.outcome == "oom", (status, lines)
    assert status.reason == "out of memory: the limit is 300 MB"
    assert "allocated" not in " ".join(texts(lines))


def test_the_environment_is_stripped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUNET_SECRET", "do-not-leak")
    monkeypatch.setenv("KEYRING_CRYPTFILE_PASSWORD", "hunter2")
    script = "import os\nfor k in sorted(os.environ): print(k, os.environ[k])\n"
    run = new_run(tmp_path, spec(env={"EPOCHS": "3"}))
    status, lines = run_job(ProcessExecutor(), run, script)
    env = dict(line.split(" ", 1) for line in texts(lines))
    assert status.outcome == "completed"
    assert "do-not-leak" not in str(env) and "hunter2" not in str(env)
    assert env["HOME"] == env["WORKSPACE"] == str(run.workspace)
    assert env["EPOCHS"] == "3" and env["PYTHONUNBUFFERED"] == "1"


def test_dependencies_install_into_the_job_venv(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "wheels")
    job = spec(deps=(f"nunetdep @ {wheel.as_uri()}",))
    status, lines = run_job(
        ProcessExecutor(), new_run(tmp_path, job), "import nunetdep\nprint(nunetdep.ANSWER)\n"
    )
    assert status.outcome == "completed", lines
    assert texts(lines) == ["42"]
    assert not importlib.util.find_spec("nunetdep")  # not in the provider's own environment


def test_checkpoint_and_restore_resume_the_epoch_counter(tmp_path: Path) -> None:
    executor = ProcessExecutor()
    store = tmp_path / "checkpoints"
    first = new_run(tmp_path, spec(env={"PAUSE": "0.3"}))
    taken: list[Any] = []

    async def checkpoint_then_crash(executor: BaseExecutor, run: JobRun) -> None:
        executor.start_checkpoints(run, store, 0.2, taken.append)
        async for line in executor.logs(run):
            if line.text == "epoch 3 done":
                await executor.checkpoint(run, store)
                await executor.cancel(run, "provider killed")
                return

    status, _ = run_job(executor, first, EPOCHS, checkpoint_then_crash)
    assert status.outcome == "cancelled"
    numbers = [c.number for c in taken]  # periodic ones, numbered with the manual one
    assert numbers and numbers == sorted(set(numbers)) and numbers[0] == 1

    from engine.jobs.checkpoints import latest

    checkpoint = latest(store)
    assert checkpoint is not None and checkpoint.number >= max(numbers)
    # A fresh workspace, as after a provider restart on the same or another disk.
    second = new_run(tmp_path / "restart", spec(env={"PAUSE": "0"}))

    async def resume() -> tuple[ExitStatus, list[LogLine]]:
        async with running(executor):
            await executor.restore(second, checkpoint)
            await executor.prepare(second, EPOCHS.encode())
            await executor.start(second)
            return await collect(executor, second)

    status, lines = trio.run(resume)
    assert status.outcome == "completed"
    assert lines[0].text == f"resumed from checkpoint {checkpoint.number}"
    resumed_at = int(texts(lines)[0].rsplit(" ", 1)[1])
    assert resumed_at >= 3
    assert texts(lines)[-1] == "epoch 6 done"
    assert (
        second.workspace / "outputs" / "final.txt"
    ).read_text() == f"trained from {resumed_at} to 6"


class PauseRefused(ProcessExecutor):
    async def _pause(self, state: Any) -> None:
        raise RuntimeError("pause refused")


def test_a_failing_checkpoint_ends_neither_the_run_nor_the_executor(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A Docker checkpoint that came just after the container's exit failed to pause it, and
    # the error ended the executor's nursery: every run, the provider and the engine with it.
    executor = PauseRefused()
    first = new_run(tmp_path, spec(env={"PAUSE": "0.2"}))
    second = new_run(tmp_path, spec(env={"PAUSE": "0"}), job_id="job-2")

    async def boom() -> None:
        raise RuntimeError("a background task failed")

    async def main() -> tuple[ExitStatus, ExitStatus]:
        async with running(executor):
            executor._spawn(boom)
            await executor.prepare(first, EPOCHS.encode())
            await executor.start(first)
            executor.start_checkpoints(first, tmp_path / "checkpoints", 0.1)
            status, _ = await collect(executor, first)
            await executor.prepare(second, EPOCHS.encode())
            await executor.start(second)
            return status, (await collect(executor, second))[0]

    # An engine started earlier in this process configured "nunet" not to propagate (its
    # records go to its own file): listen on that logger itself.
    nunet = logging.getLogger("nunet")
    nunet.addHandler(caplog.handler)
    try:
        first_status, second_status = trio.run(main)
    finally:
        nunet.removeHandler(caplog.handler)
    assert first_status.outcome == "completed" and second_status.outcome == "completed"
    messages = [record.getMessage() for record in caplog.records]
    assert any("checkpoint failed: pause refused" in m for m in messages), messages
    assert any("boom failed" in m for m in messages), messages


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed: pip install torch==2.13.0")
def test_pytorch_examples_for_real(tmp_path: Path) -> None:
    executor = ProcessExecutor()
    failing = new_run(tmp_path, spec("pytorch"), job_id="shape")
    status, lines = run_job(
        executor, failing, (EXAMPLES / "tensor_shape_error" / "fail.py").read_bytes()
    )
    assert status.outcome == "failed" and status.exit_code == 1
    assert status.reason.startswith(
        "exit code 1: RuntimeError: The size of tensor a (5) must match the size of tensor b (3)"
    )
    assert "Traceback (most recent call last):" in texts(lines, "stderr")

    training = new_run(
        tmp_path, spec("pytorch", env={"EPOCHS": "3", "EPOCH_SECONDS": "0"}), job_id="train"
    )
    script = (EXAMPLES / "pytorch_checkpoint" / "train.py").read_bytes()
    status, lines = run_job(executor, training, script)
    assert status.outcome == "completed", texts(lines, "stderr")
    out = texts(lines)
    assert out[0] == "starting a new training on cpu"
    assert [line.split(" loss")[0] for line in out[1:4]] == ["epoch 1/3", "epoch 2/3", "epoch 3/3"]
    assert (training.workspace / "checkpoint" / "epoch.txt").read_text() == "3"
    # Started again with more epochs, it resumes from its own counter file.
    more = JobRun(
        job_id="train",
        spec=spec("pytorch", env={"EPOCHS": "4", "EPOCH_SECONDS": "0"}),
        workspace=training.workspace,
        limits=LIMITS,
    )
    status, lines = run_job(executor, more, script)
    assert status.outcome == "completed"
    assert texts(lines)[:2][0] == "resuming from epoch 3"
    assert os.path.getsize(training.workspace / "outputs" / "model.pt") > 0


FILL_SMALL_FILES = """
import time
from pathlib import Path
for i in range(12):
    Path(f"part-{i}.bin").write_bytes(b"x" * (1 << 20))  # 1 MB each, each under the limit
print("written", flush=True)
time.sleep(60)
print("never printed")
"""
ONE_BIG_FILE = """
with open("big.bin", "wb") as out:
    for _ in range(8):
        out.write(b"x" * (1 << 20))
        out.flush()
print("all written")
"""


def test_a_job_holding_more_than_its_specs_disk_is_stopped(tmp_path: Path) -> None:
    limits = Limits(memory_mb=512, cpu_cores=1.0, timeout_s=60, disk_mb=4)
    status, lines = run_job(ProcessExecutor(), new_run(tmp_path, spec(), limits), FILL_SMALL_FILES)
    assert status.outcome == "failed", (status, lines)
    assert status.reason.startswith("used "), status
    assert status.reason.endswith("MB of disk in /workspace, over the 4 MB its resource spec sells")
    assert "never printed" not in texts(lines)
    assert any(line.stream == "system" and "over the 4 MB" in line.text for line in lines)


def test_one_file_cannot_grow_past_the_specs_disk_between_two_walks(tmp_path: Path) -> None:
    limits = Limits(memory_mb=512, cpu_cores=1.0, timeout_s=60, disk_mb=3)
    run = new_run(tmp_path, spec(), limits)
    status, lines = run_job(ProcessExecutor(), run, ONE_BIG_FILE)
    assert status.outcome == "failed", (status, lines)
    assert status.reason == "wrote a file past the 3 MB of disk its resource spec sells"
    assert (run.workspace / "big.bin").stat().st_size <= 3 << 20


def test_without_a_disk_in_its_spec_a_job_writes_what_it_needs(tmp_path: Path) -> None:
    limits = Limits(memory_mb=512, cpu_cores=1.0, timeout_s=60)
    run = new_run(tmp_path, spec(), limits)
    status, lines = run_job(ProcessExecutor(), run, ONE_BIG_FILE)
    assert status.outcome == "completed", (status, lines)
    assert texts(lines) == ["all written"]
    assert (run.workspace / "big.bin").stat().st_size == 8 << 20


def test_a_job_outlives_the_worker_thread_that_started_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 20's regression: trio starts the job's process from a worker thread that ends
    after IDLE_TIMEOUT (10 s) idle, and the job's guard died with that thread (exit 137 at
    10-30 s while the provider ran on). Here threads end after 0.2 s idle: a 3 s job still
    completes; and a job ended by a signal is logged with its cause."""
    from trio._core import _thread_cache

    assert _thread_cache.IDLE_TIMEOUT == 10  # what the regression hid behind
    monkeypatch.setattr(_thread_cache, "IDLE_TIMEOUT", 0.2)
    script = "import time\nprint('started', flush=True)\ntime.sleep(3)\nprint('done')\n"
    status, lines = run_job(ProcessExecutor(), new_run(tmp_path, spec()), script)
    assert (status.outcome, status.exit_code) == ("completed", 0)
    assert texts(lines) == ["started", "done"]

    limits = Limits(memory_mb=512, cpu_cores=1.0, timeout_s=1.5)
    nunet = logging.getLogger("nunet")  # may not propagate (see the test above)
    nunet.addHandler(caplog.handler)
    try:
        with caplog.at_level("WARNING", logger="nunet.jobs.process"):
            run = new_run(tmp_path / "t", spec(), limits)
            status, _ = run_job(ProcessExecutor(), run, FOREVER)
    finally:
        nunet.removeHandler(caplog.handler)
    assert status.outcome == "timeout"
    assert "job job-1 ended by SIGKILL: timeout, ran past its time limit" in caplog.text


class SlowResume(ProcessExecutor):
    """Resumes as the Docker executor does: through a call that yields (to dockerd)."""

    async def _resume(self, state: Any) -> None:
        await trio.sleep(0.05)
        await super()._resume(state)


def test_a_checkpoint_its_caller_gave_up_on_never_leaves_the_job_frozen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20 §3: a checkpoint cancelled while the job was paused (its caller timed out)
    skipped the resume, and the job stayed frozen. The resume is shielded now; and the time
    the job spent frozen is not billed."""
    from engine.jobs import checkpoints

    real = checkpoints.snapshot

    def slow_snapshot(*args: Any) -> Any:
        time.sleep(1.0)  # a slow disk: the job is frozen all along
        return real(*args)

    monkeypatch.setattr(checkpoints, "snapshot", slow_snapshot)
    executor = SlowResume()
    run = new_run(tmp_path, spec())
    script = "import time\nfor i in range(10):\n    print(i, flush=True)\n    time.sleep(0.1)\n"

    async def main() -> tuple[ExitStatus, float, float]:
        async with running(executor):
            await executor.prepare(run, script.encode())
            started = time.monotonic()
            await executor.start(run)
            await trio.sleep(0.3)
            # Cancelled while the snapshot runs: the old resume, unshielded, never ran.
            with trio.move_on_after(0.2):
                await executor.checkpoint(run, tmp_path / "checkpoints")
            with trio.fail_after(30):  # a frozen job would never get here
                status = (await collect(executor, run))[0]
            return status, time.monotonic() - started, executor.usage(run).wall_s

    status, elapsed, billed = trio.run(main)
    assert status.outcome == "completed"
    assert billed <= elapsed - 0.9, (billed, elapsed)  # the second frozen is not billed
