"""Where the host cannot sandbox a process job (no bwrap, user namespaces refused): "auto" runs
it as the provider's user and says so in the job's log and the provider's; "require" refuses
it with the reason; and `job shell` into process jobs is offered only where turned on."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from engine.config import JobSettings
from engine.errors import EngineError
from engine.jobs.executors import sandbox
from engine.jobs.executors.process import ProcessExecutor
from engine.resources.readiness import sandbox_check
from tests.engine.test_jobs_process import new_run, run_job, spec, texts

NO_BWRAP = sandbox.SandboxStatus(False, "bwrap not found: install bubblewrap")


@pytest.fixture
def no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "probe", lambda: NO_BWRAP)


@pytest.mark.usefixtures("no_sandbox")
def test_auto_runs_unsandboxed_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Straight onto the "nunet" logger: a test before it in this worker may have configured
    # logging (logsetup.configure: propagate off), and then nothing reaches caplog's root.
    nunet = logging.getLogger("nunet")
    nunet.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="nunet.jobs.process"):
            status, lines = run_job(ProcessExecutor(), new_run(tmp_path, spec()), "print('ran')\n")
    finally:
        nunet.removeHandler(caplog.handler)
    assert status.outcome == "completed" and texts(lines) == ["ran"]
    assert "not sandboxed: it runs as the provider's own user" in texts(lines, "system")
    assert "runs UNSANDBOXED" in caplog.text and "bwrap not found" in caplog.text
    check = sandbox_check(sandbox.probe)
    assert not check.ok and "UNSANDBOXED" in check.detail


@pytest.mark.usefixtures("no_sandbox")
def test_require_refuses_a_process_job_without_a_sandbox(tmp_path: Path) -> None:
    with pytest.raises(BaseException) as refused:  # out of the executor's nursery
        run_job(ProcessExecutor(sandbox_mode="require"), new_run(tmp_path, spec()), "print(1)\n")
    errors = [refused.value]
    while isinstance(errors[-1], BaseExceptionGroup):
        errors.append(errors[-1].exceptions[0])
    assert isinstance(errors[-1], EngineError)
    assert str(errors[-1]) == (
        "this provider runs process jobs only in a sandbox, and cannot: "
        "bwrap not found: install bubblewrap"
    )


def test_shells_are_offered_for_process_jobs_only_when_turned_on() -> None:
    assert JobSettings(executors=["docker"]).shells_offered()
    assert not JobSettings(executors=["process"]).shells_offered()
    assert JobSettings(executors=["process"], allow_process_shell=True).shells_offered()
    assert not JobSettings(executors=["docker"], allow_shell=False).shells_offered()


def test_a_gpu_job_gets_its_own_cards_device_nodes_and_a_cpu_job_none() -> None:
    from engine.api import GpuInfo

    assert sandbox.gpu_devices(()) == ()
    card = GpuInfo(index=1, vendor="nvidia", name="t", vram_mb=1)
    assert sandbox.gpu_devices((card,)) == ("nvidia1", *sandbox.NVIDIA_SHARED)
    amd = GpuInfo(index=0, vendor="amd", name="t", vram_mb=1)
    assert sandbox.gpu_devices((amd,)) == ("kfd", "dri")
