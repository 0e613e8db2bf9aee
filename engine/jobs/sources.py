"""Getting a job's code from a git repository (blocking: executors call it in a thread)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from engine.errors import EngineError
from engine.jobs.spec import GitSource

CLONE_TIMEOUT_S = 300


def clone_git(source: GitSource, dest: Path) -> Path:
    """Shallow clone of ``source.ref`` into ``dest`` (replaced); returns the entry point."""
    if shutil.which("git") is None:
        raise EngineError("git", "git is not installed on this provider")
    if dest.exists():
        shutil.rmtree(dest)
    # No prompts (a private repo must fail, not hang) and no user or system git config.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(dest.parent),
    }
    argv = ["git", "clone", "--quiet", "--depth", "1", "--branch", source.ref, "--", source.url]
    try:
        done = subprocess.run(
            [*argv, str(dest)],
            capture_output=True,
            text=True,
            timeout=CLONE_TIMEOUT_S,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise EngineError("git", f"cloning {source.url} took over {CLONE_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        detail = done.stderr.strip().splitlines()[-1:] or ["unknown error"]
        raise EngineError("git", f"cannot clone {source.url} at {source.ref}: {detail[0]}")
    entry = (dest / source.entry).resolve()
    if not entry.is_relative_to(dest.resolve()) or not entry.is_file():
        raise EngineError("git", f"entry point {source.entry} is not a file in {source.url}")
    return entry
