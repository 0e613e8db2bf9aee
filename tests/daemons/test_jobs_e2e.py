"""Jobs end to end with real processes: consumer and provider daemons on 127.0.0.1, the job
protocol over libp2p, the process executor, scripts served by a real HTTP server."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, TEST_ADDRESS, run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.docker_fixture import docker_host, sklearn_image
from tests.http_files import serve_files

__all__ = ["daemons", "docker_host", "sklearn_image"]

TERMINAL = ("completed", "failed", "oom", "timeout", "cancelled", "interrupted", "refused")
PROCESS_JOBS = """
[jobs]
executors = ["process"]
checkpoint_interval_s = 1
"""

SLOW = """
import time
for i in range(600):
    print(f"tick {i}", flush=True)
    time.sleep(0.1)
"""

FAILING = """
print("about to fail", flush=True)
raise RuntimeError("The size of tensor a (5) must match the size of tensor b (3)")
"""

# Keeps an epoch counter in /workspace, as NuNet's checkpointed examples do.
CHECKPOINTED = """
import json, pathlib, time
state = pathlib.Path("state.json")
epoch = json.loads(state.read_text())["epoch"] if state.exists() else 0
print(f"starting at epoch {epoch}", flush=True)
for e in range(epoch, 16):
    time.sleep(0.5)
    state.write_text(json.dumps({"epoch": e + 1}))
    print(f"epoch {e + 1}", flush=True)
pathlib.Path("outputs").mkdir(exist_ok=True)
pathlib.Path("outputs/done.json").write_text(json.dumps({"epochs": 16}))
"""


@pytest.fixture
def scripts(tmp_path: Path) -> Iterator[str]:
    iris = (REPO / "examples" / "jobs" / "iris" / "train.py").read_text()
    files = {"iris.py": iris, "slow.py": SLOW, "failing.py": FAILING}
    with serve_files(tmp_path / "www", {**files, "checkpointed.py": CHECKPOINTED}) as base:
        yield base


def _pair(
    daemons: Callable[..., Daemon],
    slots: int = 1,
    jobs_toml: str = PROCESS_JOBS,
    env: dict[str, str] | None = None,
    consumer_env: dict[str, str] | None = None,
) -> tuple[Daemon, Daemon]:
    # The consumer is the bootstrap peer: a provider that restarts (on a new port) dials
    # back in, as providers on a real network rejoin through their bootstrap peers.
    consumer = daemons("consumer", 31, env=consumer_env)
    provider = daemons(
        "provider",
        30,
        bootstrap=consumer.addrs()[0],
        extra_toml=jobs_toml + f"slots = {slots}\n",
        env=env,
    )
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    provider_id = provider.peer_id
    wait_for(
        lambda: any(p["peer_id"] == provider_id for p in consumer.cli("peer", "list")["peers"]),
        "the consumer never saw the provider",
    )
    return provider, consumer


def _submit(
    consumer: Daemon, url: str, framework: str = "scikit-learn", **extra: str
) -> dict[str, Any]:
    args = ["job", "submit", "--url", url, "--framework", framework, "--expected-minutes", "1"]
    for key, value in extra.items():
        args += [f"--{key}", value]
    return consumer.cli(*args)


def _state(daemon: Daemon, job_id: str) -> str:
    return str(daemon.cli("job", "show", job_id)["state"])


def test_iris_runs_logs_arrive_and_results_are_verified(
    daemons: Callable[..., Daemon], scripts: str, tmp_path: Path
) -> None:
    provider, consumer = _pair(daemons)
    job = _submit(consumer, f"{scripts}/iris.py", name="iris")
    assert job["state"] == "accepted" and job["provider"] == provider.peer_id
    job_id = job["job_id"]
    wait_for(lambda: _state(consumer, job_id) == "completed", "iris never completed", 60)
    shown = consumer.cli("job", "show", job_id)
    assert shown["exit_code"] == 0 and shown["metering"]["wall_s"] > 0
    logs = run_cli("job", "logs", job_id, home=consumer.home)
    assert "accuracy" in logs.stdout and "confusion matrix" in logs.stdout
    # The provider keeps the same log and sees the job from its side.
    assert provider.cli("job", "show", job_id)["role"] == "provider"
    first = consumer.cli("job", "results", job_id, "-o", str(tmp_path / "out"))
    second = consumer.cli("job", "results", job_id, "-o", str(tmp_path / "out"))
    assert first["directory"] != second["directory"]  # runs never overwrite each other
    metrics = json.loads((Path(first["directory"]) / "outputs" / "metrics.json").read_text())
    assert metrics["accuracy"] > 0.8
    # Metering reaches the network status on both sides.
    assert provider.cli("network", "status")["jobs_run"] == 1
    bought = consumer.cli("network", "status")
    assert bought["jobs_bought"] == 1 and bought["metered_bought_units"] > 0


def test_failure_cancel_and_busy_are_distinct_outcomes(
    daemons: Callable[..., Daemon], scripts: str
) -> None:
    provider, consumer = _pair(daemons)
    failing = _submit(consumer, f"{scripts}/failing.py")["job_id"]
    wait_for(lambda: _state(consumer, failing) == "failed", "the failing job did not fail", 60)
    shown = consumer.cli("job", "show", failing)
    assert shown["exit_code"] == 1 and "The size of tensor a (5)" in shown["reason"]
    logs = run_cli("job", "logs", failing, home=consumer.home)
    assert "Traceback" in logs.stdout + logs.stderr

    slow = _submit(consumer, f"{scripts}/slow.py")["job_id"]
    wait_for(lambda: _state(consumer, slow) == "running", "the slow job never ran", 60)
    # One slot: with --no-queue a second job is refused with the reason, not queued
    # (tests/daemons/test_job_queue.py has the queue).
    busy = run_cli(
        "job",
        "submit",
        "--no-queue",
        "--url",
        f"{scripts}/slow.py",
        "--framework",
        "scikit-learn",
        home=consumer.home,
    )
    assert busy.returncode == 1 and "busy" in busy.stderr
    started = time.monotonic()
    cancelled = consumer.cli("job", "cancel", slow)
    assert cancelled["state"] == "cancelled"
    assert time.monotonic() - started < 10
    assert _state(provider, slow) == "cancelled"


def kill_after_epochs(
    provider: Daemon, consumer: Daemon, job_id: str, epochs: int, down_s: float = 0.0
) -> None:
    """Kill the provider once the consumer has seen ``epochs`` of a CHECKPOINTED job, and
    start it again ``down_s`` later."""

    def epochs_done() -> int:
        lines = run_cli("job", "logs", job_id, home=consumer.home).stdout.splitlines()
        return max((int(ln.split()[1]) for ln in lines if ln.startswith("epoch ")), default=0)

    wait_for(lambda: epochs_done() >= epochs, "the job never got going", 60)
    provider.stop(kill=True)
    time.sleep(down_s)
    provider.start()


def test_provider_killed_mid_run_resumes_from_checkpoint(
    daemons: Callable[..., Daemon], scripts: str
) -> None:
    provider, consumer = _pair(daemons)
    job_id = _submit(consumer, f"{scripts}/checkpointed.py")["job_id"]
    kill_after_epochs(provider, consumer, job_id, epochs=4)
    wait_for(lambda: _state(consumer, job_id) == "completed", "the job did not resume", 90)
    shown = consumer.cli("job", "show", job_id)
    assert shown["resumed_from"] and shown["resumed_from"] >= 1
    log_text = run_cli("job", "logs", job_id, home=consumer.home).stdout
    restarts = [ln for ln in log_text.splitlines() if ln.startswith("starting at epoch")]
    assert restarts[0] == "starting at epoch 0"
    assert len(restarts) == 2 and restarts[1] != "starting at epoch 0"
    assert f"resumed from checkpoint {shown['resumed_from']}" in log_text


def test_bad_submissions_get_clear_errors(daemons: Callable[..., Daemon], scripts: str) -> None:
    _, consumer = _pair(daemons)
    cases = [
        (["--url", "ftp://x/y.py", "--framework", "pytorch"], "http"),
        (["--url", f"{scripts}/iris.py", "--framework", "scikit-learn", "--device", "gpu"], "gpu"),
        (
            ["--url", f"{scripts}/iris.py", "--framework", "pytorch", "--dep", "not a req!"],
            "pip requirement",
        ),
    ]
    for args, needle in cases:
        result = run_cli("job", "submit", *args, home=consumer.home)
        assert result.returncode == 1, (args, result.stdout)
        assert needle in result.stderr.lower(), (args, result.stderr)
    missing = run_cli("job", "show", "nope", home=consumer.home)
    assert missing.returncode == 1 and "no job" in missing.stderr


def test_iris_in_a_docker_container_through_the_network(
    daemons: Callable[..., Daemon], scripts: str, docker_host: str, sklearn_image: str
) -> None:
    docker_jobs = '\n[jobs]\nexecutors = ["docker"]\ncheckpoint_interval_s = 0\n'
    _, consumer = _pair(daemons, jobs_toml=docker_jobs, env={"DOCKER_HOST": docker_host})
    # The provider fetches the script from the consumer's server, then runs it with no network.
    job = _submit(consumer, f"{scripts}/iris.py", name="iris in docker")
    assert job["executor"] == "docker"
    wait_for(lambda: _state(consumer, job["job_id"]) == "completed", "no completion", 120)
    logs = run_cli("job", "logs", job["job_id"], home=consumer.home).stdout
    assert "accuracy" in logs


def test_two_consumers_race_for_one_slot(daemons: Callable[..., Daemon], scripts: str) -> None:
    provider, first = _pair(daemons)
    second = daemons("consumer-2", 32, bootstrap=first.addrs()[0])
    provider_id = provider.peer_id
    wait_for(
        lambda: any(p["peer_id"] == provider_id for p in second.cli("peer", "list")["peers"]),
        "the second consumer never saw the provider",
    )
    results: dict[str, Any] = {}

    def submit(name: str, consumer: Daemon) -> None:
        results[name] = run_cli(
            "job",
            "submit",
            "--no-queue",  # the loser is refused, not queued behind the winner
            "--url",
            f"{scripts}/slow.py",
            "--framework",
            "scikit-learn",
            "--json",
            home=consumer.home,
        )

    threads = [
        threading.Thread(target=submit, args=(name, consumer))
        for name, consumer in (("first", first), ("second", second))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    accepted = [r for r in results.values() if r.returncode == 0]
    refused = [r for r in results.values() if r.returncode != 0]
    assert len(accepted) == 1 and len(refused) == 1, {k: r.stderr for k, r in results.items()}
    assert "busy" in refused[0].stderr
    running = [j for j in provider.cli("job", "list")["jobs"] if j["state"] != "refused"]
    assert len(running) == 1  # the provider started exactly one job


def test_only_the_consumer_can_follow_cancel_or_fetch(
    daemons: Callable[..., Daemon], scripts: str
) -> None:
    """A third peer that learnt a job id gets refusals, not the job's logs or results."""
    import trio

    from engine.identity import Identity
    from engine.jobs import protocol as p
    from engine.network.host import peer_id_of
    from tests.engine.test_network_service import service

    provider, consumer = _pair(daemons)
    job_id = _submit(consumer, f"{scripts}/iris.py")["job_id"]
    wait_for(lambda: _state(consumer, job_id) == "completed", "iris never completed", 60)
    provider_id, boot = provider.peer_id, provider.addrs()[0]
    answers: list[Any] = []

    async def intrude() -> None:
        intruder = service([boot])
        identity: Identity = intruder.identity
        async with trio.open_nursery() as nursery:
            await nursery.start(intruder.run)
            with trio.fail_after(15):  # connected to the provider through bootstrapping
                while provider_id not in intruder.connected_peers():
                    await trio.sleep(0.05)
            for message in (
                p.Follow(job_id=job_id),
                p.Cancel(job_id=job_id),
                p.FetchResults(job_id=job_id),
            ):
                with trio.fail_after(10):
                    stream = await intruder.host.new_stream(
                        peer_id_of(provider_id), [p.JOB_PROTOCOL]
                    )
                    await p.send(stream, identity, message)
                    answers.append(await p.receive(stream, provider_id))
            nursery.cancel_scope.cancel()

    trio.run(intrude)
    kinds = [type(answer[0]).__name__ if answer else None for answer in answers]
    assert kinds == ["Refusal", "Refusal", "Refusal"]
    assert all("no such job of yours" in answer[0].reason for answer in answers)
    assert _state(provider, job_id) == "completed"


def test_tensorflow_job_runs_for_real(
    daemons: Callable[..., Daemon], scripts: str, tmp_path: Path
) -> None:
    provider, consumer = _pair(daemons)
    source = REPO / "examples" / "jobs" / "tensorflow_regression" / "train.py"
    (tmp_path / "www" / "tf.py").write_text(source.read_text())  # the scripts server's folder
    job = _submit(consumer, f"{scripts}/tf.py", framework="tensorflow")
    wait_for(lambda: _state(consumer, job["job_id"]) in TERMINAL, "the TF job never ended", 180)
    shown = consumer.cli("job", "show", job["job_id"])
    assert shown["state"] == "completed", shown["reason"]
    out = consumer.cli("job", "results", job["job_id"], "-o", str(tmp_path / "out"))
    metrics = json.loads((Path(out["directory"]) / "outputs" / "metrics.json").read_text())
    assert abs(metrics["weight"] - 3) < 0.1 and abs(metrics["bias"] + 2) < 0.1
    assert provider.cli("job", "show", job["job_id"])["state"] == "completed"


def test_a_process_provider_offers_only_the_frameworks_its_python_has(
    daemons: Callable[..., Daemon], scripts: str
) -> None:
    """After `pip install .` the demo's iris job failed at its import ("No module named
    'sklearn'"): the advert offered every framework whatever the provider's Python had. A
    provider whose process jobs run with a Python without scikit-learn offers none of them
    now, and the consumer is told so before anything is quoted."""
    bare = shutil.which("python3", path="/usr/bin:/bin")
    assert bare is not None
    assert subprocess.run([bare, "-c", "import sklearn"], capture_output=True).returncode != 0
    toml = PROCESS_JOBS + f'process_python = "{bare}"\n'
    provider, consumer = _pair(daemons, jobs_toml=toml)
    wait_for(
        lambda: any(
            p["peer_id"] == provider.peer_id and p.get("resources")
            for p in consumer.cli("peer", "list")["peers"]
        ),
        "the consumer never heard the provider's advert",
    )
    listed = next(
        p for p in consumer.cli("peer", "list")["peers"] if p["peer_id"] == provider.peer_id
    )
    assert "scikit-learn" not in listed["resources"]["frameworks"], listed
    refused = run_cli(
        "job",
        "submit",
        "--url",
        f"{scripts}/iris.py",
        "--framework",
        "scikit-learn",
        "--peer",
        provider.peer_id,
        home=consumer.home,
    )
    assert refused.returncode == 1
    assert "framework scikit-learn not offered" in refused.stderr, refused.stderr


def test_job_submit_says_each_step_as_it_happens(
    daemons: Callable[..., Daemon], scripts: str
) -> None:
    """A submit could wait a minute with no word of what for: with --progress (the default
    on a terminal) each step is a line on stderr, from the daemon's SubmitProgress events."""
    provider, consumer = _pair(daemons, slots=2)
    done = run_cli(
        "job", "submit", "--url", f"{scripts}/iris.py", "--framework", "scikit-learn",
        "--expected-minutes", "1", "--progress", "--json", home=consumer.home,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    steps = [line.split(":")[1].strip() for line in done.stderr.splitlines()]
    assert steps == ["matching", "asking", "quoted", "confirming", "accepted"], done.stderr
    short = f"{provider.peer_id[:8]}…{provider.peer_id[-4:]}"
    assert f"provider {short}: job {job['job_id']} accepted" in done.stderr
    assert all(line.endswith(" s)") for line in done.stderr.splitlines())
    quiet = run_cli(
        "job", "submit", "--url", f"{scripts}/iris.py", "--framework", "scikit-learn",
        "--expected-minutes", "1", "--json", home=consumer.home,
    )  # fmt: skip
    assert quiet.returncode == 0 and quiet.stderr == ""  # not a terminal: no progress
