"""A job's steps and replicas (issue 25 §1) on the process executor; the same cases run on the
Docker executor in tests/docker/test_job_steps_docker.py.

prepare (a shell command) -> train x 2 (the job's script, REPLICA_INDEX/REPLICAS set) ->
evaluate (a script of the job's reading what both replicas wrote), in one workspace."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import trio

from engine.domain.spec import StepSpec
from engine.jobs.executors.base import BaseExecutor, ExitStatus, JobRun, LogLine, running
from engine.jobs.executors.process import ProcessExecutor
from tests.engine.test_jobs_process import LIMITS, collect, new_run, spec

TRAIN = """
import os, pathlib, sys, time
i = int(os.environ["REPLICA_INDEX"])
seed = pathlib.Path("outputs/seed.txt").read_text().strip()
pathlib.Path(f"outputs/r{i}.txt").write_text(f"{seed} {i}/{os.environ['REPLICAS']}\\n")
print("replica", i, "of", os.environ["REPLICAS"], flush=True)
if os.environ.get("FAIL_AT") == str(i):
    print("boom", file=sys.stderr)
    sys.exit(3)
if os.environ.get("SLOW_AT") == str(i):
    time.sleep(300)
"""
STEPS = (
    StepSpec(
        name="prepare",
        command="""python3 -c "open('outputs/seed.txt', 'w').write('seed-42')" """,
    ),
    StepSpec(name="train", replicas=2),
    StepSpec(name="evaluate", script="evaluate.py"),
)


EVALUATE = "for i in (0, 1):\n    print(open(f'outputs/r{i}.txt').read().strip())\n"


def steps_run(tmp_path: Path, **env: str) -> JobRun:
    run = new_run(tmp_path, spec(subtasks=STEPS, env=env), LIMITS)
    run.workspace.mkdir(parents=True)
    (run.workspace / "evaluate.py").write_text(EVALUATE)  # a script of the job's code
    return run


def run_steps(
    executor: BaseExecutor, run: JobRun, *, cancel_when: str | None = None
) -> tuple[ExitStatus, list[LogLine]]:
    """prepare + start + every line + the status; ``cancel_when``: cancel on that line."""

    async def main() -> tuple[ExitStatus, list[LogLine]]:
        async with running(executor), trio.open_nursery() as nursery:
            await executor.prepare(run, TRAIN.encode())
            changes: list[int] = []
            executor.watch_replicas(run, lambda: changes.append(1))
            await executor.start(run)
            if cancel_when is not None:

                async def cancel() -> None:
                    async for line in executor.logs(run):
                        if line.text == cancel_when:
                            await executor.cancel(run, "cancelled by the consumer")
                            return

                nursery.start_soon(cancel)
            status, lines = await collect(executor, run)
            assert changes  # the provider heard of each start and end
            return status, lines

    return trio.run(main)


def check_three_steps(executor: BaseExecutor, tmp_path: Path) -> None:
    run = steps_run(tmp_path)
    status, lines = run_steps(executor, run)
    assert status.outcome == "completed", status
    stdout = [line.text for line in lines if line.stream == "stdout"]
    # Each line tagged with its step and replica (1-based), in one log.
    assert "[train#1] replica 0 of 2" in stdout and "[train#2] replica 1 of 2" in stdout
    assert stdout[-2:] == ["[evaluate#1] seed-42 0/2", "[evaluate#1] seed-42 1/2"]
    replicas = executor.replicas(run)
    assert [(r.name, r.index, r.state) for r in replicas] == [
        ("prepare", 0, "done"),
        ("train", 0, "done"),
        ("train", 1, "done"),
        ("evaluate", 0, "done"),
    ]
    for replica in replicas:
        assert replica.started_at is not None and replica.ended_at is not None
        assert replica.ended_at >= replica.started_at and replica.exit_code == 0
    # The steps ran in order: a step starts only once the one before has ended.
    prepare, train0, train1, evaluate = replicas
    assert prepare.ended_at is not None and evaluate.started_at is not None
    assert min(train0.started_at or 0, train1.started_at or 0) >= prepare.ended_at
    assert evaluate.started_at >= max(train0.ended_at or 0, train1.ended_at or 0)
    assert executor.usage(run).wall_s > 0


def check_a_failing_replica_ends_the_job(executor: BaseExecutor, tmp_path: Path) -> None:
    """Replica 2 of train fails while replica 1 still runs: replica 1 is stopped, evaluate
    never starts, and the job fails naming the step and the replica."""
    run = steps_run(tmp_path, FAIL_AT="1", SLOW_AT="0")
    status, lines = run_steps(executor, run)
    assert status.outcome == "failed"
    assert status.reason.startswith("step 'train' replica 2/2: exit code 3: boom"), status
    assert status.exit_code == 3
    states = [(r.name, r.index, r.state) for r in executor.replicas(run)]
    assert states == [
        ("prepare", 0, "done"),
        ("train", 0, "stopped"),
        ("train", 1, "failed"),
        ("evaluate", 0, "waiting"),
    ]
    evaluate = executor.replicas(run)[-1]
    assert evaluate.started_at is None and evaluate.ended_at is None  # never started: no span
    assert "[train#2] boom" in [line.text for line in lines if line.stream == "stderr"]


def check_cancel_stops_every_replica(executor: BaseExecutor, tmp_path: Path) -> None:
    run = steps_run(tmp_path, SLOW_AT="0")
    status, _ = run_steps(executor, run, cancel_when="[train#1] replica 0 of 2")
    assert (status.outcome, status.reason) == ("cancelled", "cancelled by the consumer")
    states = {(r.name, r.index): r.state for r in executor.replicas(run)}
    assert states[("train", 0)] == "stopped" and states[("evaluate", 0)] == "waiting"


def test_three_steps_in_one_workspace(tmp_path: Path) -> None:
    check_three_steps(ProcessExecutor(), tmp_path)


def test_a_failing_replica_ends_the_job_with_its_step_named(tmp_path: Path) -> None:
    check_a_failing_replica_ends_the_job(ProcessExecutor(), tmp_path)


def test_cancelling_a_job_with_steps_stops_its_replicas(tmp_path: Path) -> None:
    check_cancel_stops_every_replica(ProcessExecutor(), tmp_path)


def test_a_job_with_steps_ends_at_its_time_limit_with_its_replicas(tmp_path: Path) -> None:
    """The job's time limit bounds all its steps: the running replicas are stopped, each
    ends (its span closed, so it bills up to then), and later steps never start."""
    limits = dataclasses.replace(LIMITS, timeout_s=2.0)
    run = new_run(tmp_path, spec(subtasks=STEPS, env={"SLOW_AT": "0"}), limits)
    run.workspace.mkdir(parents=True)
    executor = ProcessExecutor()
    status, _ = run_steps(executor, run)
    assert status.outcome == "timeout"
    states = [(r.name, r.state) for r in executor.replicas(run)]
    assert states == [("prepare", "done"), ("train", "failed"), ("train", "done"),
                      ("evaluate", "waiting")]  # fmt: skip
    slow = executor.replicas(run)[1]
    assert slow.ended_at is not None and "time limit" in slow.reason
