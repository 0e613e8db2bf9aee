"""Jobs whose code comes from a git repository, served over real smart HTTP on 127.0.0.1.

One repository, built here: an entry point in a subfolder that imports its neighbour, on a
branch, a tag, a newer main and an older commit that no branch points at, each saying which it
is. Then what goes wrong, each as a clear error: a ref that is not there, an entry point that
is not there or leads out of the repository, no repository at the URL, a server that stalls,
a repository too big.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from engine.domain.spec import GitSource, JobSpec, validate_spec
from engine.errors import EngineError
from engine.jobs import sources
from engine.jobs.executors.base import BaseExecutor, ExitStatus, LogLine, running
from engine.jobs.executors.process import ProcessExecutor
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import TERMINAL, _pair, _state
from tests.docker_fixture import docker_host, sklearn_image
from tests.engine.test_jobs_process import LIMITS, collect, new_run, texts
from tests.git_server import git, serve_repos, silent_server

__all__ = ["daemons", "docker_host", "sklearn_image"]

TRAIN = """
import pathlib
from helper import VERSION  # next to this script: its folder is on sys.path
print(f"version {VERSION}", flush=True)
pathlib.Path("outputs").mkdir(exist_ok=True)
pathlib.Path("outputs/version.txt").write_text(VERSION)
"""


@dataclass(frozen=True)
class Repo:
    url: str  # the repository's http URL
    base: str  # the server's, for other paths on it
    old_commit: str  # on main's history, no longer any branch's tip


def _commit(work: Path, version: str) -> str:
    (work / "pkg" / "helper.py").write_text(f"VERSION = {version!r}\n")
    git("add", "-A", cwd=work)
    git("commit", "--quiet", "-m", version, cwd=work)
    return git("rev-parse", "HEAD", cwd=work)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Repo]:
    root = tmp_path_factory.mktemp("git")
    work = root / "work"
    (work / "pkg").mkdir(parents=True)
    git("init", "--quiet", "--initial-branch", "main", cwd=work)
    (work / "pkg" / "train.py").write_text(TRAIN)
    (work / "pkg" / "escape.py").symlink_to("../../../outside.py")
    _commit(work, "v1")
    git("tag", "v1", cwd=work)
    git("branch", "feature", cwd=work)
    old = _commit(work, "main-2")
    _commit(work, "main-3")
    git("checkout", "--quiet", "feature", cwd=work)
    _commit(work, "feature")
    served = root / "served"
    served.mkdir()
    git("clone", "--quiet", "--bare", str(work), str(served / "project.git"), cwd=root)
    big = root / "big"
    big.mkdir()
    git("init", "--quiet", "--initial-branch", "main", cwd=big)
    (big / "train.py").write_text("print('big')\n")
    (big / "weights.bin").write_bytes(bytes(range(256)) * 8192)  # 2 MB
    git("add", "-A", cwd=big)
    git("commit", "--quiet", "-m", "big", cwd=big)
    git("clone", "--quiet", "--bare", str(big), str(served / "big.git"), cwd=root)
    with serve_repos(served) as base:
        yield Repo(url=f"{base}/project.git", base=base, old_commit=old)


def git_spec(url: str, ref: str, entry: str = "pkg/train.py") -> JobSpec:
    return JobSpec(framework="scikit-learn", git=GitSource(url=url, entry=entry, ref=ref))


def run_git_job(
    executor: BaseExecutor, tmp_path: Path, job: JobSpec, job_id: str = "git-1"
) -> tuple[ExitStatus, list[LogLine]]:
    run = new_run(tmp_path, job, LIMITS, job_id)

    async def main() -> tuple[ExitStatus, list[LogLine]]:
        async with running(executor):
            await executor.prepare(run)
            await executor.start(run)
            return await collect(executor, run)

    status, lines = trio.run(main)
    if status.outcome == "completed":
        assert (run.workspace / "outputs" / "version.txt").exists()
    return status, lines


def prepare_error(tmp_path: Path, job: JobSpec) -> str:
    """The message ``prepare`` fails with."""
    executor = ProcessExecutor()

    async def main() -> str:
        async with running(executor):
            try:
                await executor.prepare(new_run(tmp_path, job, LIMITS, "bad"))
            except EngineError as exc:
                return exc.message
        raise AssertionError("prepare did not fail")

    return trio.run(main)


@pytest.mark.parametrize(
    ("ref", "printed"),
    [("main", "main-3"), ("feature", "feature"), ("v1", "v1"), ("old", "main-2")],
)
def test_a_branch_a_tag_and_a_commit_each_run_their_own_code(
    repo: Repo, tmp_path: Path, ref: str, printed: str
) -> None:
    ref = repo.old_commit if ref == "old" else ref
    job = git_spec(repo.url, ref)
    assert validate_spec(job).ok
    status, lines = run_git_job(ProcessExecutor(), tmp_path, job)
    assert status.outcome == "completed", lines
    assert texts(lines) == [f"version {printed}"]


@pytest.mark.parametrize(
    ("ref", "entry", "message"),
    [
        ("nope", "pkg/train.py", "the repository has no branch or tag 'nope'"),
        ("abc1234", "pkg/train.py", "full 40-character id"),
        ("0" * 40, "pkg/train.py", "no such commit in the repository"),
        ("main", "pkg/missing.py", "entry point pkg/missing.py is not a file in"),
        ("main", "pkg/escape.py", "entry point pkg/escape.py leads out of the repository"),
    ],
)
def test_what_cannot_be_run_says_why(
    repo: Repo, tmp_path: Path, ref: str, entry: str, message: str
) -> None:
    assert message in prepare_error(tmp_path, git_spec(repo.url, ref, entry))


def test_no_repository_and_an_entry_outside_are_clear(repo: Repo, tmp_path: Path) -> None:
    missing = prepare_error(tmp_path, git_spec(f"{repo.base}/nothing.git", "main"))
    assert f"no git repository at {repo.base}/nothing.git" in missing
    report = validate_spec(git_spec(repo.url, "main", "../outside.py"))
    assert "leaves the workspace" in report.for_field("git.entry")[0]


def test_a_stalled_server_is_given_up_in_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "CLONE_TIMEOUT_S", 2.0)
    with silent_server() as url:
        began = time.monotonic()
        message = prepare_error(tmp_path, git_spec(f"{url}/project.git", "main"))
    assert "took over 2 s: stopped" in message
    assert time.monotonic() - began < 10


def test_a_repository_too_big_is_refused(
    repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "MAX_REPO_BYTES", 1 << 20)
    message = prepare_error(tmp_path, git_spec(f"{repo.base}/big.git", "main", "train.py"))
    assert "is too big: over 1 MB on disk" in message


def test_a_git_job_in_a_container(
    repo: Repo, tmp_path: Path, docker_host: str, sklearn_image: str
) -> None:
    from engine.jobs.executors.docker import DockerExecutor
    from engine.resources.container_host import ContainerFacts

    executor = DockerExecutor(
        container_host=ContainerFacts(), node_id="git-test", docker_host=docker_host
    )
    status, lines = run_git_job(executor, tmp_path, git_spec(repo.url, "v1"))
    assert status.outcome == "completed", lines
    assert texts(lines) == ["version v1"]


def test_git_jobs_through_the_network(
    repo: Repo, daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    _, consumer = _pair(daemons, slots=2)  # the second job need not wait for a heartbeat

    def submit(ref: str) -> str:
        toml = tmp_path / f"{ref}.toml"
        toml.write_text(
            'framework = "scikit-learn"\nexpected_minutes = 1\n'
            f'[git]\nurl = "{repo.url}"\nentry = "pkg/train.py"\nref = "{ref}"\n'
        )
        job_id = str(consumer.cli("job", "submit", "-f", str(toml))["job_id"])
        wait_for(lambda: _state(consumer, job_id) in TERMINAL, f"{ref} never ended", 60)
        return job_id

    good = submit("feature")
    assert _state(consumer, good) == "completed"
    assert "version feature" in run_cli("job", "logs", good, home=consumer.home).stdout
    bad = submit("nope")
    shown = consumer.cli("job", "show", bad)
    assert shown["state"] == "failed"
    assert "the repository has no branch or tag 'nope'" in shown["reason"]
