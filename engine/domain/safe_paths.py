"""Paths built from names that came from someone else: job ids, file names in job specs,
result and checkpoint names.

A name a peer sent is never joined onto a path by hand. ``child`` takes one checked name
(a single component: no separator, no ``..``, no control characters) and ``inside`` a checked
relative path; both refuse a symbolic link anywhere between the root and the result, and
then resolve the result and check that it is still under the resolved root. The root itself
is ours (the state folder, a workspace we made), so a link above it is followed; a link below
it may have been made by a job, so it never is.

Job ids get the strictest check of all: the alphabet the consumer generates them in
(``secrets.token_hex(6)``: twelve lowercase hex digits), enforced in the wire schema
(``JobId``) so that a bad id is refused before anything is stored or looked up.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Annotated

import msgspec

from engine.domain.safe_text import control_character
from engine.errors import EngineError

# \A and \Z, not ^ and $: "$" also matches before a trailing newline.
JOB_ID_PATTERN = r"\A[0-9a-f]{12}\Z"
JobId = Annotated[str, msgspec.Meta(pattern=JOB_ID_PATTERN)]
_JOB_ID = re.compile(JOB_ID_PATTERN)
# A name we make ourselves from an id ("<id>-results.tar.gz", "checkpoint-00001.tar"):
# plain ASCII, not starting with a dot (no ".", "..", no hidden files).
_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
MAX_COMPONENT_BYTES = 255  # what Linux file systems allow for one name
MAX_RELATIVE_CHARS = 1024
CODE = "unsafe_path"


def shown(text: str, limit: int = 80) -> str:
    """A peer's text as a literal: quoted, escapes for anything unprintable, cut short."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def is_job_id(value: object) -> bool:
    return isinstance(value, str) and _JOB_ID.match(value) is not None


def check_job_id(value: str, *, what: str = "job id") -> str:
    if not is_job_id(value):
        raise EngineError(
            "bad_job_id",
            f"{what} {shown(value)} is not a job id: job ids are 12 lowercase hex digits "
            "(as `nunet-tui job list` shows them)",
        )
    return value


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be one component we create under a root, or None."""
    if not isinstance(name, str) or not name:
        return "is empty"
    if _NAME.match(name) is None:
        return "may only hold letters, digits, '_', '.' and '-' (not first) and be 128 long"
    return None


def check_name(name: str, *, what: str) -> str:
    if why := name_problem(name):
        raise EngineError(CODE, f"{what} {shown(name)} {why}")
    return name


def _component_problem(part: str) -> str | None:
    if part in ("", ".", ".."):
        return "has an empty, '.' or '..' component" if part != ".." else "leaves its folder (..)"
    if len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES:
        return f"has a component longer than {MAX_COMPONENT_BYTES} bytes"
    if (char := control_character(part)) is not None:
        return f"contains the control character {char!r}"
    if "\\" in part:
        return "contains a backslash: separate folders with '/'"
    return None


def relative_problem(path: str) -> str | None:
    """Why ``path`` is not a plain relative path (``a/b.txt``) that stays where it is put."""
    if not isinstance(path, str) or not path:
        return "is empty: give a relative path"
    if path.strip() != path:
        return "starts or ends with white space"
    if len(path) > MAX_RELATIVE_CHARS:
        return f"is longer than {MAX_RELATIVE_CHARS} characters"
    if path.startswith("/") or PurePosixPath(path).is_absolute():
        return "is absolute: give a path relative to the workspace"
    if "\x00" in path:
        return "contains a NUL byte"
    parts = path.rstrip("/").split("/")
    for part in parts:
        if why := _component_problem(part):
            return why
    return None


def check_relative(path: str, *, what: str) -> str:
    if why := relative_problem(path):
        raise EngineError(CODE, f"{what} {shown(path)} {why}")
    return path


def _no_links_below(root: Path, parts: tuple[str, ...], *, what: str, name: str) -> Path:
    """``root/parts...``, refusing a symbolic link at any step below ``root``."""
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise EngineError(
                CODE, f"{what} {shown(name)}: {path} is a symbolic link, which is never followed"
            )
    return path


def _stays_under(root: Path, path: Path, *, what: str, name: str) -> None:
    base = root.resolve()
    if not path.resolve().is_relative_to(base):
        raise EngineError(CODE, f"{what} {shown(name)} leads outside {base}")


def child(root: Path, name: str, *, what: str) -> Path:
    """``root/name`` for one checked name; refuses a link there and anything outside."""
    check_name(name, what=what)
    path = _no_links_below(root, (name,), what=what, name=name)
    _stays_under(root, path, what=what, name=name)
    return path


def inside(root: Path, relative: str, *, what: str) -> Path:
    """``root/relative`` for a checked relative path, with no link anywhere on the way."""
    check_relative(relative, what=what)
    parts = tuple(relative.rstrip("/").split("/"))
    path = _no_links_below(root, parts, what=what, name=relative)
    _stays_under(root, path, what=what, name=relative)
    return path


def job_dir(jobs_root: Path, job_id: str) -> Path:
    """The folder of one job: ``jobs_root/<job id>``, the id checked."""
    return child(jobs_root, check_job_id(job_id), what="job id")


def real_dir(path: Path, *, what: str) -> Path:
    """``path`` if it is not a symbolic link (and, when it exists, is a folder)."""
    if path.is_symlink():
        raise EngineError(CODE, f"{what} {path} is a symbolic link: refusing to use it")
    if path.exists() and not path.is_dir():
        raise EngineError(CODE, f"{what} {path} is not a folder")
    return path
