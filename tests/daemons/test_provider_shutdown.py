"""A provider that stops takes its jobs with it: nothing a consumer started on this machine
outlives the daemon (real daemons, the process executor, a service job that never ends).

Killed with SIGKILL (or by the OOM killer) the daemon can do nothing: before the group
leader (engine/jobs/executors/orphan_guard.py) the job and its children ran on unsupervised
until the provider came back (``kill_orphan``), or until their CPU limit if it never did."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, _submit, scripts
from tests.docker_fixture import docker_host, sklearn_image
from tests.tunnel_helpers import (
    Forwarding,
    free_port,
    http_get,
    pair,
    service_url,
    submit_service,
)

__all__ = ["daemons", "docker_host", "scripts", "service_url", "sklearn_image"]

# The job starts a child of its own (as DataLoader workers or a pip run would), so both the
# process-group leader and a grandchild of the daemon must go.
FAMILY = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"child {child.pid}", flush=True)
for i in range(600):
    print(f"tick {i}", flush=True)
    time.sleep(0.1)
"""
PROCESS_JOBS = '[jobs]\nexecutors = ["process"]\ncheckpoint_interval_s = 0\n'


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("how", ["sigterm", "sigint"])
def test_a_stopped_provider_leaves_no_job_process_behind(
    daemons: Callable[..., Daemon], service_url: str, tmp_path: Path, how: str
) -> None:
    provider, consumer = pair(daemons, PROCESS_JOBS)
    port = free_port()
    job_id = submit_service(consumer, service_url, tmp_path, port)
    pid_file = next((provider.home.state_dir / "jobs").rglob("process.pid"))
    assert job_id in str(pid_file)
    pgid = int(pid_file.read_text())  # the job's own process group (start_new_session)
    assert _alive(pgid)
    forward = Forwarding(consumer, job_id, str(port))  # serving (in its own sandbox)
    try:
        assert http_get(forward.port)[0] == 200
    finally:
        forward.stop()
    assert provider.proc is not None
    provider.proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
    assert provider.proc.wait(30) is not None
    wait_for(lambda: not _alive(pgid), f"job group {pgid} outlived its provider", timeout=10)
    home = Path(str(provider.home.home))
    wait_for(lambda: not _in_workspace(home), "the job's processes outlived the provider", 10)


def _in_workspace(home: Path) -> list[psutil.Process]:
    """The processes whose working directory is under ``home`` (a job's workspace)."""
    found = []
    for proc in psutil.process_iter(["cwd"]):
        cwd = proc.info.get("cwd")
        if cwd and Path(cwd).is_relative_to(home):
            found.append(proc)
    return found


def test_a_killed_provider_takes_the_job_and_its_children_with_it(
    daemons: Callable[..., Daemon], scripts: str, tmp_path: Path
) -> None:
    (tmp_path / "www" / "family.py").write_text(FAMILY)  # the scripts server's folder
    provider, consumer = _pair(daemons)
    job_id = _submit(consumer, f"{scripts}/family.py")["job_id"]
    home = Path(str(provider.home.home))
    wait_for(lambda: len(_in_workspace(home)) >= 2, "the job and its child never started", 60)
    provider.stop(kill=True)
    wait_for(lambda: not _in_workspace(home), "the job's processes outlived the provider", 15)
    # Nothing is left undecided: the provider comes back, finds the run it no longer has
    # (no checkpoint to resume from) and ends it on both sides, and nothing runs again.
    provider.start()
    wait_for(lambda: _state(consumer, job_id) == "interrupted", "the job was never decided", 60)
    assert _state(provider, job_id) == "interrupted"
    assert not _in_workspace(home)


def test_a_killed_provider_takes_its_containers_with_it(
    daemons: Callable[..., Daemon], scripts: str, docker_host: str, sklearn_image: str
) -> None:
    import docker

    docker_jobs = '\n[jobs]\nexecutors = ["docker"]\ncheckpoint_interval_s = 0\n'
    provider, consumer = _pair(daemons, jobs_toml=docker_jobs, env={"DOCKER_HOST": docker_host})
    job_id = _submit(consumer, f"{scripts}/slow.py")["job_id"]
    client = docker.DockerClient(base_url=docker_host, version="auto", timeout=30)

    def containers() -> list[object]:
        return client.containers.list(all=True, filters={"label": f"nunet.job={job_id}"})

    wait_for(lambda: _state(consumer, job_id) == "running", "the job never ran", 90)
    assert containers()
    provider.stop(kill=True)
    # The provider's reaper (orphan_guard.py containers) woke at its death and removed them; before,
    # they ran on until the provider's next start, with no one enforcing their time limit.
    wait_for(lambda: not containers(), "the job's container outlived its provider", 30)
    assert "orphan_guard: removed 1 container(s)" in provider.stderr_path.read_text()
