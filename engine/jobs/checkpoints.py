"""Workspace snapshots: tar + sha256 of /workspace, and putting one back.

A checkpointed job (NuNet's CIFAR-10 and multi-GPU examples) keeps an epoch counter file and
its weights in /workspace and, when started again, continues from them. So a snapshot is the
whole workspace minus what ``prepare`` recreates (installed dependencies, the venv); restoring
one into an empty workspace and starting the job again resumes it.
"""

from __future__ import annotations

import posixpath
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError
from engine.jobs.results import sha256_file, unpack_into

# Recreated by prepare; large, and not the job's state.
SKIP = {".deps", ".venv", ".cache", ".tmp"}
MAX_CHECKPOINT_BYTES = 8 << 30


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    sha256: str
    number: int
    size: int = 0


def snapshot(workspace: Path, dest_dir: Path, number: int) -> Checkpoint:
    """``dest_dir/checkpoint-<number>.tar`` of ``workspace`` (uncompressed: weights barely
    compress and a snapshot must be quick, the job may be paused while it is taken)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"checkpoint-{number:05d}.tar"
    partial = dest.with_name(dest.name + ".partial")

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        top = info.name.split("/", 1)[0]
        if top in SKIP or not (info.isfile() or info.isdir() or info.issym()):
            return None
        if info.issym() and not _inside(info):
            return None  # a link out of the workspace would be refused on restore anyway
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(partial, "w") as tar:
        for child in sorted(workspace.iterdir()):
            tar.add(child, arcname=child.name, filter=keep)
    partial.replace(dest)  # a crash mid-snapshot never leaves a half checkpoint under the name
    return Checkpoint(dest, sha256_file(dest), number, dest.stat().st_size)


def _inside(info: tarfile.TarInfo) -> bool:
    target = posixpath.normpath(posixpath.join(posixpath.dirname(info.name), info.linkname))
    return not info.linkname.startswith("/") and target != ".." and not target.startswith("../")


def restore(checkpoint: Checkpoint, workspace: Path) -> None:
    """Verify ``checkpoint`` and unpack it into ``workspace`` (emptied first)."""
    if not checkpoint.path.exists():
        raise EngineError("checkpoint", f"checkpoint {checkpoint.number} is missing")
    if sha256_file(checkpoint.path) != checkpoint.sha256:
        raise EngineError(
            "checkpoint", f"checkpoint {checkpoint.number} is corrupt (sha256 mismatch)"
        )
    workspace.mkdir(parents=True, exist_ok=True)
    for child in workspace.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    unpack_into(checkpoint.path, workspace, max_bytes=MAX_CHECKPOINT_BYTES, max_members=1_000_000)


def latest(dest_dir: Path) -> Checkpoint | None:
    """The newest complete checkpoint in ``dest_dir`` (after a provider restart)."""
    found = sorted(dest_dir.glob("checkpoint-*.tar")) if dest_dir.exists() else []
    if not found:
        return None
    path = found[-1]
    number = int(path.stem.split("-")[1])
    return Checkpoint(path, sha256_file(path), number, path.stat().st_size)
