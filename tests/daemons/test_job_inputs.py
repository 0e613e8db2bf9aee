"""A job's inputs by CID (issue 26 §1): the consumer adds a dataset, the job names it, the
provider fetches it from the consumer by bitswap before the job starts (said in the log, not
machine time) and mounts it read-only in the workspace; a second job on the same data finds
it there already. Real daemons, the process executor (sandboxed by bubblewrap)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state
from tests.data.fixtures import make
from tests.docker_fixture import docker_host, sklearn_image
from tests.http_files import serve_files

READS = """
import json, pathlib
data = pathlib.Path("data")
rows = (data / "train" / "x.csv").read_text().splitlines()
print("rows", len(rows), "readme", (data / "README").read_text().strip(), flush=True)
try:
    (data / "mine.txt").write_text("x")
    print("inputs are writable", flush=True)
except OSError as exc:
    print("inputs are read-only:", type(exc).__name__, flush=True)
pathlib.Path("outputs").mkdir(exist_ok=True)
pathlib.Path("outputs/summary.json").write_text(json.dumps({"rows": len(rows)}))
"""


def test_a_job_reads_a_dataset_by_cid_fetched_from_its_consumer(
    daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    _reads_by_cid(_pair(daemons), tmp_path)


def test_a_container_job_gets_its_inputs_mounted_read_only(
    daemons: Callable[..., Daemon], tmp_path: Path, docker_host: str, sklearn_image: str
) -> None:
    docker_jobs = '\n[jobs]\nexecutors = ["docker"]\ncheckpoint_interval_s = 0\n'
    pair = _pair(daemons, jobs_toml=docker_jobs, env={"DOCKER_HOST": docker_host})
    _reads_by_cid(pair, tmp_path)


def _reads_by_cid(pair: tuple[Daemon, Daemon], tmp_path: Path) -> None:
    provider, consumer = pair
    dataset = make(tmp_path / "in", ("dataset",)) / "dataset"
    cid = consumer.cli("data", "add", str(dataset))["cid"]
    with serve_files(tmp_path / "www", {"reads.py": READS}) as base:
        for run in (1, 2):
            job = consumer.cli(
                "job", "submit", "--url", f"{base}/reads.py", "--framework", "scikit-learn",
                "--expected-minutes", "1", "--input", f"{cid}:data/",
            )  # fmt: skip
            job_id = str(job["job_id"])
            wait_for(
                lambda job_id=job_id: _state(consumer, job_id) in ("completed", "failed"),  # type: ignore[misc]
                "no end",
                90,
            )
            logs = run_cli("job", "logs", job_id, home=consumer.home).stdout
            assert _state(consumer, job_id) == "completed", logs
            assert "rows 2 readme data" in logs
            assert "inputs are read-only" in logs
            took = "fetched in" if run == 1 else "here already"
            assert f"input {cid}: {300_000 + 8 + 5 + 2:,} bytes at data ({took}" in logs
    # The provider keeps what it fetched, unpinned: a cache by CID, removable.
    kept = {r["cid"]: r for r in provider.cli("data", "ls")["roots"]}
    assert kept[cid]["pinned"] is False
    out = consumer.cli("job", "results", job_id, "-o", str(tmp_path / "out"))
    summary = json.loads((Path(out["directory"]) / "outputs" / "summary.json").read_text())
    assert summary == {"rows": 2}


def test_a_job_whose_input_nobody_has_fails_before_it_starts(
    daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    _, consumer = _pair(daemons)
    # The raw block of b"nobody has this".
    missing = "bafkreiemqpndzewx4bioklzfvhtiegsfny5fxuc3nkjk2vmcpjxiammsti"
    with serve_files(tmp_path / "www", {"reads.py": READS}) as base:
        job = consumer.cli(
            "job", "submit", "--url", f"{base}/reads.py", "--framework", "scikit-learn",
            "--expected-minutes", "1", "--input", missing,
        )  # fmt: skip
    job_id = job["job_id"]
    wait_for(lambda: _state(consumer, job_id) == "failed", "the job did not fail", 90)
    shown = consumer.cli("job", "show", job_id)
    assert shown["reason"].startswith("inputs: ") and missing in shown["reason"]
    assert not shown.get("started_at")


__all__ = ["daemons", "docker_host", "sklearn_image"]  # fixtures, imported for pytest


def test_results_published_by_cid_are_fetched_by_another_node(
    daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    provider, consumer = _pair(daemons)
    with serve_files(tmp_path / "www", {"reads.py": READS}) as base:
        dataset = make(tmp_path / "in", ("dataset",)) / "dataset"
        cid = consumer.cli("data", "add", str(dataset))["cid"]
        job = consumer.cli(
            "job", "submit", "--url", f"{base}/reads.py", "--framework", "scikit-learn",
            "--expected-minutes", "1", "--input", cid, "--publish-results",
        )  # fmt: skip
    job_id = str(job["job_id"])
    wait_for(lambda: _state(consumer, job_id) == "completed", "the job never completed", 90)
    shown = wait_for(
        lambda: (j := consumer.cli("job", "show", job_id))["results_cid"] and j,
        "no results CID reached the consumer",
        30,
    )
    published = shown["results_cid"]
    assert provider.cli("job", "show", job_id)["results_cid"] == published
    # A third node, given only the CID, fetches the archive from the provider (its record
    # in the DHT names it) and gets the bytes the consumer's checksum says.
    third = daemons("third", 33, bootstrap=consumer.addrs()[0])
    out = tmp_path / "fetched"
    out.mkdir()
    got = wait_for(
        lambda: (
            (
                r := run_cli("data", "get", published, "-o", str(out), "--json", home=third.home)
            ).returncode
            == 0
            and json.loads(r.stdout)
        ),
        "the third node never fetched the results",
        60,
    )
    archive = Path(got["path"]).read_bytes()
    assert hashlib.sha256(archive).hexdigest() == shown["results_sha256"]
