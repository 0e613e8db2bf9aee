"""The Docker executor against a real dockerd, with the test image built from Debian packages.

What a job from another peer may do in its container, checked from inside: no network, a
read-only root, no capabilities, no new privileges, a pids limit; and how runs end (completed,
failed, oom, timeout, cancelled), cleanup by label after a crash, checkpoints and restore.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import trio

from engine.jobs.executors import disk_quota
from engine.jobs.executors.base import BaseExecutor, ExitStatus, JobRun, Limits, LogLine, running
from engine.jobs.executors.docker import LABEL_JOB, LABEL_NODE, DockerExecutor
from engine.jobs.executors.dockerlogs import FrameParser, merged
from engine.jobs.results import safe_unpack
from engine.resources.container_host import ContainerFacts
from tests import docker_fixture
from tests.engine.test_jobs_process import (
    EPOCHS,
    EXAMPLES,
    FAIL,
    FILL_SMALL_FILES,
    FOREVER,
    LIVE,
    ONE_BIG_FILE,
    collect,
    make_wheel,
    new_run,
    run_job,
    spec,
    texts,
)

docker_host = docker_fixture.docker_host  # the shared session fixtures
sklearn_image = docker_fixture.sklearn_image
LIMITS = Limits(memory_mb=512, cpu_cores=1.0, timeout_s=120.0, pids=64)
NODE = "node-docker-test"

SANDBOX = """
import os, socket, threading, time
try:
    socket.create_connection(("10.1.2.3", 80), timeout=3)
    print("network: open")
except OSError as exc:
    print(f"network: closed ({exc.strerror or exc})")
try:
    open("/usr/evil", "w")
    print("root: writable")
except OSError as exc:
    print(f"root: {exc.strerror}")
open("/tmp/scratch", "w").write("ok")
print("tmp: writable")
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print("CapEff:", status["CapEff"].strip())
print("NoNewPrivs:", status["NoNewPrivs"].strip())
print("uid:", os.getuid())
started = 0
try:
    for _ in range(200):
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
        started += 1
except RuntimeError:
    pass
print("threads:", started)
"""
HOG = """
print("allocating", flush=True)
blocks = [bytearray(64 << 20) for _ in range(32)]
print("allocated", len(blocks))
"""


@pytest.fixture
def executor(docker_host: str, sklearn_image: str) -> DockerExecutor:
    return DockerExecutor(
        container_host=ContainerFacts(),
        node_id=NODE,
        docker_host=docker_host,
        install_network="none",
    )


def ours(executor: DockerExecutor) -> list[Any]:
    filters = {"label": f"{LABEL_NODE}={NODE}"}
    return list(executor.client().containers.list(all=True, filters=filters))


def test_iris_in_a_container(executor: DockerExecutor, tmp_path: Path) -> None:
    run = new_run(tmp_path, spec(), LIMITS)
    status, lines = run_job(executor, run, (EXAMPLES / "iris" / "train.py").read_bytes())
    assert status == ExitStatus(0, "completed", ""), lines
    assert any(line.startswith("accuracy: 0.9") for line in texts(lines))
    usage = executor.usage(run)
    assert usage.wall_s > 0 and usage.net_rx_bytes in (0, None)

    async def results() -> Path:
        archive = await executor.collect_results(run, tmp_path / "archives")
        return safe_unpack(archive.path, tmp_path / "results", run.job_id)

    assert '"accuracy"' in (trio.run(results) / "outputs" / "metrics.json").read_text()
    assert ours(executor) == []  # removed once its logs were read


def test_the_sandbox_from_inside(executor: DockerExecutor, tmp_path: Path) -> None:
    status, lines = run_job(executor, new_run(tmp_path, spec(), LIMITS), SANDBOX)
    assert status.outcome == "completed", lines
    out = dict(line.split(": ", 1) for line in texts(lines))
    assert out["network"] == "closed (Network is unreachable)"
    assert out["root"] == "Read-only file system"
    assert out["tmp"] == "writable"
    assert out["CapEff"] == "0000000000000000"
    assert out["NoNewPrivs"] == "1"
    assert out["uid"] != "0"
    assert int(out["threads"]) < LIMITS.pids  # the pids limit stopped it


def test_live_logs_and_a_failure(executor: DockerExecutor, tmp_path: Path) -> None:
    status, lines = run_job(executor, new_run(tmp_path, spec(), LIMITS, "live"), LIVE)
    assert status.outcome == "completed"
    printed = [line for line in lines if line.stream != "system"]
    assert [line.stream for line in printed] == ["stdout"] * 4 + ["stderr"]
    for line in printed:
        delay = line.at - float(line.text.rsplit(" ", 1)[1])
        assert delay < 1.0, f"{line.text!r} arrived {delay:.3f} s after it was printed"

    status, lines = run_job(executor, new_run(tmp_path, spec(), LIMITS, "fail"), FAIL)
    assert (status.outcome, status.exit_code) == ("failed", 1)
    assert status.reason == "exit code 1: ValueError: shapes (5, 2) and (3, 2) do not add up"
    assert "Traceback (most recent call last):" in texts(lines, "stderr")


def test_out_of_memory(executor: DockerExecutor, tmp_path: Path) -> None:
    limits = Limits(memory_mb=128, cpu_cores=1.0, timeout_s=60)
    status, lines = run_job(executor, new_run(tmp_path, spec(), limits), HOG)
    assert status.outcome == "oom", (status, lines)
    assert status.exit_code == 137
    assert "128 MB" in status.reason


def test_the_specs_disk_bounds_the_workspace(executor: DockerExecutor, tmp_path: Path) -> None:
    # Many files, each under the limit: the walk stops it.
    limits = Limits(memory_mb=256, cpu_cores=1.0, timeout_s=60, disk_mb=4)
    status, lines = run_job(executor, new_run(tmp_path, spec(), limits), FILL_SMALL_FILES)
    assert status.outcome == "failed", (status, lines)
    assert status.reason.endswith("over the 4 MB its resource spec sells"), status
    # One file past it: the container's file-size limit, before any walk.
    limits = Limits(memory_mb=256, cpu_cores=1.0, timeout_s=60, disk_mb=3)
    run = new_run(tmp_path, spec(), limits, job_id="job-2")
    status, lines = run_job(executor, run, ONE_BIG_FILE)
    assert status.outcome == "failed", (status, lines)
    assert status.reason == "wrote a file past the 3 MB of disk its resource spec sells"
    assert (run.workspace / "big.bin").stat().st_size <= 3 << 20


FILES_IN_TMP_AND_WORKSPACE = """
import os, time
made = 0
try:
    for number in range(5_000):
        open(f"/tmp/f{number}", "w").close()
        made += 1
except OSError as exc:
    print(f"tmp: {made} files, then {exc.strerror}", flush=True)
os.makedirs("many")
for number in range(5_000):
    open(f"many/f{number}", "w").close()
print("workspace: 5000 files", flush=True)
time.sleep(60)
print("never printed")
"""


def test_files_are_capped_in_tmp_and_the_workspace(
    executor: DockerExecutor, tmp_path: Path
) -> None:
    """Issue 21: empty files fill inodes, not bytes. /tmp (a tmpfs) holds at most max_files
    inodes; the workspace's walk stops the job past them, with the reason."""
    limits = Limits(memory_mb=256, cpu_cores=1.0, timeout_s=60, max_files=2_000)
    status, lines = run_job(executor, new_run(tmp_path, spec(), limits), FILES_IN_TMP_AND_WORKSPACE)
    out = texts(lines)
    made = next(int(line.split()[1]) for line in out if line.startswith("tmp: "))
    assert made < 2_000 and "No space left on device" in out[0], out
    assert status.outcome == "failed", (status, lines)
    assert status.reason == disk_quota.too_many_files_reason(2_000), status
    assert "never printed" not in out


def test_cancel_and_timeout(executor: DockerExecutor, tmp_path: Path) -> None:
    async def cancel_when_started(executor: BaseExecutor, run: JobRun) -> None:
        async for line in executor.logs(run):
            if line.text == "started":
                await executor.cancel(run)
                return

    began = time.monotonic()
    run = new_run(tmp_path, spec(), LIMITS, "cancel")
    status, _ = run_job(executor, run, FOREVER, cancel_when_started)
    assert (status.outcome, status.reason) == ("cancelled", "cancelled by the consumer")
    assert time.monotonic() - began < 20

    limits = Limits(memory_mb=256, cpu_cores=1.0, timeout_s=2.0)
    status, lines = run_job(executor, new_run(tmp_path, spec(), limits, "slow"), FOREVER)
    assert status.outcome == "timeout" and "time limit of 2 s" in status.reason
    assert texts(lines) == ["started"]
    assert ours(executor) == []


def test_a_frozen_container_still_ends_at_its_time_limit(
    executor: DockerExecutor, tmp_path: Path
) -> None:
    """Issue 20 §3: a container a checkpoint left paused still ends at its time limit (the
    executor unpauses it before the kill), and its frozen time is not billed."""

    async def freeze_when_started(executor: BaseExecutor, run: JobRun) -> None:
        async for line in executor.logs(run):
            if line.text == "started":
                await executor._pause(executor.state(run))  # a checkpoint that never resumes
                executor.state(run).meter.freeze()
                return

    began = time.monotonic()
    limits = Limits(memory_mb=256, cpu_cores=1.0, timeout_s=3.0)
    run = new_run(tmp_path, spec(), limits, "frozen")
    status, lines = run_job(executor, run, FOREVER, freeze_when_started)
    assert status.outcome == "timeout" and "time limit of 3 s" in status.reason
    assert time.monotonic() - began < 30
    assert texts(lines) == ["started"]
    assert executor.usage(run).wall_s < 2.5  # from its start to the freeze, not to the kill
    assert ours(executor) == []


def test_a_pause_whose_answer_times_out_leaves_no_container_frozen(
    executor: DockerExecutor, tmp_path: Path
) -> None:
    """Issue 20 §3: dockerd paused the container but its answer timed out (120 s, a busy
    engine); the checkpoint failed before it knew the job was paused, never resumed it, and
    the job stayed frozen for 13 minutes. Now the checkpoint fails and the job runs on."""
    seen: list[str] = []

    async def pause_times_out_when_started(executor: BaseExecutor, run: JobRun) -> None:
        async for line in executor.logs(run):
            if line.text == "started":
                container = executor._containers[run.job_id]  # type: ignore[attr-defined]
                pause = container.pause

                def pause_then_time_out(pause: Any = pause) -> None:
                    pause()
                    raise requests.exceptions.ReadTimeout("Read timed out. (read timeout=120)")

                container.pause = pause_then_time_out
                with pytest.raises(requests.exceptions.ReadTimeout):
                    await executor.checkpoint(run, tmp_path / "checkpoints")
                await trio.to_thread.run_sync(container.reload)
                seen.append(container.attrs["State"]["Status"])
                await executor.cancel(run)
                return

    run = new_run(tmp_path, spec(), LIMITS, "pause-timeout")
    status, _ = run_job(executor, run, FOREVER, pause_times_out_when_started)
    assert seen == ["running"]
    assert status.outcome == "cancelled"
    assert ours(executor) == []


def test_orphans_are_removed_by_label(executor: DockerExecutor, sklearn_image: str) -> None:
    client = executor.client()
    labels = {LABEL_JOB: "orphan-1", LABEL_NODE: NODE}
    client.containers.create(sklearn_image, ["python3", "-c", "pass"], labels=labels)
    other = client.containers.create(
        sklearn_image, ["python3", "-c", "pass"], labels={LABEL_JOB: "x", LABEL_NODE: "other"}
    )
    try:
        assert len(ours(executor)) == 1

        async def restart() -> None:
            async with running(executor):  # serve cleans up what a crash left behind
                pass

        trio.run(restart)
        assert ours(executor) == []
        assert client.containers.get(other.id)  # another node's containers are not ours
    finally:
        other.remove(force=True)


def test_a_checkpoint_just_after_the_exit_needs_no_pause(
    executor: DockerExecutor, sklearn_image: str, tmp_path: Path
) -> None:
    # The supervisor reads a container's last lines after it exited; a periodic checkpoint
    # then could not pause it (409), and the error took the provider's engine down.
    client = executor.client()
    container = client.containers.create(
        sklearn_image, ["python3", "-c", "pass"], labels={LABEL_NODE: NODE}
    )
    try:
        container.start()
        container.wait()
        run = new_run(tmp_path, spec(), LIMITS, "exited")
        run.workspace.mkdir(parents=True)
        state = executor._new_state(run)
        state.started = True
        executor._containers[run.job_id] = container

        async def checkpoint() -> Any:
            return await executor.checkpoint(run, tmp_path / "checkpoints")

        assert trio.run(checkpoint).number == 1
    finally:
        container.remove(force=True)


def test_frames_cut_anywhere_come_out_whole() -> None:
    stream = b"".join(
        struct.pack(">BxxxL", kind, len(payload)) + payload
        for kind, payload in [(1, b"out 1\n"), (2, b"err 1\n"), (1, b""), (1, b"out 2\n")]
    )
    for cut in range(len(stream) + 1):
        parser = FrameParser()
        frames = parser.feed(stream[:cut]) + parser.feed(stream[cut:])
        assert frames == [("stdout", b"out 1\n"), ("stderr", b"err 1\n"), ("stdout", b"out 2\n")]
    assert merged([("stdout", b"a\n"), ("stdout", b"b\n"), ("stderr", b"c\n")]) == [
        ("stdout", b"a\nb\n"),
        ("stderr", b"c\n"),
    ]


def test_a_flood_of_lines_arrives_whole_and_fast(executor: DockerExecutor, tmp_path: Path) -> None:
    # Docker sends a frame per line; the reader takes them in bulk from the attached stream.
    flood = "import sys\nw = sys.stdout.write\nfor i in range(100_000):\n    w(f'{i}\\n')\n"
    began = time.monotonic()
    status, lines = run_job(executor, new_run(tmp_path, spec(), LIMITS, "flood"), flood)
    assert status.outcome == "completed"
    assert texts(lines) == [str(i) for i in range(100_000)]
    assert time.monotonic() - began < 20


def test_dependencies_install_in_their_own_step(executor: DockerExecutor, tmp_path: Path) -> None:
    wheel = "file:///workspace/wheels/nunetdep-1.0-py3-none-any.whl"
    run = new_run(tmp_path, spec(deps=(f"nunetdep @ {wheel}",)), LIMITS)
    make_wheel(run.workspace / "wheels")
    status, lines = run_job(executor, run, "import nunetdep\nprint(nunetdep.ANSWER)\n")
    assert status.outcome == "completed", lines
    assert texts(lines) == ["42"]
    assert (run.workspace / ".deps" / "nunetdep" / "__init__.py").exists()


def test_checkpoint_restore_resumes(executor: DockerExecutor, tmp_path: Path) -> None:
    store = tmp_path / "checkpoints"

    async def checkpoint_then_stop(executor: BaseExecutor, run: JobRun) -> None:
        async for line in executor.logs(run):
            if line.text == "epoch 2 done":
                await executor.checkpoint(run, store)  # paused while the tar is written
                await executor.cancel(run, "provider killed")
                return

    first = new_run(tmp_path, spec(env={"PAUSE": "0.5"}), LIMITS)
    status, _ = run_job(executor, first, EPOCHS, checkpoint_then_stop)
    assert status.outcome == "cancelled"
    from engine.jobs.checkpoints import latest

    checkpoint = latest(store)
    assert checkpoint is not None
    second = new_run(tmp_path / "restart", spec(env={"PAUSE": "0"}), LIMITS)

    async def resume() -> tuple[ExitStatus, list[LogLine]]:
        async with running(executor):
            await executor.restore(second, checkpoint)
            await executor.prepare(second, EPOCHS.encode())
            await executor.start(second)
            return await collect(executor, second)

    status, lines = trio.run(resume)
    assert status.outcome == "completed", lines
    assert lines[0].text == "resumed from checkpoint 1"
    assert texts(lines)[0] in ("resuming from epoch 2", "resuming from epoch 3")
