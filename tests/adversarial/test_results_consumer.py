"""A hostile provider answers a real consumer daemon's job honestly, then serves a crafted
results archive: every one must be refused by ``job results`` in one line, with nothing
written outside the chosen folder, nothing left inside it, memory bounded, and the consumer
then still runs an honest job with a real provider."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import os
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine.domain.spec import FRAMEWORKS
from engine.jobs import protocol as p
from tests.adversarial.hostile import HostilePeer, provider_advert, read_job_message
from tests.conftest import TEST_ADDRESS, run_cli
from tests.daemon_harness import Daemon, wait_for
from tests.unit.test_jobs_results import _raw_header, _zeros_gz

HONEST = """
import pathlib
pathlib.Path("outputs").mkdir(exist_ok=True)
pathlib.Path("outputs/result.txt").write_text("honest")
"""


def _tar_gz(build: Callable[[tarfile.TarFile], object], **kw: Any) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", **kw) as tar:
        build(tar)
    return buffer.getvalue()


def _file(tar: tarfile.TarFile, name: str, data: bytes = b"pwned") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return info


def _special(tar: tarfile.TarFile, name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    tar.addfile(info)
    return info


def _cve_2025_4517(outside: Path) -> Callable[[tarfile.TarFile], None]:
    """Long-named folders and links whose resolution runs past PATH_MAX (tarfile's data filter
    then checks a truncated path), a link that climbs out through them, a file through it."""

    def build(tar: tarfile.TarFile) -> None:
        comp = "d" * 247
        steps = "abcdefghijklmnop"
        path = ""
        for step in steps:
            _special(tar, os.path.join(path, comp), tarfile.DIRTYPE)
            _special(tar, os.path.join(path, step), tarfile.SYMTYPE, comp)
            path = os.path.join(path, comp)
        deep = "/".join(steps) + "/" + "l" * 254
        _special(tar, deep, tarfile.SYMTYPE, "../" * len(steps))
        _special(tar, "escape", tarfile.SYMTYPE, deep + "/../" * 20 + str(outside)[1:])
        _file(tar, "escape/cve")

    return build


def _pax_256_mib() -> bytes:
    return gzip.compress(_raw_header(b"././@PaxHeader", 256 << 20, b"x")) + _zeros_gz(256)


def _bomb_over_the_total() -> bytes:
    """1100 members of 1 MiB of zeros: 1.1 GiB unpacked (the cap is 1 GiB), ~1.2 MB sent."""
    zeros = _zeros_gz(1)
    members = (gzip.compress(_raw_header(b"z%d" % i, 1 << 20, b"0")) + zeros for i in range(1100))
    return b"".join(members) + gzip.compress(bytes(1024))


def _too_many_members(tar: tarfile.TarFile) -> None:
    for i in range(10_001):
        _file(tar, f"f{i}", b"")


@pytest.fixture
def www(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "www"
    root.mkdir()
    (root / "honest.py").write_text(HONEST)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class ArchiveProvider:
    """A hostile provider: quotes, accepts, reports the job completed at once, and serves
    whatever archive the test set (its checksum and size announced honestly, so the
    consumer's own verification passes and the archive's contents are what is tested)."""

    def __init__(self, peer: HostilePeer) -> None:
        self.peer = peer
        self.archive = b""
        self.announce_more = 0  # bytes the results header claims beyond the signed size
        self.corrupt = False  # serve other bytes than the signed checksum says (same size)
        self.fetches = 0
        peer.serve(p.JOB_PROTOCOL, self.handle)

    async def handle(self, stream: Any) -> None:
        message = await read_job_message(stream)
        if message is None:
            return
        job_id, kind, me = message["job_id"], message["t"], self.peer.identity
        archive = self.archive
        if kind == "offer":
            answer: p.JobMessage = p.Quote(
                job_id=job_id,
                provider=self.peer.peer_id,
                price_ntx_hour=1.0,
                total_ntx=0.05,
                expires_at=time.time() + 60,
                executor="process",
            )
            await p.send(stream, me, answer)
        elif kind == "confirm":
            await p.send(stream, me, p.Accepted(job_id=job_id))
        elif kind == "follow":
            now = time.time()
            update = p.Update(
                job_id=job_id,
                state="completed",
                exit_code=0,
                started_at=now - 1,
                finished_at=now,
                results_sha256=hashlib.sha256(archive).hexdigest(),
                results_size=len(archive),
            )
            await p.send(stream, me, update)
        elif kind == "fetch_results":
            self.fetches += 1
            header = p.ResultsHeader(
                job_id=job_id,
                sha256=hashlib.sha256(archive).hexdigest(),
                size=len(archive) + self.announce_more,
            )
            await p.send(stream, me, header)
            archive += bytes(self.announce_more)
            if self.corrupt:
                archive = bytes(len(archive))
            for start in range(0, len(archive), p.RESULT_CHUNK):
                await stream.write(archive[start : start + p.RESULT_CHUNK])
        await stream.close()


def _vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


@pytest.mark.timeout(600)  # a dozen jobs and their refusals, then an honest one (2 busy cores)
def test_crafted_results_archives_are_refused_and_the_consumer_still_works(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    www: str,
    tmp_path: Path,
) -> None:
    consumer = daemons("consumer", 71)
    peer = hostile(seed=b"\x99" * 32, bootstrap=[consumer.addrs()[0]])
    # provider_advert names "sklearn"; the consumer matches the frameworks providers send.
    peer.set_advert(msgspec.structs.replace(provider_advert(peer), frameworks=FRAMEWORKS))
    provider = ArchiveProvider(peer)
    peer.wait_connected(consumer.peer_id)
    wait_for(
        lambda: peer.listed_with_free_memory(consumer),
        "the consumer never listed the hostile provider with free memory",
        30,
    )
    outside = tmp_path / "outside"
    outside.mkdir()
    canary = outside / "canary.txt"
    canary.write_text("untouched")
    up = "../" * 30 + str(outside)[1:]

    def pax_path(tar: tarfile.TarFile) -> None:  # the name lives in the pax header only
        info = tarfile.TarInfo("harmless")
        info.pax_headers = {"path": f"{up}/pax"}
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))

    attacks: list[tuple[str, bytes, str]] = [
        ("cve-2025-4517", _tar_gz(_cve_2025_4517(outside)), "is a symbolic link"),
        ("dotdot", _tar_gz(lambda t: _file(t, f"{up}/dotdot")), "goes up out of the folder"),
        ("absolute", _tar_gz(lambda t: _file(t, f"{outside}/abs")), "has an absolute path"),
        (
            "hard link",
            _tar_gz(
                lambda t: [
                    _special(t, "h", tarfile.LNKTYPE, str(canary)),
                    _file(t, "h", b"overwritten"),
                ]
            ),
            "'h' is a hard link",
        ),
        (
            "device",
            _tar_gz(lambda t: _special(t, "null", tarfile.CHRTYPE)),
            "is a character device",
        ),
        ("fifo", _tar_gz(lambda t: _special(t, "pipe", tarfile.FIFOTYPE)), "is a FIFO"),
        ("bidi", _tar_gz(lambda t: _file(t, "a\u202etxt.exe")), "control characters"),
        ("c1 csi", _tar_gz(lambda t: _file(t, "a\x9b2J")), "control characters"),
        ("pax path", _tar_gz(pax_path, format=tarfile.PAX_FORMAT), "goes up"),
        ("256 MiB pax header", _pax_256_mib(), f"{256 << 20}-byte pax header"),
        ("gzip bomb", _bomb_over_the_total(), f"more than {1 << 30} bytes"),
        (
            "huge member",
            gzip.compress(_raw_header(b"big", 4 << 30, b"0")) + _zeros_gz(2),
            "at most",
        ),
        ("too many members", _tar_gz(_too_many_members), "more than 10000 members"),
    ]

    assert len(attacks[7][1]) < 2 << 20  # the 256 MiB header travels in ~1 MB
    pid = consumer.proc.pid  # type: ignore[union-attr]
    memory_before = _vm_hwm_mb(pid)
    for name, archive, refusal in attacks:
        provider.archive = archive
        job_id = consumer.cli(
            "job", "submit", "--url", f"{www}/honest.py", "--framework", "scikit-learn",
            "--expected-minutes", "1", "--peer", peer.peer_id,
        )["job_id"]  # fmt: skip
        stored = consumer.home.state_dir / "jobs" / job_id / "results.tar.gz"
        wait_for(stored.exists, f"{name}: the consumer never fetched the archive", 30)
        out = tmp_path / "results" / name.replace(" ", "-")
        started = time.monotonic()
        result = run_cli("job", "results", job_id, "-o", str(out), home=consumer.home)
        took = time.monotonic() - started
        message = result.stderr.strip()
        assert result.returncode != 0, (name, result.stdout)
        assert message.startswith(f"nunet-tui: error: the results of {job_id} from its provider")
        assert refusal in message and "\n" not in message and "Traceback" not in message, (
            name,
            message,
        )
        assert _tree(out) == set(), (name, _tree(out))  # nothing left inside, not even staging
        assert _tree(outside) == {"canary.txt"} and canary.read_text() == "untouched", name
        if name == "256 MiB pax header":
            assert took < 10, took  # tarfile took 13 s here (and 800 MB)
    assert _vm_hwm_mb(pid) - memory_before < 100, (memory_before, _vm_hwm_mb(pid))

    # A results header announcing more than the size signed in the job's last Update: the
    # consumer reads none of it (no partial download), and the job has no results.
    provider.archive = _tar_gz(lambda t: _file(t, "outputs/x"))
    provider.announce_more = 64 << 20
    job_id = consumer.cli(
        "job", "submit", "--url", f"{www}/honest.py", "--framework", "scikit-learn",
        "--expected-minutes", "1", "--peer", peer.peer_id,
    )["job_id"]  # fmt: skip
    wait_for(lambda: consumer.cli("job", "show", job_id)["state"] == "completed", "no end", 30)
    job_dir = consumer.home.state_dir / "jobs" / job_id
    wait_for(
        lambda: "results header does not match" in consumer.stderr_path.read_text(),
        "the consumer did not refuse the oversized results header",
    )
    assert not job_dir.exists() or not [f for f in job_dir.iterdir() if f.name != "log.jsonl"]
    refused = run_cli("job", "results", job_id, "-o", str(tmp_path / "r"), home=consumer.home)
    assert refused.returncode != 0 and "has no results yet" in refused.stderr
    assert not Path("/tmp/cve").exists()

    # The consumer still runs an honest job, with a real provider.
    honest = daemons(
        "provider",
        70,
        bootstrap=consumer.addrs()[0],
        extra_toml='[jobs]\nexecutors = ["process"]\n',
    )
    honest.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    honest_id = honest.peer_id
    wait_for(
        lambda: any(x["peer_id"] == honest_id for x in consumer.cli("peer", "list")["peers"]),
        "the consumer never saw the honest provider",
    )
    job_id = consumer.cli(
        "job", "submit", "--url", f"{www}/honest.py", "--framework", "scikit-learn",
        "--expected-minutes", "1", "--peer", honest_id,
    )["job_id"]  # fmt: skip
    wait_for(
        lambda: consumer.cli("job", "show", job_id)["state"] == "completed",
        "the honest job did not complete",
        90,
    )
    stored = consumer.home.state_dir / "jobs" / job_id / "results.tar.gz"
    wait_for(stored.exists, "the honest results never arrived", 30)
    got = consumer.cli("job", "results", job_id, "-o", str(tmp_path / "honest"))
    assert (Path(got["directory"]) / "outputs" / "result.txt").read_text() == "honest"


def test_results_that_never_match_their_checksum_are_tried_a_few_times_then_the_reason_kept(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    www: str,
    tmp_path: Path,
) -> None:
    """Issue 20 §8: a provider whose results never match the checksum it signed is asked
    RESULT_TRIES times (each a whole download), not every 5 s for ever; the job keeps why,
    `job show` says it, and `job results` tries once more and says why in one line."""
    from engine.jobs.consumer_base import RESULT_TRIES

    consumer = daemons("consumer", 72)
    peer = hostile(seed=b"\x98" * 32, bootstrap=[consumer.addrs()[0]])
    peer.set_advert(msgspec.structs.replace(provider_advert(peer), frameworks=FRAMEWORKS))
    provider = ArchiveProvider(peer)
    provider.archive = _tar_gz(lambda t: _file(t, "outputs/result.txt", b"fine"))
    provider.corrupt = True
    peer.wait_connected(consumer.peer_id)
    wait_for(
        lambda: peer.listed_with_free_memory(consumer),
        "the consumer never listed the hostile provider with free memory",
        30,
    )
    job_id = consumer.cli(
        "job", "submit", "--url", f"{www}/honest.py", "--framework", "scikit-learn",
        "--expected-minutes", "1", "--peer", peer.peer_id,
    )["job_id"]  # fmt: skip
    shown = wait_for(
        lambda: (j := consumer.cli("job", "show", job_id)).get("results_error") and j,
        "the consumer never gave up on the results",
        60,
    )
    assert "sha256" in shown["results_error"] or "checksum" in shown["results_error"]
    assert f"tried {RESULT_TRIES} times" in shown["results_error"]
    assert provider.fetches == RESULT_TRIES
    time.sleep(3)
    assert provider.fetches == RESULT_TRIES  # given up: no more downloads
    text = run_cli("job", "show", job_id, home=consumer.home).stdout
    assert "results   not fetched:" in text
    again = run_cli("job", "results", job_id, "-o", str(tmp_path / "r"), home=consumer.home)
    assert again.returncode != 0 and provider.fetches == RESULT_TRIES + 1
    message = again.stderr.strip()
    assert message.startswith(f"nunet-tui: error: the results of {job_id} could not be fetched")
    assert "\n" not in message
