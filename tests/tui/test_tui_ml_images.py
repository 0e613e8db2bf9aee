"""Pilot tests of onboard-ml (``i``) and the GPU doctor (``d``) on the GPU screen.

onboard-ml runs the real embedded engine against the real private dockerd (docker_fixture):
the [ml_images] map points at the jobs' test image, already built there, and at a registry
where nothing listens (127.0.0.1:9), so one bar ends "already here" and one row fails with
the engine's offline sentence. The doctor runs the engine's real checks, once on the
machine the tests run on (it must render whatever it finds) and once on a built host tree
(tests/unit/test_gpu_doctor.py's ``make_env``) that has an NVIDIA card and no driver, so the
problems and their exact fix commands are known.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import ProgressBar, Static, TextArea

from engine.api import ImagePullProgress, SetMode
from engine.config import Paths
from engine.facade import Engine
from engine.resources.gpu import commands as gpu_commands
from engine.resources.gpu.doctor import run_doctor
from nunet_tui.app import NunetApp
from nunet_tui.screens.gpu_doctor import FIX_IN_TERMINAL, GpuDoctorScreen
from nunet_tui.screens.gpus import GpuScreen
from nunet_tui.screens.ml_images import ImageRow, MlImagesScreen
from nunet_tui.screens.provider_dashboard import ProviderDashboard
from tests import docker_fixture
from tests.conftest import MACHINE_TOML, make_home
from tests.doubles.host import fixed_host
from tests.pilot import anyio_backend, on_screen, until
from tests.unit.test_gpu_doctor import make_env, nvidia_card

__all__ = ["anyio_backend"]

docker_host = docker_fixture.docker_host  # the shared session fixtures
sklearn_image = docker_fixture.sklearn_image

SIZE = (140, 44)
UNREACHABLE = "127.0.0.1:9/nope/image:1"  # nothing listens on port 9
pytestmark = pytest.mark.anyio


def provider_engine(home: Paths, host_root: Path) -> Engine:
    host = fixed_host(host_root, gpus=1, clock=time.time)
    engine = Engine(home, network=False, probes=host.probes).start()
    engine.call_blocking(SetMode(mode="provider"))
    return engine


async def open_from_gpu_screen(app: NunetApp, pilot: Pilot[Any], key: str, kind: type) -> Any:
    """Dashboard, ``g`` for the GPU screen, then ``key`` (``i`` or ``d``) for ``kind``."""
    await on_screen(pilot, ProviderDashboard)
    await until(pilot, lambda: app.node is not None)
    await pilot.press("g")
    await on_screen(pilot, GpuScreen)
    await pilot.press(key)
    return await on_screen(pilot, kind)


def row_text(row: ImageRow) -> str:
    return " ".join(str(static.render()) for static in row.query(Static))


# --- onboard-ml --------------------------------------------------------------------------------


@pytest.fixture
def images_engine(
    tmp_path: Path, docker_host: str, sklearn_image: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Engine]:
    monkeypatch.setenv("DOCKER_HOST", docker_host)  # read by the engine when it probes Docker
    config = (
        MACHINE_TOML + "\n[ml_images]\n"
        f'pytorch_cpu = "{sklearn_image}"\n'
        f'tensorflow_cpu = "{UNREACHABLE}"\n'
        'pytorch_nvidia = ""\npytorch_amd = ""\ntensorflow_nvidia = ""\ntensorflow_amd = ""\n'
    )
    home = make_home(tmp_path / "home", machine_toml=config)
    engine = provider_engine(home, tmp_path / "host")
    try:
        yield engine
    finally:
        engine.close()


async def test_a_bar_per_image_and_the_registry_error(
    images_engine: Engine, sklearn_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, str]] = []  # (image, status) of every ImagePullProgress a row took
    take = ImageRow.take

    def spy(row: ImageRow, event: ImagePullProgress) -> None:
        seen.append((event.image, event.status))
        take(row, event)

    monkeypatch.setattr(ImageRow, "take", spy)
    app = NunetApp(client=images_engine)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_from_gpu_screen(app, pilot, "i", MlImagesScreen)
        assert isinstance(screen, MlImagesScreen)
        await until(pilot, lambda: screen.report is not None, timeout=60)
        assert screen.problem is None
        assert screen.report is not None
        assert [(r.key, r.status) for r in screen.report.results] == [
            ("pytorch_cpu", "present"),
            ("tensorflow_cpu", "failed"),
        ]
        rows = list(screen.query(ImageRow))
        assert [row.image for row in rows] == [sklearn_image, UNREACHABLE]
        # The rows moved with the engine's events, not only with the final report.
        await until(pilot, lambda: (UNREACHABLE, "failed") in seen)
        assert {(sklearn_image, "waiting"), (sklearn_image, "present")} <= set(seen)
        assert (UNREACHABLE, "pulling") in seen
        if os.environ.get("NUNET_SCREENSHOTS"):
            app.save_screenshot("ml_images.svg", os.environ["NUNET_SCREENSHOTS"])
        present, failed = rows

        assert present.pull_state == "present" and present.has_class("-present")
        bar = present.query_one(ProgressBar)
        assert bar.total == 100.0 and bar.progress == 100.0
        assert "already here" in row_text(present)

        assert failed.pull_state == "failed" and failed.has_class("-failed")
        detail = str(failed.query_one(".image-detail", Static).render())
        assert detail.startswith("cannot reach registry 127.0.0.1:9: ")
        assert detail.endswith("this machine is offline; load images with `docker load`")
        assert failed.query_one(".image-detail").display

        summary = str(screen.query_one("#ml-summary", Static).render())
        assert "Not ready" in summary and "1 failed" in summary and "1 already here" in summary
        assert "cannot reach registry 127.0.0.1:9" in summary

        # Run again: the same two rows, settled the same way (no duplicates).
        assert screen.runs == 1
        await pilot.press("r")
        await until(pilot, lambda: screen.runs == 2 and screen.report is not None, 60)
        assert len(screen.query(ImageRow)) == 2
        assert failed.pull_state == "failed" and present.pull_state == "present"

        await pilot.press("escape")
        await on_screen(pilot, GpuScreen)


async def test_without_docker_the_engine_error_is_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent")
    engine = provider_engine(make_home(tmp_path / "home"), tmp_path / "host")
    try:
        app = NunetApp(client=engine)
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_from_gpu_screen(app, pilot, "i", MlImagesScreen)
            assert isinstance(screen, MlImagesScreen)
            await until(pilot, lambda: screen.problem is not None, timeout=30)
            assert screen.query_one("#ml-problem").display
            text = str(screen.query_one("#ml-problem-text", Static).render())
            assert text.startswith("no Docker engine at unix:///nonexistent (no such socket)")
            assert "start dockerd or set DOCKER_HOST" in text
            assert not screen.query(ImageRow)
    finally:
        engine.close()


# --- GPU doctor --------------------------------------------------------------------------------


async def test_doctor_on_this_machine_renders_its_findings(tmp_path: Path) -> None:
    engine = provider_engine(make_home(tmp_path / "home"), tmp_path / "host")
    try:
        app = NunetApp(client=engine)
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_from_gpu_screen(app, pilot, "d", GpuDoctorScreen)
            assert isinstance(screen, GpuDoctorScreen)
            await until(pilot, lambda: screen.report is not None, timeout=60)
            report = screen.report
            assert report is not None
            rows = list(screen.query(".finding").results(Static))
            assert len(rows) == len(report.findings)
            for row, finding in zip(rows, report.findings, strict=True):
                shown = str(row.render())
                assert shown.startswith("✓ " if finding.ok else "✗ ")
                assert finding.summary in shown
            area = screen.query_one("#fix-commands", TextArea)
            assert area.text == "\n".join(report.fixes)
            assert screen.query_one("#doctor-fixes").display == bool(report.fixes)
            assert screen.query_one("#doctor-verdict").display
    finally:
        engine.close()


async def test_doctor_problems_show_their_fix_commands_and_run_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The engine's doctor on a built tree: an NVIDIA card on Ubuntu with no driver installed.
    nvidia_card(tmp_path / "tree")
    env = make_env(tmp_path / "tree")
    monkeypatch.setattr(gpu_commands, "run_doctor", partial(run_doctor, env))
    engine = provider_engine(make_home(tmp_path / "home"), tmp_path / "host")
    try:
        app = NunetApp(client=engine)
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_from_gpu_screen(app, pilot, "d", GpuDoctorScreen)
            assert isinstance(screen, GpuDoctorScreen)
            await until(pilot, lambda: screen.report is not None, timeout=30)
            report = screen.report
            assert report is not None and not report.ok and report.fixes
            facts = str(screen.query_one("#doctor-facts", Static).render())
            assert "ubuntu" in facts and "nvidia" in facts

            rows = {
                finding.check: str(row.render())
                for row, finding in zip(
                    screen.query(".finding").results(Static), report.findings, strict=True
                )
            }
            assert rows["driver"].startswith("✗ NVIDIA kernel module not loaded")
            assert "$ sudo ubuntu-drivers install" in rows["driver"]
            assert rows["docker"].startswith("✓ Docker engine 24.0.7 reachable")
            assert "$ " not in rows["docker"]

            area = screen.query_one("#fix-commands", TextArea)
            assert area.read_only
            assert area.text.splitlines() == list(report.fixes)
            assert screen.query_one("#doctor-fixes").display
            note = str(screen.query_one("#fix-note", Static).render())
            assert FIX_IN_TERMINAL in note and "after confirming" in note
            verdict = str(screen.query_one("#doctor-verdict", Static).render())
            assert "Problems found" in verdict and FIX_IN_TERMINAL in verdict
            if os.environ.get("NUNET_SCREENSHOTS"):
                app.save_screenshot("doctor.svg", os.environ["NUNET_SCREENSHOTS"])
            # Nothing on this screen runs a command: no buttons at all.
            assert not screen.query("Button")

            # Select and copy: the text area copies its selection; y copies every command.
            area.focus()
            area.select_all()
            assert area.selected_text == "\n".join(report.fixes)
            # The screen's keys still work while the read-only area has the focus.
            copied: list[str] = []
            monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
            await pilot.press("y")
            assert copied == ["\n".join(report.fixes) + "\n"]
    finally:
        engine.close()
