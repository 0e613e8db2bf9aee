"""A job's steps (issue 25 §1): the spec's ``subtasks``, their checks per field, their TOML and
their one-line form (the CLI's --step, the submit form's steps box)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.domain.spec import JobSpec, StepSpec, load_job_file, offer_spec, validate_spec
from engine.domain.step_lines import parse_steps, step_line
from engine.errors import EngineError
from nunet_tui.cli.job_output import _spec
from nunet_tui.cli.main import build_parser

BASE = {"framework": "scikit-learn", "script_url": "https://example.org/train.py"}


def _fields(spec: JobSpec) -> dict[str, str]:
    return {problem.field: problem.message for problem in validate_spec(spec).problems}


def test_a_spec_without_steps_is_as_before_and_its_offer_does_not_name_them() -> None:
    spec = JobSpec(**BASE)  # type: ignore[arg-type]
    assert spec.subtasks == () and spec.most_replicas() == 1
    assert "subtasks" not in offer_spec(spec)
    assert not validate_spec(spec).problems


def test_each_bad_step_is_named_by_its_field() -> None:
    steps = (
        StepSpec(name="prepare", command="python3 prepare.py"),
        StepSpec(name="prepare", replicas=0),
        StepSpec(name="../etc", command="true", script="x.py"),
        StepSpec(name="eval", script="/etc/passwd", replicas=65),
    )
    problems = _fields(JobSpec(**BASE, subtasks=steps))  # type: ignore[arg-type]
    assert "named twice" in problems["subtasks[2].name"]
    assert "1 to 64, not 0" in problems["subtasks[2].replicas"]
    assert "not a step name" in problems["subtasks[3].name"]
    assert "not both" in problems["subtasks[3]"]
    assert "absolute" in problems["subtasks[4].script"]
    assert "not 65" in problems["subtasks[4].replicas"]
    assert "subtasks[1].name" not in problems


def test_too_many_or_too_long_steps_are_refused_on_that_alone() -> None:
    many = tuple(StepSpec(name=f"s{i}") for i in range(17))
    assert "at most 16" in _fields(JobSpec(**BASE, subtasks=many))["subtasks"]  # type: ignore[arg-type]
    long = (StepSpec(name="s", command="x" * 5000),)
    assert "at most 4,096" in _fields(JobSpec(**BASE, subtasks=long))["subtasks[1].command"]  # type: ignore[arg-type]


def test_a_service_has_no_steps() -> None:
    spec = JobSpec(**BASE, kind="service", subtasks=(StepSpec(name="a"),))  # type: ignore[arg-type]
    assert "batch jobs" in _fields(spec)["subtasks"]


def test_the_lock_covers_the_most_replicas_of_a_step() -> None:
    steps = (StepSpec(name="a"), StepSpec(name="b", replicas=3), StepSpec(name="c", replicas=2))
    assert JobSpec(**BASE, subtasks=steps).most_replicas() == 3  # type: ignore[arg-type]


def test_steps_from_toml(tmp_path: Path) -> None:
    file = tmp_path / "job.toml"
    file.write_text(
        'framework = "scikit-learn"\nscript_url = "https://example.org/t.py"\n'
        '[[subtasks]]\nname = "prepare"\ncommand = "python3 prepare.py"\n'
        '[[subtasks]]\nname = "train"\nreplicas = 2\n'
    )
    spec = load_job_file(file)
    assert spec.subtasks == (
        StepSpec(name="prepare", command="python3 prepare.py"),
        StepSpec(name="train", replicas=2),
    )
    file.write_text(file.read_text().replace("replicas = 2", "replicas = 100"))
    with pytest.raises(EngineError, match=r"subtasks\[2\]\.replicas"):
        load_job_file(file)


def test_step_lines_read_back_what_they_write() -> None:
    steps = parse_steps("prepare: python3 prepare.py\n# a comment\n\nsweep x 4\neval: @src/ev.py\n")
    assert steps == (
        StepSpec(name="prepare", command="python3 prepare.py"),
        StepSpec(name="sweep", replicas=4),
        StepSpec(name="eval", script="src/ev.py"),
    )
    assert parse_steps("\n".join(step_line(step) for step in steps)) == steps
    with pytest.raises(EngineError, match=r"step 1: .*'name x N: command'"):
        parse_steps("two words: x")


def test_the_cli_takes_steps() -> None:
    args = build_parser().parse_args(
        [
            "job", "submit", "--url", "https://example.org/t.py", "--framework", "sklearn",
            "--step", "prepare: python3 prepare.py", "--step", "train x 2",
        ]
    )  # fmt: skip
    spec = _spec(args)
    assert [(s.name, s.command, s.replicas) for s in spec.subtasks] == [
        ("prepare", "python3 prepare.py", 1),
        ("train", None, 2),
    ]
    bad = build_parser().parse_args(
        ["job", "submit", "--url", "https://example.org/t.py", "--framework", "sklearn",
         "--step", "train x 99"]
    )  # fmt: skip
    with pytest.raises(EngineError, match=r"subtasks\[1\]\.replicas"):
        _spec(bad)


def test_a_command_is_split_into_words_and_unbalanced_quotes_are_refused() -> None:
    steps = (StepSpec(name="a", command="python3 -c 'print(1)"), StepSpec(name="b", command="  "))
    problems = _fields(JobSpec(**BASE, subtasks=steps))  # type: ignore[arg-type]
    assert "check its quotes" in problems["subtasks[1].command"]
    assert "empty" in problems["subtasks[2].command"]


def test_job_show_lists_each_replica_of_each_step() -> None:
    from engine import api
    from nunet_tui.cli.job_output import _detail

    steps = (StepSpec(name="prepare"), StepSpec(name="train", replicas=2))
    job = api.JobInfo(
        job_id="j1", role="consumer", state="failed", provider="p" * 20, consumer="c" * 20,
        spec=JobSpec(**BASE, subtasks=steps), finished_at=1_000.0,  # type: ignore[arg-type]
        steps=(
            api.StepInfo(name="prepare", replicas=(
                api.ReplicaInfo(state="done", started_at=900.0, ended_at=910.0),)),
            api.StepInfo(name="train", replicas=(
                api.ReplicaInfo(state="stopped", started_at=910.0, ended_at=925.5),
                api.ReplicaInfo(state="failed", started_at=910.0, ended_at=920.0,
                                frozen_s=1.0, exit_code=3, reason="exit code 3: \x1b[2Jboom"),
            )),
        ),
    )  # fmt: skip
    text = _detail(job)
    assert "  steps     2 steps · 1 of 3 replicas done" in text
    assert "    prepare 1/1   done     10.0 s machine time" in text
    assert "    train 1/2   stopped  15.5 s machine time" in text
    # The provider's reason is shown literally: no escape sequence reaches the terminal.
    assert "    train 2/2   failed   9.0 s machine time · exit code 3: \\x1b[2Jboom" in text
    assert "\x1b" not in text
    # --json: the steps as the record has them.
    assert api.to_builtins(job)["steps"][1]["replicas"][1]["exit_code"] == 3


def test_a_provider_needs_room_for_a_step_s_replicas_at_once() -> None:
    from engine.domain.admission import Needs
    from engine.domain.tiers import estimate_resource

    one = estimate_resource("low", "cpu")
    steps = (StepSpec(name="a"), StepSpec(name="b", replicas=3))
    needs = Needs.of(JobSpec(**BASE, subtasks=steps))  # type: ignore[arg-type]
    assert (needs.min_ram_mb, needs.min_cpu_mhz) == (3 * one.min_ram_mb, 3 * one.min_cpu_mhz)
    plain = Needs.of(JobSpec(**BASE))  # type: ignore[arg-type]
    assert (plain.min_ram_mb, plain.min_cpu_mhz) == (one.min_ram_mb, one.min_cpu_mhz)
