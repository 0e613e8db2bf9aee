"""A job's steps and replicas as the CLI's `job show` and the TUI's job view list them
(issue 25 §1): one row a replica, with its state, its machine time (what bills) and, for one
that failed, why. Names and reasons come from the provider: shown through ``safe``."""

from __future__ import annotations

from dataclasses import dataclass

from engine import api
from engine.domain.safe_text import safe


@dataclass(frozen=True)
class ReplicaRow:
    step: str  # "train" (the step's name, safe)
    replica: str  # "2/4"
    state: str  # waiting, running, done, failed, stopped
    machine_s: float | None  # None: never started (bills nothing)
    reason: str = ""

    def line(self) -> str:
        ran = f"{self.machine_s:.1f} s machine time" if self.machine_s is not None else "-"
        why = f" · {self.reason}" if self.reason else ""
        return f"{self.step} {self.replica:<5} {self.state:<8} {ran}{why}"


def replica_rows(job: api.JobInfo, now: float) -> list[ReplicaRow]:
    """Each replica of each step, in order; an open one's machine time runs to ``now`` (or
    the job's end)."""
    end = job.finished_at or now
    rows = []
    for step in job.steps:
        count = len(step.replicas)
        for index, replica in enumerate(step.replicas, start=1):
            span = replica.span_ms(end)
            rows.append(
                ReplicaRow(
                    step=safe(step.name),
                    replica=f"{index}/{count}",
                    state=replica.state,
                    machine_s=(span[1] - span[0] - span[2]) / 1000 if span else None,
                    reason=safe(replica.reason)[:120] if replica.state == "failed" else "",
                )
            )
    return rows


def steps_summary(job: api.JobInfo) -> str:
    """One line: "3 steps · 2 of 4 replicas done" ("" for a job without steps)."""
    replicas = [r for step in job.steps for r in step.replicas]
    if not replicas and not job.spec.subtasks:
        return ""
    steps = len(job.spec.subtasks)
    total = sum(step.replicas for step in job.spec.subtasks)
    done = sum(r.state == "done" for r in replicas)
    return f"{steps} step{'s' * (steps != 1)} · {done} of {total} replicas done"


MAX_STEP_ROWS = 6  # the job view at 80x24 keeps room for its log


def step_facts(job: api.JobInfo, now: float) -> list[tuple[str, str]]:
    """The job view's rows: "Steps" (the summary), then one a step (at most MAX_STEP_ROWS):
    each replica's state and machine time, and a failed one's reason."""
    summary = steps_summary(job)
    if not summary:
        return []
    rows = [("Steps", summary)]
    by_step: dict[str, list[ReplicaRow]] = {}
    for row in replica_rows(job, now):
        by_step.setdefault(row.step, []).append(row)
    for name, replicas in list(by_step.items())[:MAX_STEP_ROWS]:
        parts = [
            f"#{row.replica.split('/')[0]} {row.state}"
            + (f" {row.machine_s:.1f} s" if row.machine_s is not None else "")
            for row in replicas
        ]
        failed = next((row.reason for row in replicas if row.reason), "")
        rows.append((f" {name}"[:14], " · ".join(parts)[:160] + (f" · {failed}" if failed else "")))
    if len(by_step) > MAX_STEP_ROWS:
        rows.append(("", f"… {len(by_step) - MAX_STEP_ROWS} more steps (job show lists all)"))
    return rows


def gang_facts(job: api.JobInfo) -> list[tuple[str, str]]:
    """A gang's slot (issue 25 §2): the job view's "Gang" row (its id, this job's rank of
    how many), then each rank's job, provider and state when the record lists them (`job
    show` does; each rank is a job of its own in the job list)."""
    slot = job.spec.gang
    if slot is None:
        return []
    rows = [("Gang", f"{slot.gang_id} · rank {slot.rank} of {slot.world_size}")]
    for member in job.gang[:MAX_STEP_ROWS]:
        why = f" · {safe(member.reason)}" if member.reason else ""
        rows.append(
            (
                f" rank {member.rank}",
                f"{member.job_id} · {safe(member.provider)[:16]}… · {member.state}{why}"[:200],
            )
        )
    return rows
