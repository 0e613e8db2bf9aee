"""Workspace snapshots: tar + sha256 of /workspace, and putting one back.

A checkpointed job (NuNet's CIFAR-10 and multi-GPU examples) keeps an epoch counter file and
its weights in /workspace and, when started again, continues from them. So a snapshot is the
whole workspace minus what ``prepare`` recreates (installed dependencies, the venv); restoring
one into an empty workspace and starting the job again resumes it.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine.domain import safe_paths
from engine.errors import EngineError
from engine.jobs.results import pack, sha256_file, unpack_into

# Recreated by prepare; large, and not the job's state.
SKIP = {".deps", ".venv", ".cache", ".tmp"}
MAX_CHECKPOINT_BYTES = 8 << 30
MAX_CHECKPOINT_MEMBERS = 1_000_000
_NAME = re.compile(r"\Acheckpoint-([0-9]{5,9})\.tar\Z")


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    sha256: str
    number: int
    size: int = 0


def snapshot(workspace: Path, dest_dir: Path, number: int) -> Checkpoint:
    """``dest_dir/checkpoint-<number>.tar`` of ``workspace`` (uncompressed: weights barely
    compress and a snapshot must be quick, the job may be paused while it is taken).

    Read like results (``results.pack``: from directory fds, as the workspace's owner): only
    regular files and folders; links are left out, so a restore cannot write through one."""
    safe_paths.real_dir(workspace, what="the job's workspace")
    safe_paths.real_dir(dest_dir, what="the checkpoints folder").mkdir(parents=True, exist_ok=True)
    dest = safe_paths.child(dest_dir, _name(number), what="checkpoint")
    archive = pack(
        workspace,
        ["."],
        dest,
        max_bytes=MAX_CHECKPOINT_BYTES,
        max_members=MAX_CHECKPOINT_MEMBERS,
        compress=False,
        skip_top=frozenset(SKIP),
    )
    return Checkpoint(dest, archive.sha256, number, archive.size)


def restore(checkpoint: Checkpoint, workspace: Path) -> None:
    """Verify ``checkpoint`` and put its files back as the whole of ``workspace``.

    Unpacked by the same reader as a stranger's results (the job chose every name in it), into
    a staging folder next to the workspace; only when that succeeded is the workspace emptied
    and the files moved in."""
    if not checkpoint.path.exists():
        raise EngineError("checkpoint", f"checkpoint {checkpoint.number} is missing")
    if sha256_file(checkpoint.path) != checkpoint.sha256:
        raise EngineError(
            "checkpoint", f"checkpoint {checkpoint.number} is corrupt (sha256 mismatch)"
        )
    # Emptied without following links: a link the job left there may point anywhere.
    safe_paths.real_dir(workspace, what="the job's workspace").mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=workspace.parent))
    try:
        unpack_into(
            checkpoint.path,
            staging,
            max_bytes=MAX_CHECKPOINT_BYTES,
            max_members=MAX_CHECKPOINT_MEMBERS,
        )
        for child in workspace.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        for child in staging.iterdir():
            child.replace(workspace / child.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def latest(dest_dir: Path) -> Checkpoint | None:
    """The newest complete checkpoint in ``dest_dir`` (after a provider restart)."""
    if not dest_dir.is_dir() or dest_dir.is_symlink():
        return None
    found = sorted(
        (int(match.group(1)), path)
        for path in dest_dir.iterdir()
        if (match := _NAME.match(path.name)) and not path.is_symlink() and path.is_file()
    )
    if not found:
        return None
    number, path = found[-1]
    return Checkpoint(path, sha256_file(path), number, path.stat().st_size)


def _name(number: int) -> str:
    if number < 0:
        raise EngineError("checkpoint", f"checkpoint number {number} is negative")
    return f"checkpoint-{number:05d}.tar"
