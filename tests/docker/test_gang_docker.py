"""A distributed step placed as a gang across two providers (issue 25 §2), end to end: three
real daemons (a consumer, two providers running Docker jobs), the real dockerd and the torch
image. `job submit` of examples/jobs/ddp places one job a rank, each held until the
consumer's start; each provider runs its replica with RANK/WORLD_SIZE/MASTER_* and joins the
gang's overlay itself. The trained weights equal a one-process training's; a replica killed
midway fails the gang and both jobs end."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine import api
from tests.conftest import REPO, TEST_ADDRESS, run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.docker_fixture import TORCH_IMAGE, docker_host, sklearn_image, torch_image
from tests.http_files import serve_files
from tests.overlay_helpers import docker

__all__ = ["daemons", "docker_host", "sklearn_image", "torch_image"]

EXAMPLE = REPO / "examples" / "jobs" / "ddp"
JOBS = (
    '[jobs]\nexecutors = ["docker"]\ncheckpoint_interval_s = 0\n'
    f'[ml_images]\npytorch_cpu = "{TORCH_IMAGE}"\n'
)
TERMINAL = api.TERMINAL_STATES


def _cluster(
    daemons: Callable[..., Daemon], docker_host: str, *, consumer_restarts: bool = False
) -> tuple[Daemon, list[Daemon]]:
    """A consumer and two Docker providers. ``consumer_restarts``: the first provider is the
    others' bootstrap peer (a consumer started again listens on a new port, and dials back
    in through it)."""
    env = {"DOCKER_HOST": docker_host}
    if consumer_restarts:
        first = daemons("provider0", 72, extra_toml=JOBS, env=env)
        bootstrap = first.addrs()[0]
        second = daemons("provider1", 73, bootstrap=bootstrap, extra_toml=JOBS, env=env)
        providers = [first, second]
        consumer = daemons("consumer", 71, bootstrap=bootstrap)
    else:
        consumer = daemons("consumer", 71)
        providers = [
            daemons(f"provider{i}", 72 + i, bootstrap=consumer.addrs()[0], extra_toml=JOBS, env=env)
            for i in range(2)
        ]
    for provider in providers:
        provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    ids = {provider.peer_id for provider in providers}
    wait_for(
        lambda: ids <= {p["peer_id"] for p in consumer.cli("peer", "list")["peers"]},
        "the consumer never saw both providers",
        60,
    )
    return consumer, providers


def _submit(consumer: Daemon, tmp_path: Path, base: str, **env: str) -> dict[str, Any]:
    text = (EXAMPLE / "job.toml").read_text()
    if env:
        text = text.replace(
            "[[subtasks]]",
            "[env]\n" + "".join(f'{k} = "{v}"\n' for k, v in env.items()) + "\n[[subtasks]]",
            1,
        )
    job_file = tmp_path / "job.toml"
    job_file.write_text(text)
    return consumer.cli("job", "submit", "-f", str(job_file), "--base-url", f"{base}/")


def _gang(consumer: Daemon, job_id: str) -> list[dict[str, Any]]:
    return list(consumer.cli("job", "show", job_id)["gang"])


def _ended(consumer: Daemon, job_id: str) -> bool:
    return all(slot["state"] in TERMINAL for slot in _gang(consumer, job_id))


def _logs(daemon: Daemon, job_id: str) -> str:
    return run_cli("job", "logs", job_id, home=daemon.home).stdout


@pytest.mark.timeout(900)
def test_a_ddp_gang_on_two_providers_trains_as_one_process_would(
    daemons: Callable[..., Daemon], docker_host: str, torch_image: str, tmp_path: Path
) -> None:
    consumer, providers = _cluster(daemons, docker_host)
    with serve_files(tmp_path / "www", {"train.py": (EXAMPLE / "train.py").read_text()}) as base:
        job = _submit(consumer, tmp_path, base)
        job_id = job["job_id"]
        gang = _gang(consumer, job_id)
        assert [slot["rank"] for slot in gang] == [0, 1]
        assert {slot["provider"] for slot in gang} == {p.peer_id for p in providers}
        wait_for(lambda: _ended(consumer, job_id), "the gang never ended", 600)
    gang = _gang(consumer, job_id)
    assert [slot["state"] for slot in gang] == ["completed", "completed"], gang
    weights = []
    for slot in gang:
        # The consumer's record of each rank's job: its steps, one replica each (its rank's).
        steps = consumer.cli("job", "show", slot["job_id"])["steps"]
        assert [(s["name"], [r["state"] for r in s["replicas"]]) for s in steps] == [
            ("prepare", ["done"]),
            ("train", ["done"]),
            ("evaluate", ["done"]),
        ], steps
        logs = _logs(consumer, slot["job_id"])
        assert f"rank {slot['rank']} of 2 joined" in logs, logs[-3000:]
        assert "evaluated: mse" in logs
        line = next(line for line in logs.splitlines() if "] weights {" in line)
        weights.append(json.loads(line.split("] weights ", 1)[1]))
    assert weights[0] == weights[1]  # DDP keeps the ranks' weights equal

    # The same training in one process (no RANK: the whole batch), in the same image.
    work = tmp_path / "alone"
    work.mkdir(mode=0o777)
    (work / "train.py").write_text((EXAMPLE / "train.py").read_text())
    script = (
        "import subprocess, sys\n"
        "subprocess.run([sys.executable, 'train.py', 'prepare'], check=True)\n"
        "subprocess.run([sys.executable, 'train.py'], check=True)\n"
    )
    out = docker(
        docker_host, "run", "--rm", "--network", "none", "-e", "HOME=/tmp", "-w", "/w",
        "-v", f"{work}:/w", torch_image, "python3", "-c", script,
    )  # fmt: skip
    alone = json.loads(out.strip().splitlines()[-1].split("weights ", 1)[1])
    assert alone.keys() == weights[0].keys()
    for name, values in alone.items():
        assert values == pytest.approx(weights[0][name], rel=1e-5, abs=1e-6), name
    by_id = {provider.peer_id: provider for provider in providers}
    for slot in gang:  # each provider's own record of its slot
        shown = by_id[slot["provider"]].cli("job", "show", slot["job_id"])
        assert shown["role"] == "provider" and shown["state"] == "completed"


@pytest.mark.timeout(900)
def test_a_replica_killed_midway_fails_the_gang_and_both_jobs_end(
    daemons: Callable[..., Daemon], docker_host: str, torch_image: str, tmp_path: Path
) -> None:
    consumer, providers = _cluster(daemons, docker_host)
    with serve_files(tmp_path / "www", {"train.py": (EXAMPLE / "train.py").read_text()}) as base:
        job = _submit(consumer, tmp_path, base, STEPS="600", STEP_PAUSE_S="0.5")
        gang = _gang(consumer, job["job_id"])
        victim = gang[1]
        wait_for(
            lambda: "] step 3" in _logs(consumer, victim["job_id"]),
            "rank 1 never trained",
            300,
        )
        # rank 1's training container (job id.step.rank: "train" is step 2), killed.
        name = docker(
            docker_host, "ps", "-q", "--filter", f"label=nunet.job={victim['job_id']}.2.1"
        ).split()
        assert name, "no container for rank 1"
        subprocess.run(
            ["docker", "kill", name[0]],
            env={"DOCKER_HOST": docker_host, "PATH": "/usr/bin:/bin:/usr/local/bin"},
            check=True,
            capture_output=True,
        )
        wait_for(lambda: _ended(consumer, job["job_id"]), "the gang never ended", 300)
    gang = _gang(consumer, job["job_id"])
    # Killed (SIGKILL: exit 137, which the executor reads as its memory limit's kill).
    assert gang[1]["state"] in ("failed", "oom") and "train" in gang[1]["reason"], gang
    assert gang[0]["state"] == "cancelled", gang  # stopped by the consumer: the gang failed
    by_id = {provider.peer_id: provider for provider in providers}
    for slot in gang:
        wait_for(
            lambda p=by_id[slot["provider"]], s=slot: (
                p.cli("job", "show", s["job_id"])["state"] in TERMINAL
            ),  # type: ignore[misc]
            "a provider's job never ended",
            120,
        )


@pytest.mark.timeout(900)
def test_a_consumer_restart_mid_gang_starts_nothing_twice(
    daemons: Callable[..., Daemon], docker_host: str, torch_image: str, tmp_path: Path
) -> None:
    """The consumer killed right after `job submit` and started again sends each rank's
    start again (resume_gangs): a slot that had it answers it as a repeat, and the gang
    trains once and completes."""
    consumer, providers = _cluster(daemons, docker_host, consumer_restarts=True)
    with serve_files(tmp_path / "www", {"train.py": (EXAMPLE / "train.py").read_text()}) as base:
        job = _submit(consumer, tmp_path, base, STEPS="30", STEP_PAUSE_S="0.2")
        members = [slot["provider"] for slot in _gang(consumer, job["job_id"])]
        consumer.stop(kill=True)
        consumer.start()
        wait_for(lambda: _ended(consumer, job["job_id"]), "the gang never ended", 300)
    gang = _gang(consumer, job["job_id"])
    assert [slot["state"] for slot in gang] == ["completed", "completed"], gang
    by_id = {provider.peer_id: provider for provider in providers}
    for slot in gang:
        shown = by_id[slot["provider"]].cli("job", "show", slot["job_id"])
        assert shown["gang_members"] == members
        logs = _logs(by_id[slot["provider"]], slot["job_id"])
        assert logs.count(f"rank {slot['rank']} of 2 joined") == 1, logs[-2000:]
