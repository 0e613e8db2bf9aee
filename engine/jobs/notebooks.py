"""The provider's side of ``notebook delete`` (issue 13): a finished notebook job's files
removed, owner only, every path resolved inside the job's own folder first. What a notebook
is (its spec, token, port and URL) is engine/api/notebooks.py's.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from engine import api
from engine.domain import safe_paths
from engine.errors import EngineError

# What a finished job leaves on its provider and ``notebook delete`` removes. Its log stays:
# the provider's record of what ran (and the receipt's evidence).
JOB_FILES = ("workspace", "checkpoints")
RM_TIMEOUT_S = 600.0  # a workspace at the file cap takes seconds; a stuck disk, no longer


# --- the provider's side of ``notebook delete`` ----------------------------------------------


def deletion_refusal(job: api.JobInfo | None, peer: str) -> str:
    """Why ``peer`` may not delete this job's files here ("" when it may)."""
    # A stranger learns nothing about other people's jobs: the same words as for none.
    if job is None or job.role != "provider" or job.consumer != peer:
        return "no such job of yours"
    if job.state not in api.TERMINAL_STATES:
        return f"job {job.job_id} is {job.state}: stop it first (its files are in use)"
    return ""


def delete_job_files(job_dir: Path, job: api.JobInfo) -> list[str]:
    """Remove a finished job's workspace, checkpoints and results archive, every path resolved
    inside the job's own folder first (a link or a stored path that points elsewhere is
    refused, never followed); returns what was removed."""
    root = safe_paths.real_dir(job_dir, what=f"job {job.job_id}'s folder")
    targets = [safe_paths.child(root, name, what=f"job {job.job_id}'s") for name in JOB_FILES]
    if job.results_dir:
        archive = Path(job.results_dir)
        if archive.is_symlink() or not archive.resolve().is_relative_to(root.resolve()):
            raise EngineError(
                "unsafe_path", f"job {job.job_id}'s results are not in its own folder: kept"
            )
        targets.append(safe_paths.child(root, archive.name, what=f"job {job.job_id}'s"))
    return remove_job_paths(targets)


def remove_job_paths(targets: Iterable[Path]) -> list[str]:
    """Remove each of a job's own files or folders (paths already checked to be inside its
    folder); returns the names of those that were there. Also the workspace retention's."""
    removed: list[str] = []
    for path in targets:
        if path.is_dir() and not path.is_symlink():
            _remove_tree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(path.name)
    return removed


def _remove_tree(path: Path) -> None:
    """Linux's rmtree works from directory descriptors: a link the job made inside its
    workspace is removed, never followed. It recurses, though: folders nested past Python's
    recursion limit (a job made 1,200 in a blink) are left to rm, which does not recurse
    (fts) and follows no links either."""
    try:
        shutil.rmtree(path)
    except RecursionError:
        done = subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", str(path)],
            capture_output=True,
            text=True,
            timeout=RM_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise OSError(f"rm could not remove {path}: {done.stderr.strip()[:300]}") from None
