"""A distributed step's gang (issue 25 §2): the spec's checks, what each slot is offered, the
environment its replica starts with, and the members a start may name."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from engine.domain.gang import (
    address_of,
    gang_command,
    gang_env,
    members_problem,
    slot_spec,
    subnet_of,
)
from engine.domain.spec import GangSlot, JobSpec, StepSpec, load_job_file, offer_spec, validate_spec
from engine.jobs import protocol as p
from engine.jobs.executors.base import Limits
from engine.jobs.executors.steps import replicas_of
from tests.engine.test_jobs_process import new_run

BASE = {"framework": "pytorch", "script_url": "https://example.org/train.py"}
STEPS = (
    StepSpec(name="prepare", command="python3 train.py prepare"),
    StepSpec(name="train", replicas=2, distributed=True),
)
EXAMPLE = Path(__file__).parents[2] / "examples" / "jobs" / "ddp" / "job.toml"


def _fields(spec: JobSpec) -> dict[str, str]:
    return {problem.field: problem.message for problem in validate_spec(spec).problems}


def test_the_example_is_a_two_rank_gang_that_needs_one_replica_a_provider() -> None:
    spec = load_job_file(EXAMPLE, base_url="http://127.0.0.1/")
    assert [step.distributed for step in spec.subtasks] == [False, True, False]
    assert spec.most_replicas() == 1  # what one provider runs at once, and locks for


def test_a_distributed_step_and_a_slot_are_checked_by_field() -> None:
    two = (
        StepSpec(name="a", replicas=2, distributed=True),
        StepSpec(name="b", replicas=1, distributed=True),
    )
    problems = _fields(JobSpec(**BASE, subtasks=two))  # type: ignore[arg-type]
    assert "one distributed step a job" in problems["subtasks[2].distributed"]
    lonely = (StepSpec(name="a", replicas=1, distributed=True),)
    problems = _fields(JobSpec(**BASE, subtasks=lonely))  # type: ignore[arg-type]
    assert "2 to 64 replicas" in problems["subtasks[1].replicas"]
    bad = GangSlot(gang_id="../x", rank=2, world_size=3)
    problems = _fields(JobSpec(**BASE, subtasks=STEPS, gang=bad))  # type: ignore[arg-type]
    assert set(problems) >= {"gang.gang_id", "gang.rank", "gang.world_size"}
    slot = GangSlot(gang_id="ab", rank=0, world_size=2)
    problems = _fields(JobSpec(**BASE, gang=slot))  # type: ignore[arg-type]
    assert "only a job with a distributed step" in problems["gang"]


@pytest.mark.parametrize("name", ["RANK", "WORLD_SIZE", "MASTER_ADDR", "GLOO_SOCKET_IFNAME"])
def test_the_gang_names_are_reserved(name: str) -> None:
    problems = _fields(JobSpec(**BASE, env={name: "x"}))  # type: ignore[arg-type]
    assert f"{name} is reserved" in problems["env"]


def test_a_slot_offer_carries_its_rank_and_an_ordinary_one_no_new_field() -> None:
    plain = offer_spec(JobSpec(**BASE, subtasks=(StepSpec(name="a"),)))  # type: ignore[arg-type]
    assert "gang" not in plain and "distributed" not in plain["subtasks"][0]
    spec = slot_spec(JobSpec(**BASE, subtasks=STEPS), "0a1b", 1)  # type: ignore[arg-type]
    offered = offer_spec(spec)
    assert offered["gang"] == {"gang_id": "0a1b", "rank": 1, "world_size": 2}
    assert not validate_spec(spec).problems
    assert msgspec.convert(offered, JobSpec) == spec


def test_a_slot_runs_its_rank_only_with_torchruns_environment(tmp_path: Path) -> None:
    spec = slot_spec(JobSpec(**BASE, subtasks=STEPS), "0a1b", 1)  # type: ignore[arg-type]
    limits = Limits(memory_mb=512, cpu_cores=1.0, timeout_s=60.0, pids=64)
    replicas = replicas_of(new_run(tmp_path, spec, limits))
    assert [(r.name, r.index, r.distributed) for r in replicas] == [
        ("prepare", 0, False),
        ("train", 1, True),
    ]
    env = replicas[1].run.spec.env
    subnet = subnet_of("0a1b")
    assert subnet.startswith("10.") and subnet.endswith(".0/24")
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2" and env["LOCAL_RANK"] == "0"
    assert env["MASTER_ADDR"] == address_of("0a1b", 0) == subnet.replace(".0/24", ".1")
    assert env["MASTER_PORT"] == "29500" and env["GLOO_SOCKET_IFNAME"] == "nunet0"
    assert "RANK" not in replicas[0].run.spec.env  # an ordinary step's replica is as before
    assert gang_env(spec.gang) == {k: env[k] for k in gang_env(spec.gang)}  # type: ignore[arg-type]
    wrapped = gang_command(("python3", "train.py"))
    assert wrapped[:2] == ("python3", "-c") and wrapped[-2:] == ("python3", "train.py")


def test_a_start_names_each_rank_once_and_ours_at_our_rank() -> None:
    slot = GangSlot(gang_id="ab", rank=1, world_size=2)
    assert members_problem(slot, ("peer-a", "me"), "me") == ""
    assert "2 slots" in members_problem(slot, ("me",), "me")
    assert "one provider for two ranks" in members_problem(slot, ("me", "me"), "me")
    assert "another provider" in members_problem(slot, ("me", "peer-b"), "me")


def test_a_gang_start_is_bounded_on_the_wire() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(
            {"t": "gang_start", "job_id": "j1", "gang_id": "ab", "members": ["x"] * 65},
            p.GangStart,
        )
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(
            {"t": "gang_start", "job_id": "j1", "gang_id": "../a", "members": ["x", "y"]},
            p.GangStart,
        )


def test_job_show_lists_each_rank_its_job_provider_and_state() -> None:
    from engine import api
    from nunet_tui.cli.job_output import _detail

    spec = slot_spec(JobSpec(**BASE, subtasks=STEPS), "0a1b", 0)  # type: ignore[arg-type]
    job = api.JobInfo(
        job_id="j0",
        role="consumer",
        state="cancelled",
        provider="12D3KooWprovider0",
        consumer="me",
        spec=spec,
        gang=(
            api.GangMember(rank=0, job_id="j0", provider="12D3KooWprovider0", state="cancelled"),
            api.GangMember(
                rank=1,
                job_id="j1",
                provider="12D3KooWprovider1",
                state="failed",
                reason="[red]boom[/red]\x1b[2J",
            ),
        ),
    )
    text = _detail(job)
    assert "gang      0a1b: 2 ranks, one job each" in text
    line = next(line for line in text.splitlines() if "rank 1" in line)
    assert "j1" in line and "failed" in line and "\x1b" not in line


def test_the_job_view_names_the_slots_rank_and_lists_the_gang() -> None:
    from engine import api
    from nunet_tui.viewmodels.steps import gang_facts

    spec = slot_spec(JobSpec(**BASE, subtasks=STEPS), "0a1b", 1)  # type: ignore[arg-type]
    job = api.JobInfo(
        job_id="j1", role="consumer", state="running", provider="p1", consumer="me", spec=spec
    )
    assert gang_facts(job) == [("Gang", "0a1b · rank 1 of 2")]
    member = api.GangMember(rank=0, job_id="j0", provider="p0\x1b[2J", state="running")
    rows = gang_facts(msgspec.structs.replace(job, gang=(member,)))
    assert rows[1][0] == " rank 0" and "j0" in rows[1][1] and "\x1b" not in rows[1][1]
    plain = api.JobInfo(
        job_id="x", role="consumer", state="running", provider="p", consumer="me", spec=STEPS_SPEC
    )
    assert gang_facts(plain) == []


STEPS_SPEC = JobSpec(**BASE, subtasks=(StepSpec(name="a"),))  # type: ignore[arg-type]


def test_a_slots_steps_fit_its_spec_with_one_replica_of_the_distributed_step() -> None:
    spec = slot_spec(JobSpec(**BASE, subtasks=STEPS), "0a1b", 1)  # type: ignore[arg-type]
    from engine import api

    one = (api.ReplicaInfo(state="done"),)
    steps = (api.StepInfo(name="prepare", replicas=one), api.StepInfo(name="train", replicas=one))
    assert p.steps_fit(spec, steps)
    two = (api.StepInfo(name="prepare", replicas=one), api.StepInfo(name="train", replicas=one * 2))
    assert not p.steps_fit(spec, two)  # a second replica would bill what nobody asked


def test_a_step_line_says_distributed_and_reads_back() -> None:
    from engine.domain.step_lines import parse_steps, step_line

    steps = parse_steps("prep: python3 prep.py\ntrain x 2 distributed: python3 train.py")
    assert steps[1] == StepSpec(
        name="train", command="python3 train.py", replicas=2, distributed=True
    )
    assert step_line(steps[1]) == "train x 2 distributed: python3 train.py"
    assert parse_steps(step_line(steps[1])) == steps[1:]
    assert not parse_steps("distributed: echo hi")[0].distributed  # a step of that name
