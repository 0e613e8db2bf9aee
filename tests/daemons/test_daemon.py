"""Daemon and attach with real processes: one engine per home, commands go to it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from engine.config import Paths
from engine.errors import EngineError
from engine.facade import Engine
from tests.conftest import REPO, TEST_ADDRESS, run_cli


@pytest.fixture
def daemon(node_home: Paths) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "nunet_tui", "--home", str(node_home.home), "daemon"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    while not node_home.control_socket.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "daemon did not open its control socket"
        time.sleep(0.05)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_commands_attach_to_the_daemon(daemon: subprocess.Popen[str], node_home: Paths) -> None:
    info = json.loads(run_cli("--attach", "info", "--json", home=node_home).stdout)
    assert info["daemon"] is True
    assert (
        run_cli(
            "onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS, home=node_home
        ).returncode
        == 0
    )
    # Without --attach the command still finds the daemon rather than fighting over the home.
    info = json.loads(run_cli("info", "--json", home=node_home).stdout)
    assert info["daemon"] is True and info["onboarded"]["memory_mb"] == 8000


def test_second_engine_is_refused_while_the_daemon_runs(
    daemon: subprocess.Popen[str], node_home: Paths
) -> None:
    with pytest.raises(EngineError) as caught:
        Engine(node_home).start()
    assert caught.value.code == "home_busy"


def test_sigterm_stops_cleanly_and_logs(daemon: subprocess.Popen[str], node_home: Paths) -> None:
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(10) == 0
    _, stderr = daemon.communicate()
    assert "daemon ready" in stderr and "engine stopped" in stderr
    # Clean, which is not a time: the signal may come while the engine still starts (the
    # socket opens first, ~1 s before ready); what must never show is a stop that waited
    # out its own deadline.
    assert "did not stop within" not in stderr and "Traceback" not in stderr
    log = node_home.log_file.read_text()
    assert "daemon ready" in log
    assert not node_home.control_socket.exists()
    result = run_cli("--attach", "info", home=node_home)
    assert result.returncode == 1 and "no nunet-tui daemon is running" in result.stderr


def test_kill_9_leaves_the_home_usable(daemon: subprocess.Popen[str], node_home: Paths) -> None:
    daemon.kill()
    daemon.wait(10)
    info = json.loads(run_cli("info", "--json", home=node_home).stdout)
    assert info["daemon"] is False


def test_daemon_executor_flag_sets_what_runs_jobs(node_home: Paths) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nunet_tui",
            "--home",
            str(node_home.home),
            "daemon",
            "--executor",
            "process",
            "--executor",
            "docker",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not node_home.control_socket.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        run_cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS, home=node_home)
        proc.terminate()
        _, stderr = proc.communicate(timeout=15)
        # Where it runs them: in a sandbox, or (a warning) not.
        assert (
            "the process executor runs each job in a sandbox" in stderr
            or "THE PROCESS EXECUTOR CANNOT SANDBOX JOBS HERE" in stderr
        )
    finally:
        if proc.poll() is None:
            proc.kill()
