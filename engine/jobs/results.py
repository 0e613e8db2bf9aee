"""Result archives: pack, checksum, verify, and unpack without trusting the archive.

An archive comes from another machine, so unpacking checks every member before anything is
written: no absolute paths, no ``..``, no links that lead outside, no devices or FIFOs, a total
size and a member count limit. Extraction goes to a fresh folder per run (never over an earlier
run's results) and is atomic: a rejected archive leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError

MAX_RESULT_BYTES = 1 << 30
MAX_MEMBERS = 10_000
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ResultArchive:
    path: Path
    sha256: str
    size: int  # bytes of the archive itself


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _walk(root: Path, paths: Sequence[str]) -> Iterable[Path]:
    """The regular files and folders under ``root`` that ``paths`` name; links are skipped: a
    link in a job's outputs may point anywhere on the provider's disk."""
    for rel in paths:
        top = root / rel
        if top.is_symlink() or not top.exists():
            continue
        if top.is_file():
            yield top
            continue
        yield top
        for dirpath, dirnames, filenames in os.walk(top):
            base = Path(dirpath)
            dirnames[:] = sorted(d for d in dirnames if not (base / d).is_symlink())
            for name in sorted(dirnames):
                yield base / name
            for name in sorted(filenames):
                path = base / name
                if not path.is_symlink() and path.is_file():
                    yield path


def pack(
    root: Path,
    paths: Sequence[str],
    dest: Path,
    *,
    max_bytes: int = MAX_RESULT_BYTES,
    max_members: int = MAX_MEMBERS,
) -> ResultArchive:
    """tar.gz of ``paths`` (relative to ``root``) into ``dest``; sizes bounded before writing."""
    members = list(_walk(root, paths))
    total = sum(p.stat().st_size for p in members if p.is_file())
    if total > max_bytes:
        raise EngineError(
            "results_too_large",
            f"the results hold {total} bytes; the limit is {max_bytes}: write less to outputs",
        )
    if len(members) > max_members:
        raise EngineError(
            "results_too_large",
            f"the results hold {len(members)} files; the limit is {max_members}",
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
        for path in members:
            # Normalised ownership: the consumer has no use for the provider's uids.
            tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False, filter=_anon)
    partial.replace(dest)
    return ResultArchive(dest, sha256_file(dest), dest.stat().st_size)


def _anon(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


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


def check_members(
    tar: tarfile.TarFile, *, max_bytes: int = MAX_RESULT_BYTES, max_members: int = MAX_MEMBERS
) -> list[tarfile.TarInfo]:
    """Every member, checked; the first bad one raises a clear EngineError."""
    members: list[tarfile.TarInfo] = []
    total = 0
    files: set[str] = set()
    for info in tar:
        if len(members) >= max_members:
            raise EngineError("unsafe_archive", f"archive has more than {max_members} members")
        name = info.name
        norm = posixpath.normpath(name)
        if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
            raise EngineError("unsafe_archive", f"absolute path in archive: {name!r}")
        if norm == ".." or norm.startswith("../") or ".." in name.split("/"):
            raise EngineError("unsafe_archive", f"path traversal in archive: {name!r}")
        if info.issym():
            target = posixpath.normpath(posixpath.join(posixpath.dirname(norm), info.linkname))
            if info.linkname.startswith("/") or target == ".." or target.startswith("../"):
                raise EngineError(
                    "unsafe_archive", f"symlink {name!r} points outside: {info.linkname!r}"
                )
        elif info.islnk():
            if posixpath.normpath(info.linkname) not in files:
                raise EngineError(
                    "unsafe_archive", f"hard link {name!r} to {info.linkname!r} outside the archive"
                )
        elif info.isfile():
            files.add(norm)
        elif not info.isdir():
            raise EngineError("unsafe_archive", f"{name!r} is a device, FIFO or other special file")
        total += info.size if info.isfile() else 0
        if total > max_bytes:
            raise EngineError(
                "unsafe_archive", f"archive unpacks to more than {max_bytes} bytes (the limit)"
            )
        members.append(info)
    return members


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


def safe_unpack(
    archive: Path,
    dest_parent: Path,
    run_name: str,
    *,
    max_bytes: int = MAX_RESULT_BYTES,
    max_members: int = MAX_MEMBERS,
) -> Path:
    """Unpack into a new folder ``dest_parent/run_name[-N]`` and return it."""
    dest_parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest_parent))
    try:
        unpack_into(archive, staging, max_bytes=max_bytes, max_members=max_members)
        target = fresh_dir(dest_parent, run_name)
        target.rmdir()
        staging.replace(target)  # same filesystem: atomic, and never onto existing results
        return target
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def unpack_into(
    archive: Path, dest: Path, *, max_bytes: int = MAX_RESULT_BYTES, max_members: int = MAX_MEMBERS
) -> None:
    """Check every member, then extract into the existing folder ``dest``."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = check_members(tar, max_bytes=max_bytes, max_members=max_members)
            # The "data" filter repeats the checks inside tarfile itself (defence in depth)
            # and drops set-uid bits and ownership.
            tar.extractall(dest, members=members, filter="data")
    except tarfile.TarError as exc:
        raise EngineError("unsafe_archive", f"not a readable tar archive: {exc}") from exc
