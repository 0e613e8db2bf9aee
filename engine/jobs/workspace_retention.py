"""Finished jobs' workspaces, removed after the provider's retention time (issue 21).

A job's folder on the provider holds its log, its results archive, its workspace and its
checkpoints. Once the job has ended, its results are in the archive (packed at the end: what
``FetchResults`` sends, and what ``job results`` fetches again), and its checkpoints resume
nothing (only accepted and running jobs resume): the workspace and checkpoints are the
provider's to reclaim. They were never removed, and a workspace may hold up to
``jobs.max_files`` files: a provider that ran jobs for months ran out of inodes.

The sweep removes them (and the process executor's venv of the job's dependencies)
``workspace_keep_hours`` after the job ended; a notebook's, which is its
owner's files, ``notebook_keep_days`` after, unless ``notebook delete`` came first. The log
(its own retention: joblog.py) and the results archive stay. A job that has not ended, or that
this provider is running now, is never touched, whatever its record says. The provider sweeps
at its start and then periodically (engine/jobs/provider.py), with one log line when it
removed anything.

The sweep is in three steps so that the store is read only from the trio thread and the
removal (a million files take seconds) happens in a worker: ``folders_with_workspaces`` (a
look at the disk), ``due`` (the records), ``remove`` (the disk again).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass
from pathlib import Path

from engine import api
from engine.api.notebooks import is_notebook
from engine.domain import safe_paths
from engine.errors import EngineError
from engine.jobs.notebooks import JOB_FILES, remove_job_paths

log = logging.getLogger("nunet.jobs")

HOUR = 3600.0
SWEEP_S = HOUR  # at most this long between sweeps
MIN_SWEEP_S = 1.0
# What a finished job no longer needs: its workspace, its checkpoints and the venv the process
# executor made for its dependencies (thousands of files; the job's own folder).
RECLAIMED = (*JOB_FILES, "venv")


@dataclass(frozen=True)
class Retention:
    """How long a finished job's workspace stays (0: for ever), and a notebook's."""

    keep_s: float = 24 * HOUR
    notebook_keep_s: float = 30 * 24 * HOUR

    @classmethod
    def from_settings(cls, keep_hours: float, notebook_keep_days: float) -> Retention:
        return cls(keep_s=keep_hours * HOUR, notebook_keep_s=notebook_keep_days * 24 * HOUR)

    def interval_s(self) -> float:
        """How often to sweep: often enough that nothing stays much past its time."""
        shortest = min((s for s in (self.keep_s, self.notebook_keep_s) if s > 0), default=0.0)
        if not shortest:
            return SWEEP_S
        return min(SWEEP_S, max(MIN_SWEEP_S, shortest / 4))


@dataclass(frozen=True)
class Due:
    job_id: str
    why: str


def folders_with_workspaces(jobs_root: Path) -> list[str]:
    """The job folders that still hold a workspace or checkpoints (blocking: a worker)."""
    try:
        entries = list(os.scandir(jobs_root))
    except OSError:
        return []
    found = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and any(
            os.path.lexists(os.path.join(entry.path, name)) for name in RECLAIMED
        ):
            found.append(entry.name)
    return found


def due(
    job_ids: Iterable[str],
    job_of: Callable[[str], api.JobInfo | None],
    retention: Retention,
    active: Container[str],
    now: float,
) -> list[Due]:
    """Of ``job_ids``, those whose files retention removes now, and why."""
    found = []
    for job_id in job_ids:
        if job_id in active:
            continue
        try:
            job = job_of(job_id)
        except EngineError:
            continue
        if job is None or job.role != "provider" or job.state not in api.TERMINAL_STATES:
            continue  # not a job of ours, or not ended: its files are in use
        notebook = is_notebook(job)
        keep = retention.notebook_keep_s if notebook else retention.keep_s
        ended = job.finished_at or job.updated_at
        if keep <= 0 or now - ended <= keep:
            continue
        if notebook:
            why = f"a notebook ended over {keep / 86400:g} days ago (jobs.notebook_keep_days)"
        else:
            why = f"ended over {keep / HOUR:g} h ago (jobs.workspace_keep_hours)"
        found.append(Due(job_id, why))
    return found


def remove(jobs_root: Path, job_id: str) -> list[str]:
    """A finished job's workspace, checkpoints and venv, resolved inside its own folder (a
    link is removed, never followed); returns what was removed (blocking: a worker)."""
    folder = safe_paths.real_dir(
        safe_paths.job_dir(jobs_root, job_id), what=f"job {job_id}'s folder"
    )
    return remove_job_paths(
        safe_paths.child(folder, name, what=f"job {job_id}'s") for name in RECLAIMED
    )


def note(removed: list[Due]) -> str:
    """The one log line a sweep that removed anything leaves."""
    reasons = sorted({d.why for d in removed})
    return f"removed the workspaces of {len(removed)} finished jobs ({'; '.join(reasons)})"
