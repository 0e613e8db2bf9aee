"""A tar of a job's files, read without ever leaving its workspace.

The workspace is the job's: anything in it may be a link to the provider's keys, a hard link
to a file outside, a FIFO that blocks a reader forever. So nothing here opens a path: the walk
goes from one open directory to the next with ``O_NOFOLLOW`` on every step and checks what it
opened with ``fstat``; a link anywhere on the way is not followed and not sent, and the tar is
written from the open file descriptors, never by name. Files with more than one hard link are
not sent either (the other name may be outside the workspace). Every name sent also passes the
consumer's name rules (``name_problem``), so an honest archive is never refused there.

Standard library only, on purpose: when the provider runs as root, ``results.pack`` runs this
file as a child process (``-I -S``: no site packages, no environment) that drops to the
workspace owner's uid and gids before it touches the workspace (see ``main``). The drop
happens inside the child, after the interpreter has started, because that user usually cannot
even read our interpreter (a pyenv or venv under /root).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from typing import IO

MAX_NAME_BYTES = 4096
MAX_COMPONENT_BYTES = 255
MAX_DEPTH = 64
MAX_NOTES = 100  # skipped items reported; the rest are counted
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in after the lstat must not block the open.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class PackError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def control_character(text: str) -> str | None:
    """The first character of ``text`` a terminal or a file manager would obey or hide, or
    None. The same rule as ``engine.domain.safe_text.control_character``, written out again
    because this file runs as a standard-library-only child (module docstring);
    tests/unit/test_jobs_results.py checks the two agree on every code point."""
    for char in text:
        if unicodedata.category(char) in ("Cc", "Cf", "Cs"):
            return char
    return None


def name_problem(name: str) -> str | None:
    """Why the relative POSIX path ``name`` may not be in a results archive, or None."""
    if not name:
        return "is empty"
    if name.startswith("/"):
        return "is absolute"
    parts = name.split("/")
    if ".." in parts:
        return "goes up with '..'"
    if any(part in ("", ".") for part in parts):
        return "has an empty or '.' component"
    if (char := control_character(name)) is not None:
        return f"has control characters ({char!r})"
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        return "is not UTF-8"
    if len(raw) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    if any(len(part.encode("utf-8")) > MAX_COMPONENT_BYTES for part in parts):
        return f"has a component longer than {MAX_COMPONENT_BYTES} bytes"
    if len(parts) > MAX_DEPTH:
        return f"is nested more than {MAX_DEPTH} folders deep"
    return None


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file or folder"


Entry = tuple[str, int, str, os.stat_result]  # (name in the archive, parent fd, base, lstat)


class Walk:
    """The regular files and folders that ``paths`` name under the open folder ``root_fd``.

    Iterating yields each entry while its parent folder is open (``parent fd``), so the caller
    opens it relative to that fd. What is left out is said in ``skipped``."""

    def __init__(
        self,
        root_fd: int,
        paths: Sequence[str],
        skip_top: frozenset[str],
        max_entries: int = 1_000_000,
    ) -> None:
        self.root_fd = root_fd
        self.max_entries = max_entries  # names read from one folder: a job may make millions
        self.paths = paths
        self.skip_top = skip_top
        self.skipped: list[str] = []
        self.skipped_count = 0

    def skip(self, name: str, why: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < MAX_NOTES:
            self.skipped.append(f"{name!r} {why}: not sent")

    def __iter__(self) -> Iterator[Entry]:
        self.skipped = []
        self.skipped_count = 0
        seen: set[str] = set()
        for rel in self.paths:
            parts = [p for p in rel.split("/") if p not in ("", ".")]
            if not parts:  # "." : the whole workspace
                yield from self._children(self.root_fd, "", seen, 0)
                continue
            if problem := name_problem("/".join(parts)):
                self.skip(rel, f"(the name {problem})")
                continue
            fd = os.dup(self.root_fd)
            try:
                for i, part in enumerate(parts[:-1]):
                    sub = self._open_dir(fd, part, "/".join(parts[: i + 1]))
                    if sub is None:
                        break
                    os.close(fd)
                    fd = sub
                else:
                    yield from self._entry(fd, parts[-1], "/".join(parts), seen, len(parts))
            finally:
                os.close(fd)

    def _open_dir(self, parent: int, base: str, name: str) -> int | None:
        try:
            st = os.stat(base, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None  # a declared output the job did not write: nothing to send
        if not stat.S_ISDIR(st.st_mode):
            self.skip(name, f"is {_kind(st.st_mode)}, not a folder")
            return None
        try:
            fd = os.open(base, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:  # swapped for a link since the stat, or unreadable
            self.skip(name, f"could not be opened ({exc.strerror})")
            return None
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            self.skip(name, "changed while it was read")
            return None
        return fd

    def _entry(
        self, parent: int, base: str, name: str, seen: set[str], depth: int
    ) -> Iterator[Entry]:
        try:
            st = os.stat(base, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if depth == 1 and base in self.skip_top:
            return
        if stat.S_ISREG(st.st_mode):
            if st.st_nlink > 1:
                self.skip(name, "has other hard links (one may be outside the workspace)")
            elif name not in seen:
                seen.add(name)
                yield name, parent, base, st
        elif stat.S_ISDIR(st.st_mode):
            if name not in seen:
                seen.add(name)
                yield name, parent, base, st
            if depth >= MAX_DEPTH:
                self.skip(name, f"is nested more than {MAX_DEPTH} folders deep")
                return
            fd = self._open_dir(parent, base, name)
            if fd is not None:
                try:
                    yield from self._children(fd, name, seen, depth)
                finally:
                    os.close(fd)
        else:
            self.skip(name, f"is {_kind(st.st_mode)}")

    def _children(self, fd: int, prefix: str, seen: set[str], depth: int) -> Iterator[Entry]:
        names: list[str] = []
        with os.scandir(fd) as listing:
            for entry in listing:
                names.append(entry.name)
                if len(names) > self.max_entries:
                    raise PackError(
                        "results_too_large",
                        f"{prefix or 'the workspace'!r} holds more than {self.max_entries} "
                        "entries; the limit is that many files",
                    )
        for base in sorted(names):
            name = f"{prefix}/{base}" if prefix else base
            if problem := name_problem(name):
                self.skip(name, f"(the name {problem})")
                continue
            yield from self._entry(fd, base, name, seen, depth + 1)


def write_tar(
    root_fd: int,
    paths: Sequence[str],
    out: IO[bytes],
    *,
    max_bytes: int,
    max_members: int,
    compress: bool = True,
    skip_top: frozenset[str] = frozenset(),
) -> list[str]:
    """A tar (gzipped when ``compress``) of ``paths`` into ``out``; returns what was skipped.

    Sizes are counted on a first walk, so a result over the limits fails before anything is
    written; the second walk writes, and counts again (the job's files may still change)."""
    walk = Walk(root_fd, paths, skip_top, max_entries=max_members)
    total = 0
    # Stops at the first limit passed: a job may make millions of files.
    for members, (_, _, _, st) in enumerate(walk, start=1):
        total += st.st_size if stat.S_ISREG(st.st_mode) else 0
        _check_limits(members, total, max_bytes, max_members)
    # Imported here: every name check in the node imports this module (control_character),
    # and the TUI's first frame must not wait for tarfile (the packing child loads them in
    # ``main``, before it drops its privileges).
    import gzip
    import tarfile

    gz = gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6, mtime=0) if compress else None
    members = total = 0
    try:
        with tarfile.open(fileobj=gz or out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for name, parent, base, st in walk:
                info = tarfile.TarInfo(name)
                info.mtime = int(st.st_mtime)
                info.uid = info.gid = 0  # the consumer has no use for the provider's uids
                info.uname = info.gname = ""
                if stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    members += 1
                    tar.addfile(info)
                    continue
                try:
                    fd = os.open(base, _FILE_FLAGS, dir_fd=parent)
                except OSError as exc:
                    walk.skip(name, f"could not be opened ({exc.strerror})")
                    continue
                with os.fdopen(fd, "rb") as handle:
                    now = os.fstat(fd)
                    if not stat.S_ISREG(now.st_mode) or now.st_nlink > 1:
                        walk.skip(name, "changed while it was read")
                        continue
                    members += 1
                    total += now.st_size
                    _check_limits(members, total, max_bytes, max_members)
                    info.size = now.st_size
                    info.mode = 0o755 if now.st_mode & 0o111 else 0o644
                    try:
                        tar.addfile(info, handle)
                    except OSError as exc:  # it shrank while it was copied
                        raise PackError(
                            "results", f"{name!r} changed while the results were packed: {exc}"
                        ) from exc
                    # Checked again once copied: a link made while it was read (the job
                    # runs on) is caught here, not a pack later. The tar is a stream, so
                    # the copy cannot be taken back: the results are not sent at all.
                    if os.fstat(fd).st_nlink > 1:
                        raise PackError(
                            "results",
                            f"{name!r} got another hard link while the results were packed: "
                            "nothing sent; stop making hard links in outputs and fetch again",
                        )
    finally:
        if gz is not None:
            gz.close()
    notes = list(walk.skipped)
    if walk.skipped_count > len(notes):
        notes.append(f"... and {walk.skipped_count - len(notes)} more not sent")
    return notes


def _check_limits(members: int, total: int, max_bytes: int, max_members: int) -> None:
    if total > max_bytes:
        raise PackError(
            "results_too_large",
            f"the results hold over {max_bytes} bytes; the limit is {max_bytes}: "
            "write less to outputs",
        )
    if members > max_members:
        raise PackError(
            "results_too_large",
            f"the results hold over {max_members} files and folders; the limit is {max_members}",
        )


def drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` for good (no supplementary groups, no way back to root)."""
    os.setgroups([])
    if hasattr(os, "setresuid"):
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    else:  # macOS: as root, setuid sets the real, effective and saved ids alike
        os.setgid(gid)
        os.setuid(uid)
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise PackError("results", "could not drop root privileges to read the results")


def main(argv: Sequence[str]) -> int:
    """The unprivileged child: argv[1] is a JSON object of write_tar's arguments (``fd``: the
    workspace, inherited open; ``uid``/``gid``: who to become first); the tar goes to stdout,
    one JSON line to stderr."""
    # Loaded before the uid changes: the workspace's owner usually cannot read our
    # interpreter's standard library (a pyenv or venv under /root).
    import gzip  # noqa: F401
    import tarfile  # noqa: F401

    args = json.loads(argv[1])
    out = os.fdopen(1, "wb", closefd=False)
    try:
        drop_privileges(args["uid"], args["gid"])
    except (OSError, PackError) as exc:
        sys.stderr.write(json.dumps({"error": "results", "message": str(exc)}) + "\n")
        return 2
    try:
        notes = write_tar(
            args["fd"],
            args["paths"],
            out,
            max_bytes=args["max_bytes"],
            max_members=args["max_members"],
            compress=args["compress"],
            skip_top=frozenset(args["skip_top"]),
        )
        out.flush()
    except PackError as exc:
        sys.stderr.write(json.dumps({"error": exc.code, "message": exc.message}) + "\n")
        return 2
    except OSError as exc:
        sys.stderr.write(json.dumps({"error": "results", "message": str(exc)}) + "\n")
        return 2
    sys.stderr.write(json.dumps({"skipped": notes}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
