"""The GPU scripting commands on this GPU-less machine, as a user's shell runs them."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import api
from engine.config import Paths
from engine.errors import EngineError
from engine.facade import Engine
from nunet_tui.cli import gpu_output
from tests.conftest import MACHINE_TOML, REPO, make_home, run_cli

NO_DRIVER = pytest.mark.skipif(
    Path("/proc/driver/nvidia/version").exists(), reason="this machine has an NVIDIA driver"
)


@pytest.fixture
def engine(node_home: Paths) -> Iterator[Engine]:
    with Engine(node_home) as running:
        yield running


@NO_DRIVER
def test_gpu_status_json_without_gpus(node_home: Paths) -> None:
    done = run_cli("gpu", "status", "--json", home=node_home)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["gpus"] == []
    assert data["reason"] == "no NVIDIA driver library (libnvidia-ml.so) found"


@NO_DRIVER
def test_gpu_status_text_and_capabilities(node_home: Paths) -> None:
    done = run_cli("gpu", "status", home=node_home)
    assert done.stdout.strip() == "no GPU: no NVIDIA driver library (libnvidia-ml.so) found"
    done = run_cli("gpu", "capabilities", "--json", "--in-container", home=node_home)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["host"]["cuda"] is False and data["host"]["tensor_cores"] is False
    assert data["container"] is None
    assert data["container_reason"].startswith("no NVIDIA or AMD GPU on this host")


def test_gpu_doctor_json(node_home: Paths) -> None:
    done = run_cli(
        "gpu", "doctor", "--json", home=node_home, env={"DOCKER_HOST": "unix:///nonexistent"}
    )
    # Problems found: the report on stdout, a failure status and one line on stderr.
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("nunet-tui: error: ") and "problem" in done.stderr
    data = json.loads(done.stdout)
    checks = {f["check"]: f for f in data["findings"]}
    assert {"vendor", "wsl", "docker", "secure_boot"} <= set(checks)
    assert checks["docker"]["ok"] is False
    assert "sudo apt-get install -y docker.io" in data["fixes"]
    assert data["ok"] is False


def test_gpu_doctor_fix_refused_runs_nothing(node_home: Paths) -> None:
    argv = [sys.executable, "-m", "nunet_tui", "--home", str(node_home.home), "gpu", "doctor"]
    done = subprocess.run(
        [*argv, "--fix"],
        input="no\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": "unix:///nonexistent", "HOME": "/tmp"},
    )
    assert done.returncode == 1
    assert "Type yes to run these" in done.stdout
    assert "not confirmed: nothing was run" in done.stdout
    assert "$ " not in done.stdout.split("Type yes")[1]  # no command was echoed as run
    assert done.stderr.strip() == "nunet-tui: error: the fixes were not applied"


def test_doctor_runner_never_calls_the_shell_without_yes(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent")
    ran: list[str] = []
    args = argparse.Namespace(fix=True, json=False)
    with pytest.raises(EngineError):
        gpu_output.run_doctor(args, engine, confirm=lambda p: "", runner=ran.append)  # type: ignore[arg-type]
    assert ran == []
    result = gpu_output.run_doctor(
        args, engine, confirm=lambda p: "yes", runner=lambda c: ran.append(c) or 0
    )
    assert result is None
    assert "sudo apt-get install -y docker.io" in ran
    assert "GPU doctor" in capsys.readouterr().out


def test_watch_refreshes_until_ctrl_c(engine: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    ticks: list[float] = []

    def sleep(seconds: float) -> None:
        ticks.append(seconds)
        if len(ticks) == 3:
            raise KeyboardInterrupt

    args = argparse.Namespace(watch=True, json=True)
    assert gpu_output.run_status(args, engine, sleep=sleep) is None
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and ticks == [1.0, 1.0, 1.0]
    assert all("gpus" in json.loads(line) and "reason" in json.loads(line) for line in lines)


def test_status_text_marks_hot_and_power_limited_boards() -> None:
    gpu = api.GpuSnapshot(
        index=0,
        vendor="nvidia",
        name="NVIDIA A100",
        uuid="GPU-1",
        memory_total_mb=81920,
        memory_used_mb=40960,
        utilization_gpu=100.0,
        temperature_c=86.0,
        temperature_limit_c=90.0,
        power_draw_w=399.0,
        power_limit_w=400.0,
        processes=(api.GpuProcess(pid=7, name="evil\x1b[31m", used_memory_mb=None),),
    )
    text = gpu_output.status_text(api.GpuStatusReply(gpus=(gpu,)))
    assert "[####################] 100%" in text
    assert "[##########..........] 40,960 / 81,920 MB" in text
    assert "HOT" in text and "AT LIMIT" in text
    assert "\x1b" not in text and "evil\\x1b[31m" in text
    assert "n/a" in text  # the process's memory


def test_doctor_and_images_text() -> None:
    report = api.DoctorReport(
        vendors=("nvidia",),
        distro="ubuntu",
        findings=(
            api.DoctorFinding(check="driver", ok=False, summary="x", fix=("sudo modprobe nvidia",)),
        ),
    )
    text = gpu_output.doctor_text(report)
    assert "PROBLEM driver" in text and "$ sudo modprobe nvidia" in text
    images = api.MlImagesReport(
        results=(api.MlImageResult(key="k", image="a:1", status="failed", detail="offline"),)
    )
    assert gpu_output.images_text(images) == "failed   a:1  offline"
    assert gpu_output.json_of(images)["ok"] is False


def test_a_process_only_node_is_not_told_to_install_docker(tmp_path: Path) -> None:
    """`gpu doctor` and `info` flagged Docker as missing on a node set to run process jobs
    only: nothing there needs it."""
    home = make_home(
        tmp_path / "home", machine_toml=MACHINE_TOML + '\n[jobs]\nexecutors = ["process"]\n'
    )
    gone = {"DOCKER_HOST": "unix:///nonexistent"}
    doctor = run_cli("gpu", "doctor", "--json", home=home, env=gone)
    checks = {f["check"]: f for f in json.loads(doctor.stdout)["findings"]}
    assert checks["docker"]["ok"] is True and "not used" in checks["docker"]["summary"]
    assert not any("docker" in fix for fix in json.loads(doctor.stdout)["fixes"])
    readiness = json.loads(run_cli("info", "--json", home=home, env=gone).stdout)["readiness"]
    assert readiness["docker"]["ok"] is True and "not used" in readiness["docker"]["detail"]
