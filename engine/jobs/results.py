"""Result archives: pack, checksum, verify, and unpack without trusting the archive.

Packing (provider): the job's outputs are read by ``workspace_tar`` from open directory file
descriptors, never by path, so a link anywhere in an output path leads nowhere; when the
provider runs as root the reading happens in a child process that has become the workspace's
owner (the user the job ran as), so it can read nothing the job could not.

Unpacking (consumer): the archive comes from another machine, so ``tar_reader`` checks every
member before anything is written (regular files and folders only; no absolute names, no
``..``; total bytes, bytes per member, member count and header sizes bounded), then writes into
a fresh staging folder next to the destination and moves it into place: a refused archive
leaves nothing behind. Each run unpacks into a new folder, never over an earlier run's results.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from engine.errors import EngineError
from engine.jobs import tar_reader, workspace_tar

MAX_RESULT_BYTES = 1 << 30
MAX_MEMBERS = 10_000
PACK_TIMEOUT_S = 1800.0  # gzip of the largest results allowed, on a slow disk
_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class ResultArchive:
    path: Path
    sha256: str
    size: int  # bytes of the archive itself
    skipped: tuple[str, ...] = ()  # what the outputs held but was not sent, and why


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def pack(
    root: Path,
    paths: Sequence[str],
    dest: Path,
    *,
    max_bytes: int = MAX_RESULT_BYTES,
    max_members: int = MAX_MEMBERS,
    compress: bool = True,
    skip_top: frozenset[str] = frozenset(),
) -> ResultArchive:
    """A tar(.gz) of ``paths`` (relative to the workspace ``root``) into ``dest``.

    Only regular files with a single link and folders are packed; links, hard-linked files,
    FIFOs and devices are skipped and listed in ``skipped``. Sizes are bounded before writing."""
    try:
        root_fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise EngineError("results", f"cannot open the workspace {root}: {exc.strerror}") from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    options = {
        "paths": list(paths),
        "max_bytes": max_bytes,
        "max_members": max_members,
        "compress": compress,
        "skip_top": sorted(skip_top),
    }
    try:
        owner = os.fstat(root_fd)
        with partial.open("wb") as out:
            if os.geteuid() == 0 and owner.st_uid != 0:
                skipped = _pack_as(owner.st_uid, owner.st_gid, root_fd, options, out)
            else:
                skipped = workspace_tar.write_tar(
                    root_fd,
                    paths,
                    out,
                    max_bytes=max_bytes,
                    max_members=max_members,
                    compress=compress,
                    skip_top=skip_top,
                )
    except workspace_tar.PackError as exc:
        partial.unlink(missing_ok=True)
        raise EngineError(exc.code, exc.message) from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        os.close(root_fd)
    partial.replace(dest)
    return ResultArchive(dest, sha256_file(dest), dest.stat().st_size, tuple(skipped))


def _pack_as(
    uid: int, gid: int, root_fd: int, options: dict[str, object], out: IO[bytes]
) -> list[str]:
    """``workspace_tar`` in a child that becomes ``uid``/``gid`` before reading anything."""
    args = json.dumps({**options, "fd": root_fd, "uid": uid, "gid": gid})
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", workspace_tar.__file__, args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            pass_fds=(root_fd,),
            env={"LC_ALL": "C.UTF-8"},
            cwd="/",
            timeout=PACK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise EngineError(
            "results", f"packing the results took over {PACK_TIMEOUT_S:g} s"
        ) from None
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else {}
    except ValueError:
        report = {}
    if done.returncode == 0 and isinstance(report.get("skipped"), list):
        return [str(note) for note in report["skipped"]]
    if "error" in report:
        raise workspace_tar.PackError(str(report["error"]), str(report.get("message", "")))
    tail = lines[-1][:300] if lines else f"exit code {done.returncode}"
    raise EngineError("results", f"packing the results failed: {tail!r}")


def verify(archive: Path, sha256: str, size: int | None = None) -> None:
    """Raise when the received archive is not the one the provider announced."""
    if size is not None and archive.stat().st_size != size:
        raise EngineError(
            "results_corrupt",
            f"results archive is {archive.stat().st_size} bytes, the provider announced {size}",
        )
    actual = sha256_file(archive)
    if actual != sha256.lower():
        raise EngineError(
            "results_corrupt", f"results archive checksum mismatch: {actual} != {sha256}"
        )


def fresh_dir(parent: Path, name: str) -> Path:
    """``parent/name``, or ``name-2``, ``name-3``... : never an existing folder."""
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        candidate = parent / (name if n == 1 else f"{name}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise EngineError("results", f"too many result folders named {name} in {parent}")


def limits(max_bytes: int = MAX_RESULT_BYTES, max_members: int = MAX_MEMBERS) -> tar_reader.Limits:
    return tar_reader.Limits(max_bytes=max_bytes, max_members=max_members)


def check(
    archive: Path, *, max_bytes: int = MAX_RESULT_BYTES, max_members: int = MAX_MEMBERS
) -> None:
    """Raise EngineError("unsafe_archive") unless the archive would unpack safely."""
    try:
        tar_reader.check(archive, limits(max_bytes, max_members))
    except tar_reader.UnsafeArchive as exc:
        raise EngineError("unsafe_archive", f"the archive was refused: {exc}") from None


def safe_unpack(
    archive: Path,
    dest_parent: Path,
    run_name: str,
    *,
    max_bytes: int = MAX_RESULT_BYTES,
    max_members: int = MAX_MEMBERS,
) -> Path:
    """Unpack into a new folder ``dest_parent/run_name[-N]`` and return it."""
    check(archive, max_bytes=max_bytes, max_members=max_members)  # before anything is made
    dest_parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest_parent))
    try:
        unpack_into(archive, staging, max_bytes=max_bytes, max_members=max_members, checked=True)
        target = fresh_dir(dest_parent, run_name)
        target.rmdir()
        staging.replace(target)  # same filesystem: atomic, and never onto existing results
        return target
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def unpack_into(
    archive: Path,
    dest: Path,
    *,
    max_bytes: int = MAX_RESULT_BYTES,
    max_members: int = MAX_MEMBERS,
    checked: bool = False,
) -> list[str]:
    """Check every member, then write them into the existing empty folder ``dest`` (one we
    just made: a staging folder); returns the files written. ``checked``: ``check`` has
    already passed (the writing pass checks everything again anyway)."""
    bounds = limits(max_bytes, max_members)
    try:
        if not checked:
            tar_reader.check(archive, bounds)
        return tar_reader.write(archive, dest, bounds)
    except tar_reader.UnsafeArchive as exc:
        raise EngineError("unsafe_archive", f"the archive was refused: {exc}") from None
