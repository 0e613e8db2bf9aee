"""Getting a job's code from a git repository (blocking: executors call it in a thread).

A branch or a tag is cloned shallow; a commit, given by its full id, is fetched alone (``git
clone --branch`` takes names only; servers hand out any commit their branches reach). The
whole of it is bounded in time and in size on disk, so that a huge repository or a server that
stalls ends as a clear error instead of a provider stuck in a clone or out of disk.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from engine.errors import EngineError
from engine.jobs.spec import GitSource

CLONE_TIMEOUT_S = 300.0
MAX_REPO_BYTES = 2 << 30  # the checkout and its .git together
POLL_S = 0.25
SIZE_EVERY_S = 2.0  # walking a big checkout costs: its size is looked at less often
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # sha1 or sha256 object names


def clone_git(source: GitSource, dest: Path) -> Path:
    """The repository at ``source.ref`` in ``dest`` (replaced); returns the entry point."""
    if shutil.which("git") is None:
        raise EngineError("git", "git is not installed on this provider")
    if dest.exists():
        shutil.rmtree(dest)
    deadline = time.monotonic() + CLONE_TIMEOUT_S
    env = _environment(source, dest.parent)
    if _COMMIT.fullmatch(source.ref):
        dest.mkdir(parents=True)
        _git(["init", "--quiet", str(dest)], env, source, dest, deadline)
        fetch = ["fetch", "--quiet", "--depth", "1", "--", source.url, source.ref]
        _git(["-C", str(dest), *fetch], env, source, dest, deadline)
        checkout = ["-c", "advice.detachedHead=false", "checkout", "--quiet", "FETCH_HEAD"]
        _git(["-C", str(dest), *checkout], env, source, dest, deadline)
    else:
        clone = ["clone", "--quiet", "--depth", "1", "--branch", source.ref, "--", source.url]
        _git([*clone, str(dest)], env, source, dest, deadline)
    _check_size(source, dest)  # one that came in between two looks
    return _entry_point(source, dest)


def _environment(source: GitSource, home: Path) -> dict[str, str]:
    # No prompts (a private repo must fail, not hang), no user or system git config, and no
    # transports beyond the URL's own (validation decided that one is allowed).
    allowed = {"http", "https", "ssh", "git", urlsplit(source.url).scheme}
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_ALLOW_PROTOCOL": ":".join(sorted(allowed)),
        "HOME": str(home),
    }


def _git(
    argv: list[str], env: dict[str, str], source: GitSource, dest: Path, deadline: float
) -> None:
    """One git command, stopped (its helpers too) past the deadline or the size limit."""
    with tempfile.TemporaryFile() as stderr:
        # Its own process group: git leaves the transfer to helpers (git-remote-http,
        # index-pack) that killing git alone would leave downloading.
        process = subprocess.Popen(
            ["git", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            start_new_session=True,
        )
        next_size = time.monotonic() + SIZE_EVERY_S
        try:
            while True:
                try:
                    process.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if now > deadline:
                    raise EngineError(
                        "git",
                        f"cloning {source.url} took over {CLONE_TIMEOUT_S:g} s: stopped "
                        "(a slow server, or a repository too big to fetch in that time)",
                    )
                if now < next_size:
                    continue
                next_size = now + SIZE_EVERY_S
                _check_size(source, dest)
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if process.returncode != 0:
            stderr.seek(0)
            raise EngineError("git", _failure(source, stderr.read().decode("utf-8", "replace")))


def _failure(source: GitSource, stderr: str) -> str:
    """What went wrong, in the consumer's terms rather than git's last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    detail = lines[-1] if lines else "git failed"
    text = stderr.lower()
    where = f"{source.url} at {source.ref}"
    if "not found in upstream" in text or ("remote branch" in text and "not found" in text):
        hint = ""
        if re.fullmatch(r"[0-9a-f]{4,39}", source.ref):
            hint = " (give a commit by its full 40-character id)"
        return f"cannot clone {where}: the repository has no branch or tag {source.ref!r}{hint}"
    if "couldn't find remote ref" in text or "not our ref" in text:
        return f"cannot clone {where}: no such commit in the repository"
    if "repository not found" in text or ("fatal: repository" in text and "not found" in text):
        return f"cannot clone {where}: no git repository at {source.url}"
    return f"cannot clone {where}: {detail}"


def _entry_point(source: GitSource, dest: Path) -> Path:
    entry = (dest / source.entry).resolve()
    if not entry.is_relative_to(dest.resolve()):
        # '..' never passes validation; a symlink in the repository still can point anywhere.
        raise EngineError(
            "git", f"entry point {source.entry} leads out of the repository {source.url}"
        )
    if not entry.is_file():
        raise EngineError(
            "git", f"entry point {source.entry} is not a file in {source.url} at {source.ref}"
        )
    return entry


def _check_size(source: GitSource, dest: Path) -> None:
    if (size := _size(dest)) > MAX_REPO_BYTES:
        raise EngineError(
            "git",
            f"{source.url} is too big: over {_mb(MAX_REPO_BYTES)} on disk ({_mb(size)} fetched)",
        )


def _size(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _mb(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MB"
