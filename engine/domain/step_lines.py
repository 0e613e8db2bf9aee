"""A job's steps as lines of text (the CLI's ``--step``, the submit form's steps box).

One step a line: ``name x N: command``. ``x N`` (replicas) may be left out (one replica);
``name x N distributed`` makes the step a gang (issue 25 §2: one replica a provider, with
RANK, WORLD_SIZE and MASTER_* for torch.distributed);
``: command`` may be left out (the job's own script); a command ``@path`` runs that Python
script of the job's code (a step's ``script``). Blank lines and ``#`` comments are skipped.

    prepare: python3 prepare.py
    sweep x 4
    evaluate: @evaluate.py
    train x 2 distributed: python3 train.py
"""

from __future__ import annotations

import re

from engine.domain.spec import StepSpec
from engine.errors import EngineError

_HEAD = re.compile(
    r"^\s*(?P<name>[^:\s]+)\s*(?:[xX]\s*(?P<replicas>\d{1,4}))?"
    r"\s*(?P<distributed>distributed)?\s*$"
)


def parse_step(line: str, number: int = 1) -> StepSpec:
    """One line as a step; EngineError("invalid_job") saying what is wrong and how to fix it."""
    head, colon, rest = line.partition(":")
    match = _HEAD.match(head)
    if match is None:
        raise EngineError(
            "invalid_job",
            f"step {number}: {line.strip()[:60]!r} is not 'name x N: command' "
            "(e.g. 'train x 2: python3 train.py')",
        )
    replicas = int(match["replicas"]) if match["replicas"] else 1
    distributed = bool(match["distributed"])
    command = rest.strip() if colon else ""
    if command.startswith("@"):
        script = command[1:].strip()
        return StepSpec(
            name=match["name"], script=script, replicas=replicas, distributed=distributed
        )
    return StepSpec(
        name=match["name"], command=command or None, replicas=replicas, distributed=distributed
    )


def parse_steps(text: str) -> tuple[StepSpec, ...]:
    """Every step of ``text``, one a line (blank lines and # comments skipped)."""
    lines = [
        line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    return tuple(parse_step(line, number) for number, line in enumerate(lines, start=1))


def step_line(step: StepSpec) -> str:
    """``step`` as one line parse_step reads back."""
    head = step.name if step.replicas == 1 else f"{step.name} x {step.replicas}"
    if step.distributed:
        head += " distributed"
    if step.script is not None:
        return f"{head}: @{step.script}"
    return f"{head}: {step.command}" if step.command else head
