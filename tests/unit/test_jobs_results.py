"""Result archives and checkpoints: packing from inside the workspace only, checksums, and
unpacking hostile archives safely (tar_reader)."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.errors import EngineError
from engine.jobs.checkpoints import latest, restore, snapshot
from engine.jobs.results import pack, safe_unpack, sha256_file, verify

KEY = b"PRIVATE-KEY-BYTES-" * 4


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    (ws / "outputs" / "nested").mkdir(parents=True)
    (ws / "outputs" / "metrics.json").write_text('{"accuracy": 0.93}')
    (ws / "outputs" / "nested" / "model.bin").write_bytes(b"\x00" * 1000)
    (ws / "outputs" / "escape").symlink_to("/etc/passwd")
    (ws / "scratch.txt").write_text("not an output")
    return ws


def _keys(tmp_path: Path) -> Path:
    keys = tmp_path / "keys"
    keys.mkdir(exist_ok=True)
    (keys / "identity.key").write_bytes(KEY)
    return keys


def _names(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {
            m.name: (tar.extractfile(m).read() if m.isfile() else b"")  # type: ignore[union-attr]
            for m in tar
        }


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
    assert archive.skipped == ("'outputs/escape' is a symbolic link: not sent",)
    assert not (first / "scratch.txt").exists()


def test_a_link_anywhere_in_an_output_path_is_not_followed(tmp_path: Path) -> None:
    keys = _keys(tmp_path)
    ws = tmp_path / "workspace"
    (ws / "outputs" / "deep").mkdir(parents=True)
    (ws / "outputs" / "ok.txt").write_text("fine")
    (ws / "leak").symlink_to(os.path.relpath(keys, ws))  # leak -> ../keys
    (ws / "outputs" / "deep" / "up").symlink_to("../../../keys")  # a folder link inside
    (ws / "outputs" / "key").symlink_to(keys / "identity.key")  # a file link inside
    os.link(keys / "identity.key", ws / "outputs" / "hard")  # same inode as the key
    os.mkfifo(ws / "outputs" / "fifo")  # opening it for reading would block forever
    (ws / "whole").symlink_to(keys)
    outputs = ["leak/identity.key", "outputs", "whole", "leak", "outputs/deep/up/identity.key"]
    archive = pack(ws, outputs, tmp_path / "r.tar.gz")
    got = _names(archive.path)
    assert sorted(got) == ["outputs", "outputs/deep", "outputs/ok.txt"]
    assert not any(KEY in data for data in got.values())
    assert KEY not in gzip.decompress(archive.path.read_bytes())
    notes = "\n".join(archive.skipped)
    for expected in (
        "'leak' is a symbolic link, not a folder",
        "'outputs/deep/up' is a symbolic link",
        "'outputs/key' is a symbolic link",
        "'outputs/hard' has other hard links",
        "'outputs/fifo' is a FIFO",
        "'whole' is a symbolic link",
    ):
        assert expected in notes


def test_the_workspace_itself_must_not_be_a_link(tmp_path: Path) -> None:
    keys = _keys(tmp_path)
    (tmp_path / "workspace").symlink_to(keys)
    with pytest.raises(EngineError, match="cannot open the workspace"):
        pack(tmp_path / "workspace", ["."], tmp_path / "r.tar.gz")


@pytest.mark.skipif(os.geteuid() != 0, reason="reading as another user needs root")
def test_as_root_results_are_read_as_the_workspace_owner(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    (ws / "outputs").mkdir(parents=True)
    (ws / "outputs" / "mine.txt").write_text("the job's")
    (ws / "outputs" / "root-only").write_bytes(KEY)
    for path in (ws, ws / "outputs", ws / "outputs" / "mine.txt"):
        os.chown(path, 65534, 65534)
    (ws / "outputs" / "root-only").chmod(0o600)  # root's file: nobody cannot read it
    tmp_path.chmod(0o700)  # nobody cannot even reach the workspace by path
    archive = pack(ws, ["outputs"], tmp_path / "out" / "r.tar.gz")
    got = _names(archive.path)
    assert got["outputs/mine.txt"] == b"the job's" and "outputs/root-only" not in got
    assert archive.skipped == (
        "'outputs/root-only' could not be opened (Permission denied): not sent",
    )
    assert archive.path.stat().st_uid == 0  # written by us, only read by the child


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
    assert not list(tmp_path.glob("r.tar.gz*"))


def test_a_folder_of_too_many_files_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    (ws / "outputs").mkdir(parents=True)
    for i in range(50):
        (ws / "outputs" / f"f{i}").write_bytes(b"")
    with pytest.raises(EngineError, match="more than 10 entries") as info:
        pack(ws, ["outputs"], tmp_path / "r.tar.gz", max_members=10)
    assert info.value.code == "results_too_large"
    (ws / "outputs" / "sub").mkdir()
    for i in range(8):
        (ws / "outputs" / "sub" / f"g{i}").write_bytes(b"")
    with pytest.raises(EngineError, match="over 10 files and folders; the limit is 10"):
        pack(
            ws,
            ["outputs/sub", "outputs/f1", "outputs/f2", "outputs/f3"],
            tmp_path / "r",
            max_members=10,
        )


def test_names_the_consumer_would_refuse_are_not_sent(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    (ws / "outputs").mkdir(parents=True)
    (ws / "outputs" / "bad\x1b[2Jname").write_text("x")
    # A bidi override ("report\u202etxt.exe" shows as "reportexe.txt") and a C1 CSI.
    (ws / "outputs" / "report\u202etxt.exe").write_text("x")
    (ws / "outputs" / "c1\x9b2Jname").write_text("x")
    (ws / "outputs" / ("é" * 100)).write_text("long but fine")  # 200 bytes: a pax header
    archive = pack(ws, ["outputs"], tmp_path / "r.tar.gz")
    assert len(archive.skipped) == 3
    assert all("has control characters" in note for note in archive.skipped)
    assert any("('\\u202e')" in note for note in archive.skipped), archive.skipped
    assert any("('\\x9b')" in note for note in archive.skipped), archive.skipped
    unpacked = safe_unpack(archive.path, tmp_path / "results", "run")
    assert (unpacked / "outputs" / ("é" * 100)).read_text() == "long but fine"


# --- hostile archives ---------------------------------------------------------------------


def _hostile(tmp_path: Path, build: Callable[[tarfile.TarFile], object], **kw: object) -> Path:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz", **kw) as tar:  # type: ignore[call-overload]
        build(tar)
    return path


def _file(tar: tarfile.TarFile, name: str, data: bytes = b"x") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return info


def _link(tar: tarfile.TarFile, name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    tar.addfile(info)


def _dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    tar.addfile(info)


def _cve_2025_4517(tar: tarfile.TarFile) -> None:
    """The published shape: a chain of long-named folders and links whose resolution runs
    past PATH_MAX (so realpath stops early and the filter's check passes), then a link that
    climbs out through the chain and a file written through it."""
    comp = "d" * 247
    steps = "abcdefghijklmnop"
    path = ""
    for step in steps:
        _dir(tar, os.path.join(path, comp))
        _link(tar, os.path.join(path, step), comp)
        path = os.path.join(path, comp)
    _link(tar, "/".join(steps) + "/" + "l" * 254, "../" * len(steps))
    _link(tar, "escape", "/".join(steps) + "/" + "l" * 254 + "/../../../../../../tmp")
    _file(tar, "escape/pwned", b"owned")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda t: _file(t, "../../etc/cron.d/evil"), "'../../etc/cron.d/evil' goes up"),
        (lambda t: _file(t, "ok/../../x"), "goes up"),
        (lambda t: _file(t, "/etc/passwd"), "member '/etc/passwd' has an absolute path"),
        (lambda t: _link(t, "outputs/pw", "/etc/passwd"), "'outputs/pw' is a symbolic link"),
        (lambda t: _link(t, "outputs/b", "a.txt"), "'outputs/b' is a symbolic link"),
        (lambda t: _link(t, "h", "/etc/shadow", tarfile.LNKTYPE), "'h' is a hard link"),
        (lambda t: _link(t, "dev", "", tarfile.CHRTYPE), "'dev' is a character device"),
        (lambda t: _link(t, "blk", "", tarfile.BLKTYPE), "'blk' is a block device"),
        (lambda t: _link(t, "fifo", "", tarfile.FIFOTYPE), "'fifo' is a FIFO"),
        (lambda t: _file(t, "big", b"\x00" * 5000), "'big' is 5000 bytes; at most 4096"),
        (lambda t: [_file(t, f"f{i}", b"\x00" * 1000) for i in range(5)], "more than 4096 bytes"),
        (lambda t: [_file(t, f"f{i}") for i in range(20)], "more than 10 members"),
        (_cve_2025_4517, "is a symbolic link"),
        (lambda t: [_file(t, "a"), _file(t, "a")], "'a' appears twice"),
        (lambda t: [_file(t, "a"), _file(t, "a/b")], "'a/b' is inside the file 'a'"),
        (lambda t: _file(t, "ansi\x1b]0;x\x07"), "has control characters"),
        (lambda t: _file(t, "x\u202etxt.exe"), "has control characters ('\\u202e')"),
        (lambda t: _file(t, "c1\x9b2J"), "has control characters ('\\x9b')"),
        (lambda t: _file(t, "x/" * 70 + "f"), "nested more than 64"),
    ],
)
def test_malicious_archives_are_rejected(
    tmp_path: Path, build: Callable[[tarfile.TarFile], object], message: str
) -> None:
    evil = _hostile(tmp_path, build)
    dest = tmp_path / "results"
    with pytest.raises(EngineError) as info:
        safe_unpack(evil, dest, "run", max_bytes=4096, max_members=10)
    assert info.value.code == "unsafe_archive"
    assert message in info.value.message and "\n" not in info.value.message
    assert list(dest.iterdir()) == [] if dest.exists() else True  # not even a staging folder
    assert not (tmp_path.parent / "etc").exists()
    assert not Path("/tmp/pwned").exists()


def test_a_bad_member_after_good_ones_writes_nothing_at_all(tmp_path: Path) -> None:
    def build(tar: tarfile.TarFile) -> None:
        for i in range(50):
            _file(tar, f"outputs/f{i}", b"data" * 100)
        _link(tar, "outputs/zz", "/etc/passwd")

    dest = tmp_path / "results"
    dest.mkdir()
    with pytest.raises(EngineError, match="'outputs/zz' is a symbolic link"):
        safe_unpack(_hostile(tmp_path, build), dest, "run")
    assert list(dest.iterdir()) == []


def _raw_header(name: bytes, size: int, kind: bytes) -> bytes:
    block = bytearray(512)
    block[0 : len(name)] = name
    block[100:108] = b"0000644\x00"
    block[108:124] = b"0000000\x000000000\x00"
    block[124:136] = b"%011o\x00" % size
    block[136:148] = b"00000000000\x00"
    block[156:157] = kind
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\x00 " % sum(block)
    return bytes(block)


def _zeros_gz(count_mib: int) -> bytes:
    """``count_mib`` MiB of zeros as concatenated gzip members (fast to build, tiny)."""
    one = gzip.compress(bytes(1 << 20), compresslevel=9)
    return one * count_mib


@pytest.mark.parametrize(("kind", "what"), [(b"x", "pax header"), (b"L", "GNU long name")])
def test_a_huge_extended_header_is_refused_after_reading_a_block(
    tmp_path: Path, kind: bytes, what: str
) -> None:
    evil = tmp_path / "pax.tar.gz"
    evil.write_bytes(gzip.compress(_raw_header(b"././@PaxHeader", 256 << 20, kind)) + _zeros_gz(64))
    assert evil.stat().st_size < 1 << 20
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(EngineError, match=f"{256 << 20}-byte {what}; at most 65536"):
            safe_unpack(evil, tmp_path / "r", "run")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 2 and peak < 8 << 20


def test_a_gzip_bomb_stops_at_the_limit_without_memory(tmp_path: Path) -> None:
    member = _raw_header(b"bomb", 1 << 20, b"0")
    evil = tmp_path / "bomb.tar.gz"
    with evil.open("wb") as handle:  # 40 MiB of zeros in members of 1 MiB, ~40 kB compressed
        for i in range(40):
            handle.write(gzip.compress(_raw_header(b"f%d" % i, 1 << 20, b"0")))
            handle.write(_zeros_gz(1))
    assert member and evil.stat().st_size < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(EngineError, match=f"more than {16 << 20} bytes"):
            safe_unpack(evil, tmp_path / "r", "run", max_bytes=16 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20 and not (tmp_path / "r" / "run").exists()


def test_pax_and_gnu_names_are_checked_too(tmp_path: Path) -> None:
    def pax_escape(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("harmless")
        info.pax_headers = {"path": "../../escaped"}
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))

    with pytest.raises(EngineError, match=r"'\.\./\.\./escaped' goes up"):
        safe_unpack(_hostile(tmp_path, pax_escape, format=tarfile.PAX_FORMAT), tmp_path, "r")
    gnu = _hostile(tmp_path, lambda t: _file(t, "/abs/" + "n" * 200), format=tarfile.GNU_FORMAT)
    with pytest.raises(EngineError, match="has an absolute path"):
        safe_unpack(gnu, tmp_path / "r2", "r")
    sparse = tmp_path / "sparse.tar"
    with tarfile.open(sparse, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("s")
        info.pax_headers = {"GNU.sparse.map": "0,1"}
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(EngineError, match="sparse file"):
        safe_unpack(sparse, tmp_path / "r3", "r")


def test_honest_long_names_in_every_format_unpack(tmp_path: Path) -> None:
    long = "outputs/" + "n" * 150 + "/" + "é" * 60 + ".txt"
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        unpacked = safe_unpack(
            _hostile(tmp_path, lambda t: _file(t, long, b"ok"), format=fmt), tmp_path / "r", "r"
        )
        assert (unpacked / long).read_bytes() == b"ok"


def test_not_an_archive(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"this is no tar" * 100)
    with pytest.raises(EngineError, match="not a tar archive"):
        safe_unpack(junk, tmp_path / "r", "run")
    junk.write_bytes(b"\x1f\x8b" + b"broken gzip" * 100)
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
    assert (ws / "outputs" / "nested" / "model.bin").stat().st_size == 1000
    assert not (ws / ".deps").exists()  # recreated by prepare, never snapshotted
    assert not (ws / "outputs" / "escape").is_symlink()  # links are not snapshotted
    assert [p.name for p in ws.parent.iterdir() if p.name.startswith(".restore")] == []
    with first.path.open("ab") as handle:
        handle.write(b"junk")
    with pytest.raises(EngineError, match="corrupt"):
        restore(first, ws)


def test_a_checkpoint_that_fails_to_unpack_leaves_the_workspace_alone(tmp_path: Path) -> None:
    from engine.jobs.checkpoints import Checkpoint

    ws = workspace(tmp_path)
    evil = tmp_path / "checkpoint-00001.tar"
    with tarfile.open(evil, "w") as tar:
        _file(tar, "state.json", b"{}")
        _link(tar, "outputs", "/etc")
    with pytest.raises(EngineError, match="symbolic link"):
        restore(Checkpoint(evil, sha256_file(evil), 1), ws)
    assert (ws / "outputs" / "metrics.json").exists() and not (ws / "state.json").exists()


def test_a_hard_link_made_while_a_file_is_copied_stops_the_pack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The link count was checked only before the copy: a job that makes the link while the
    file is read (37 packs in 30,000 when racing) had it sent. Raced here deterministically."""
    from engine.jobs import workspace_tar

    ws = tmp_path / "workspace"
    (ws / "outputs").mkdir(parents=True)
    (ws / "outputs" / "a.txt").write_text("shared")
    copy = tarfile.TarFile.addfile

    def linking(self: tarfile.TarFile, info: tarfile.TarInfo, handle: object = None) -> None:
        copy(self, info, handle)  # type: ignore[arg-type]
        if info.name == "outputs/a.txt":
            os.link(ws / "outputs" / "a.txt", tmp_path / "elsewhere")

    monkeypatch.setattr(tarfile.TarFile, "addfile", linking)
    root = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(workspace_tar.PackError, match="got another hard link"):
            workspace_tar.write_tar(
                root, ["outputs"], io.BytesIO(), max_bytes=1 << 20, max_members=10
            )
    finally:
        os.close(root)


def test_a_sparse_result_stays_sparse_on_the_consumer(tmp_path: Path) -> None:
    """64 MiB of zeros with a few bytes in the middle: the consumer's copy is as long, reads
    the same, and takes the disk of its one written block, not 64 MiB at every fetch."""
    ws = tmp_path / "workspace"
    (ws / "outputs").mkdir(parents=True)
    with (ws / "outputs" / "sparse.bin").open("wb") as handle:
        handle.truncate(64 << 20)
        handle.seek(32 << 20)
        handle.write(b"middle")
    archive = pack(ws, ["outputs"], tmp_path / "r.tar.gz", max_bytes=128 << 20)
    unpacked = safe_unpack(archive.path, tmp_path / "results", "run", max_bytes=128 << 20)
    got = unpacked / "outputs" / "sparse.bin"
    assert got.stat().st_size == 64 << 20
    assert got.stat().st_blocks * 512 <= 2 << 20  # the one 1 MiB block with bytes in it
    with got.open("rb") as handle:
        handle.seek((32 << 20) - 2)
        assert handle.read(10) == b"\0\0middle\0\0"


def test_the_packing_childs_name_rule_is_the_domains() -> None:
    """workspace_tar carries its own copy of the control-character rule (it runs without the
    engine on its path): both refuse exactly the same code points."""
    import sys

    from engine.domain.safe_text import control_character as domain_rule
    from engine.jobs.workspace_tar import control_character as child_rule

    for code in range(sys.maxunicode + 1):
        char = chr(code)
        assert child_rule(char) == domain_rule(char), hex(code)
