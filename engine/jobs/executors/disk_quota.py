"""A job's disk, as its resource spec sold it: the workspace may hold at most ``disk_mb``.

Neither executor has a file-system quota to lean on (Docker's ``storage_opt`` size needs
overlay2 on xfs with project quotas; the process executor writes to the provider's own disk),
so the bound is two parts:

- each job's files are walked while it runs, and a job holding more than its spec's disk is
  stopped, its outcome "failed" with the figures (the job's own doing: billed as used);
- ``RLIMIT_FSIZE`` at the same size stops one file growing past it between two walks
  (the kernel refuses the write: EFBIG, or SIGXFSZ for a job that does not handle it).

Everything else a job can write is bounded already: the container's root is read-only and
its /tmp a sized tmpfs; the process executor's /tmp is the workspace's own ``.tmp``.
"""

from __future__ import annotations

import math
import os
import stat
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

# The first walk soon after the start; later ones no more often than every MIN_INTERVAL_S and
# never more than 1/WALK_SHARE of the time walking (a workspace of a million small files costs
# seconds to walk, and the walk must not become the provider's load).
FIRST_WALK_S = 0.5
MIN_INTERVAL_S = 2.0
MAX_INTERVAL_S = 60.0
WALK_SHARE = 20


def workspace_bytes(root: Path) -> int:
    """Bytes the files under ``root`` take on disk (allocated blocks: a sparse file counts
    what it holds), links not followed, hard links counted once, nothing outside ``root``.

    A folder that vanishes or is swapped for a link while we walk is skipped, never entered.
    """
    total = 0
    seen: set[tuple[int, int]] = set()
    for _, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        for name in (*dirnames, *filenames):
            try:
                info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except OSError:  # gone meanwhile
                continue
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                key = (info.st_dev, info.st_ino)
                if key in seen:
                    continue
                seen.add(key)
            total += info.st_blocks * 512
    return total


def over_quota_reason(used: int, disk_mb: int) -> str:
    return (
        f"used {math.ceil(used / (1 << 20)):,} MB of disk in /workspace, over the "
        f"{disk_mb:,} MB its resource spec sells"
    )


def file_too_large(disk_mb: int) -> str:
    return f"wrote a file past the {disk_mb:,} MB of disk its resource spec sells"


def wrote_too_large(disk_mb: int | None, killed_by_sigxfsz: bool, stderr: list[str]) -> bool:
    """The file-size limit ended it: SIGXFSZ, or (Python ignores that signal) an uncaught
    ``OSError: [Errno 27] File too large``."""
    if not disk_mb:
        return False
    return killed_by_sigxfsz or any("File too large" in line for line in stderr)


async def watch(
    workspace: Path,
    disk_mb: int,
    stop: Callable[[str], Awaitable[None]],
    done: trio.Event,
) -> None:
    """Walk ``workspace`` until ``done``; over ``disk_mb``, call ``stop(reason)`` once."""
    limit = disk_mb << 20
    interval = FIRST_WALK_S
    while not done.is_set():
        with trio.move_on_after(interval):
            await done.wait()
        if done.is_set():
            return
        started = time.monotonic()
        try:
            used = await trio.to_thread.run_sync(workspace_bytes, workspace, abandon_on_cancel=True)
        except OSError:  # the workspace itself went away: the run is ending
            return
        took = time.monotonic() - started
        if used > limit:
            await stop(over_quota_reason(used, disk_mb))
            return
        interval = min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, took * WALK_SHARE))
