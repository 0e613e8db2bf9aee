"""Which finished jobs' workspaces the provider's sweep removes (workspace_retention.py), with
a real store and real folders: the retention's rules at chosen times, never a clock."""

from __future__ import annotations

from pathlib import Path

from engine import api
from engine.api.notebooks import PORT_ENV, TOKEN_ENV
from engine.domain.spec import JobSpec
from engine.jobs import workspace_retention as wr
from engine.store import Store
from tests.engine.test_disk_quota import nest

NOW = 2_000_000_000.0
HOUR = 3600.0
RETENTION = wr.Retention(keep_s=1 * HOUR, notebook_keep_s=24 * HOUR)
BATCH = JobSpec(framework="scikit-learn", script_url="http://example.com/a.py")
NOTEBOOK = JobSpec(
    framework="scikit-learn",
    script_url="http://example.com/notebook.py",
    kind="service",
    ports=(20_001,),
    env={TOKEN_ENV: "t" * 48, PORT_ENV: "20001"},
    outputs=("notebooks",),
)


def _job(
    store: Store, number: int, state: str, ended_ago: float | None, **extra: object
) -> api.JobInfo:
    job = api.JobInfo(
        job_id=f"{number:012x}",
        role=extra.pop("role", "provider"),  # type: ignore[arg-type]
        state=state,  # type: ignore[arg-type]
        provider="p",
        consumer="c",
        spec=extra.pop("spec", BATCH),  # type: ignore[arg-type]
        created_at=NOW - 3 * 24 * HOUR,
        updated_at=NOW - (ended_ago or 0.0),
        finished_at=None if ended_ago is None else NOW - ended_ago,
    )
    store.save_job(job)
    return job


def _files(root: Path, job: api.JobInfo, outside: Path) -> Path:
    """A provider's job folder: its log, results archive, workspace (a link out of it among
    its files) and checkpoints."""
    folder = root / job.job_id
    (folder / "workspace" / "many").mkdir(parents=True)
    for number in range(50):
        (folder / "workspace" / "many" / f"f{number}").touch()
    (folder / "workspace" / "out").symlink_to(outside)
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "checkpoint-00001.tar").write_bytes(b"x")
    (folder / "venv" / "bin").mkdir(parents=True)  # the process executor's, for its deps
    (folder / "log.jsonl").write_text("{}\n")
    (folder / f"{job.job_id}-results.tar.gz").write_bytes(b"results")
    return folder


def _sweep(root: Path, store: Store, active: frozenset[str] = frozenset()) -> list[str]:
    found = wr.due(wr.folders_with_workspaces(root), store.get_job, RETENTION, active, NOW)
    for entry in found:
        wr.remove(root, entry.job_id)
    return sorted(entry.job_id for entry in found)


def test_only_finished_jobs_past_their_retention_lose_their_workspaces(tmp_path: Path) -> None:
    store = Store(tmp_path / "n.db")
    root = tmp_path / "jobs"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the job's")
    old = _job(store, 1, "completed", 2 * HOUR)
    old_failed = _job(store, 2, "failed", 2 * HOUR)
    recent = _job(store, 3, "completed", 0.5 * HOUR)
    running = _job(store, 4, "running", None)  # started long ago, still running
    stale_record = _job(store, 5, "completed", 2 * HOUR)  # ended, but run here now
    notebook = _job(store, 6, "completed", 2 * HOUR, spec=NOTEBOOK)
    old_notebook = _job(store, 7, "completed", 2 * 24 * HOUR, spec=NOTEBOOK)
    consumer_side = _job(store, 8, "completed", 2 * HOUR, role="consumer")
    jobs = [old, old_failed, recent, running, stale_record, notebook, old_notebook, consumer_side]
    folders = {job.job_id: _files(root, job, outside) for job in jobs}
    (root / "not-a-job").mkdir()
    (root / "not-a-job" / "workspace").mkdir()  # no record: not ours to judge

    removed = _sweep(root, store, active=frozenset({stale_record.job_id}))

    assert removed == sorted([old.job_id, old_failed.job_id, old_notebook.job_id])
    for job in jobs:
        folder = folders[job.job_id]
        gone = job.job_id in removed
        assert (folder / "workspace").exists() is not gone, job.job_id
        assert (folder / "checkpoints").exists() is not gone, job.job_id
        assert (folder / "venv").exists() is not gone, job.job_id
        # What stays fetchable and readable: the results archive and the log.
        assert (folder / f"{job.job_id}-results.tar.gz").read_bytes() == b"results"
        assert (folder / "log.jsonl").exists()
    assert (outside / "keep.txt").read_text() == "not the job's"  # the link: not followed
    assert (root / "not-a-job" / "workspace").exists()
    # A second sweep finds nothing more to do.
    assert _sweep(root, store, active=frozenset({stale_record.job_id})) == []


def test_a_workspace_nested_past_the_recursion_limit_is_removed(tmp_path: Path) -> None:
    """shutil.rmtree recurses: 1,200 nested folders raised RecursionError and stayed."""
    store = Store(tmp_path / "n.db")
    root = tmp_path / "jobs"
    (tmp_path / "outside").mkdir()
    job = _job(store, 1, "completed", 2 * HOUR)
    folder = _files(root, job, tmp_path / "outside")
    nest(folder / "workspace", 1_200)
    assert _sweep(root, store) == [job.job_id]
    assert not (folder / "workspace").exists()
    assert (folder / "log.jsonl").exists()


def test_a_retention_of_zero_keeps_workspaces_for_ever(tmp_path: Path) -> None:
    store = Store(tmp_path / "n.db")
    root = tmp_path / "jobs"
    (tmp_path / "outside").mkdir()
    job = _job(store, 1, "completed", 1_000 * 24 * HOUR)
    _files(root, job, tmp_path / "outside")
    keep = wr.Retention(keep_s=0, notebook_keep_s=0)
    assert wr.due(wr.folders_with_workspaces(root), store.get_job, keep, (), NOW) == []
    assert keep.interval_s() == wr.SWEEP_S


def test_the_sweep_interval_follows_the_shortest_retention() -> None:
    assert wr.Retention(keep_s=24 * HOUR).interval_s() == wr.SWEEP_S
    assert wr.Retention(keep_s=8.0, notebook_keep_s=0).interval_s() == 2.0
    assert wr.Retention(keep_s=1.0).interval_s() == wr.MIN_SWEEP_S


def test_the_note_is_one_line_that_says_why() -> None:
    note = wr.note([wr.Due("0" * 12, "ended over 1 h ago (jobs.workspace_keep_hours)")] * 3)
    assert note == (
        "removed the workspaces of 3 finished jobs (ended over 1 h ago (jobs.workspace_keep_hours))"
    )
