"""Result archives and checkpoints: packing, checksums, and unpacking hostile archives safely."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from engine.errors import EngineError
from engine.jobs.checkpoints import latest, restore, snapshot
from engine.jobs.results import pack, safe_unpack, sha256_file, verify


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    (ws / "outputs" / "nested").mkdir(parents=True)
    (ws / "outputs" / "metrics.json").write_text('{"accuracy": 0.93}')
    (ws / "outputs" / "nested" / "model.bin").write_bytes(b"\x00" * 1000)
    (ws / "outputs" / "escape").symlink_to("/etc/passwd")
    (ws / "scratch.txt").write_text("not an output")
    return ws


def test_pack_verify_unpack_roundtrip(tmp_path: Path) -> None:
    archive = pack(workspace(tmp_path), ["outputs"], tmp_path / "out" / "r.tar.gz")
    assert (
        archive.sha256 == sha256_file(archive.path) and archive.size == archive.path.stat().st_size
    )
    verify(archive.path, archive.sha256, archive.size)
    first = safe_unpack(archive.path, tmp_path / "results", "job-1")
    second = safe_unpack(archive.path, tmp_path / "results", "job-1")
    assert (first.name, second.name) == ("job-1", "job-1-2")  # never over an earlier run
    assert (first / "outputs" / "metrics.json").read_text() == '{"accuracy": 0.93}'
    assert (first / "outputs" / "nested" / "model.bin").stat().st_size == 1000
    assert not (first / "outputs" / "escape").exists()  # links are not packed
    assert not (first / "scratch.txt").exists()


def test_tampered_archive_fails_verification(tmp_path: Path) -> None:
    archive = pack(workspace(tmp_path), ["outputs"], tmp_path / "r.tar.gz")
    with archive.path.open("ab") as handle:
        handle.write(b"x")
    with pytest.raises(EngineError, match="provider announced"):
        verify(archive.path, archive.sha256, archive.size)
    with pytest.raises(EngineError, match="checksum mismatch"):
        verify(archive.path, archive.sha256)


def test_results_over_the_limit_are_refused(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="the limit is 100") as info:
        pack(workspace(tmp_path), ["outputs"], tmp_path / "r.tar.gz", max_bytes=100)
    assert info.value.code == "results_too_large"


def _hostile(tmp_path: Path, build: object) -> Path:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        build(tar)  # type: ignore[operator]
    return path


def _file(tar: tarfile.TarFile, name: str, data: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _link(tar: tarfile.TarFile, name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    tar.addfile(info)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda t: _file(t, "../../etc/cron.d/evil"),
            "path traversal in archive: '../../etc/cron.d/evil'",
        ),
        (lambda t: _file(t, "ok/../../x"), "path traversal"),
        (lambda t: _file(t, "/etc/passwd"), "absolute path in archive: '/etc/passwd'"),
        (lambda t: _link(t, "outputs/pw", "/etc/passwd"), "symlink 'outputs/pw' points outside"),
        (lambda t: _link(t, "outputs/up", "../../.."), "points outside"),
        (lambda t: _link(t, "h", "/etc/shadow", tarfile.LNKTYPE), "hard link 'h' to '/etc/shadow'"),
        (lambda t: _link(t, "dev", "", tarfile.CHRTYPE), "'dev' is a device, FIFO"),
        (lambda t: _file(t, "big", b"\x00" * 5000), "more than 4096 bytes"),
        (lambda t: [_file(t, f"f{i}") for i in range(20)], "more than 10 members"),
    ],
)
def test_malicious_archives_are_rejected(tmp_path: Path, build: object, message: str) -> None:
    evil = _hostile(tmp_path, build)
    dest = tmp_path / "results"
    with pytest.raises(EngineError) as info:
        safe_unpack(evil, dest, "run", max_bytes=4096, max_members=10)
    assert info.value.code == "unsafe_archive"
    assert message in info.value.message
    assert list(dest.iterdir()) == []  # nothing left behind, not even a staging folder
    assert not (tmp_path.parent / "etc").exists()


def test_links_inside_the_archive_are_fine(tmp_path: Path) -> None:
    def build(tar: tarfile.TarFile) -> None:
        _file(tar, "outputs/a.txt", b"data")
        _link(tar, "outputs/b.txt", "a.txt")
        _link(tar, "outputs/c.txt", "outputs/a.txt", tarfile.LNKTYPE)

    unpacked = safe_unpack(_hostile(tmp_path, build), tmp_path / "r", "run")
    assert (unpacked / "outputs" / "b.txt").read_text() == "data"
    assert (unpacked / "outputs" / "c.txt").read_text() == "data"


def test_not_an_archive(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"this is no tar")
    with pytest.raises(EngineError, match="not a readable tar archive"):
        safe_unpack(junk, tmp_path / "r", "run")


def test_checkpoint_snapshot_and_restore(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    (ws / "checkpoint").mkdir()
    (ws / "checkpoint" / "epoch.txt").write_text("3")
    (ws / ".deps").mkdir()
    (ws / ".deps" / "huge.whl").write_bytes(b"\x00" * 10)
    store = tmp_path / "checkpoints"
    first = snapshot(ws, store, 1)
    (ws / "checkpoint" / "epoch.txt").write_text("5")
    second = snapshot(ws, store, 2)
    assert latest(store) == second
    restore(first, ws)
    assert (ws / "checkpoint" / "epoch.txt").read_text() == "3"
    assert not (ws / ".deps").exists()  # recreated by prepare, never snapshotted
    with first.path.open("ab") as handle:
        handle.write(b"junk")
    with pytest.raises(EngineError, match="corrupt"):
        restore(first, ws)
