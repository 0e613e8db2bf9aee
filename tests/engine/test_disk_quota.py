"""What counts toward a job's disk (engine/jobs/executors/disk_quota.py), on a real file system."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from engine.jobs.executors import disk_quota


def test_files_count_by_what_they_hold_and_links_are_not_followed(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "sub").mkdir(parents=True)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"o" * (4 << 20))
    (workspace / "sub" / "data.bin").write_bytes(b"d" * (1 << 20))
    os.link(workspace / "sub" / "data.bin", workspace / "hard.bin")  # the same blocks again
    (workspace / "to-outside").symlink_to(outside)
    (workspace / "to-root").symlink_to("/")
    with open(workspace / "sparse.bin", "wb") as handle:
        handle.truncate(1 << 30)  # a 1 GB hole holds no blocks
    used = disk_quota.workspace_bytes(workspace)
    assert 1 << 20 <= used < (1 << 20) + (256 << 10), used


def test_the_watch_stops_once_and_only_over_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    reasons: list[str] = []
    walks: list[disk_quota.WorkspaceUse] = []
    walk = disk_quota.workspace_use

    def counted(root: Path, **options: Any) -> disk_quota.WorkspaceUse:
        walks.append(used := walk(root, **options))
        return used

    monkeypatch.setattr(disk_quota, "workspace_use", counted)

    async def main() -> None:
        done = trio.Event()

        async def stop(reason: str) -> None:
            reasons.append(reason)
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(disk_quota.watch, workspace, 2, 1000, stop, done)
            with trio.fail_after(5):
                while not walks:
                    await trio.sleep(0.05)
            assert reasons == []  # one walk of an empty workspace: under the limit
            (workspace / "a.bin").write_bytes(b"a" * (3 << 20))
            with trio.fail_after(disk_quota.MIN_INTERVAL_S + 5):
                await done.wait()

    trio.run(main)
    assert reasons == ["used 3 MB of disk in /workspace, over the 2 MB its resource spec sells"]


def test_the_watch_ends_with_the_run(tmp_path: Path) -> None:
    async def main() -> None:
        done = trio.Event()

        async def stop(reason: str) -> None:
            raise AssertionError(reason)

        done.set()
        with trio.fail_after(2):
            await disk_quota.watch(tmp_path, 1, 1000, stop, done)

    trio.run(main)


def test_files_and_folders_count_and_the_walk_stops_past_the_cap(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    for folder in range(3):
        (workspace / f"d{folder}").mkdir(parents=True)
        for name in range(100):
            (workspace / f"d{folder}" / f"f{name}").touch()
    (workspace / "to-root").symlink_to("/")  # one entry; never entered
    whole = disk_quota.workspace_use(workspace, max_entries=None, with_bytes=False)
    assert whole.entries == 3 + 300 + 1
    with_bytes = disk_quota.workspace_use(workspace, max_entries=None, with_bytes=True)
    assert with_bytes.entries == whole.entries
    # Past the cap the walk stops: it counted at most one folder's worth more.
    stopped = disk_quota.workspace_use(workspace, max_entries=50, with_bytes=False)
    assert 50 < stopped.entries <= 50 + 101


def test_the_watch_stops_a_job_over_its_files_without_a_disk_limit(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    for name in range(30):
        (workspace / f"f{name}").touch()
    reasons = _stopped(workspace, None, 20)
    assert reasons == [disk_quota.too_many_files_reason(20)]
    assert "over 20 files and folders" in reasons[0] and "jobs.max_files" in reasons[0]


def nest(folder: Path, depth: int) -> None:
    """``depth`` folders, each in the last (made from fds: the path grows past PATH_MAX)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def test_folders_nested_past_the_depth_stop_the_walk_and_the_job(tmp_path: Path) -> None:
    """os.fwalk recursed: 1,200 nested folders crashed the watch (RecursionError), and the
    job then wrote without limit."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    try:
        nest(workspace, 1_200)
        used = disk_quota.workspace_use(workspace, max_entries=None, with_bytes=True)
        assert used.too_deep and used.entries == disk_quota.MAX_DEPTH
        shallow = tmp_path / "shallow"
        shallow.mkdir()
        nest(shallow, disk_quota.MAX_DEPTH - 1)
        assert not disk_quota.workspace_use(shallow, max_entries=None, with_bytes=False).too_deep
        assert _stopped(workspace, 100, 100_000) == [disk_quota.too_deep_reason()]
    finally:  # pytest's own clean-up of old temporary folders recurses too
        subprocess.run(["rm", "-rf", "--", str(workspace)], check=True)


def _stopped(workspace: Path, disk_mb: int | None, max_files: int | None) -> list[str]:
    """The reasons a watch of ``workspace`` stopped its job for (it stops once)."""
    reasons: list[str] = []

    async def main() -> None:
        done = trio.Event()

        async def stop(reason: str) -> None:
            reasons.append(reason)
            done.set()

        with trio.fail_after(disk_quota.MIN_INTERVAL_S + 5):
            await disk_quota.watch(workspace, disk_mb, max_files, stop, done)

    trio.run(main)
    return reasons
