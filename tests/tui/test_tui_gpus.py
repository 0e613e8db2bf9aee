"""Pilot tests of the GPU screen and the dashboard's GPU lines on the NVML double.

The engine is real (its GPU sampler service, NVML reader and history); only the NVIDIA
library and the host files are doubles (tests/doubles/host.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from engine.api import SetMode
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.screens.gpus import GpuScreen
from nunet_tui.screens.provider_dashboard import ProviderDashboard
from nunet_tui.widgets.gpu_card import GpuCard, GpuSummary
from tests.conftest import make_home
from tests.doubles.fake_pynvml import FakeNvml, FakeProcess
from tests.doubles.host import fixed_host
from tests.pilot import anyio_backend, on_screen, until

__all__ = ["anyio_backend"]

SIZE = (160, 48)
pytestmark = pytest.mark.anyio


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[Engine, FakeNvml]]:
    """Eight A100s, one running hot and one near its power limit, sampled on the real clock."""
    nvml = FakeNvml.with_gpus(8)
    nvml.gpus[3].temperature = 89  # slowdown at 90: red
    nvml.gpus[5].power_usage_mw = 330_000  # of 350 W: yellow
    nvml.gpus[0].processes = [FakeProcess(pid=4242, name="/usr/bin/python3")]
    host = fixed_host(tmp_path / "host", nvml=nvml, clock=time.time)
    engine = Engine(make_home(tmp_path / "home"), network=False, probes=host.probes).start()
    engine.call_blocking(SetMode(mode="provider"))
    try:
        yield engine, nvml
    finally:
        engine.close()


async def test_eight_gpus_get_a_card_each_with_live_history(rig: tuple[Engine, FakeNvml]) -> None:
    engine, nvml = rig
    app = NunetApp(client=engine)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: app.node is not None)
        await pilot.press("g")
        screen = await on_screen(pilot, GpuScreen)
        await until(pilot, lambda: len(screen.query(GpuCard)) == 8)
        cards = list(screen.query(GpuCard))
        first = str(cards[0].render())
        assert "37%" in first and "61°C / 90" in first and "215 / 350 W" in first
        assert cards[3].has_class("-error") and cards[5].has_class("-warning")
        assert not cards[1].has_class("-warning") and not cards[1].has_class("-error")
        processes = screen.query_one("#process-table", DataTable)
        await until(pilot, lambda: processes.row_count == 1)
        assert "python3" in " ".join(str(c) for c in processes.get_row_at(0))

        # One new sample a second is appended, and a change shows on the card.
        uuid = cards[0].gpu.uuid
        before = len(screen.feed.trace(uuid).utilization)
        nvml.gpus[0].utilization_gpu = 99
        await until(pilot, lambda: "99%" in str(cards[0].render()), timeout=5)
        assert len(screen.feed.trace(uuid).utilization) > before
        assert 99.0 in screen.feed.trace(uuid).utilization

        await pilot.press("escape")
        dashboard = await on_screen(pilot, ProviderDashboard)
        summary = dashboard.query_one(GpuSummary)
        # The dashboard's own 1 Hz look at the GPUs picks the change up too.
        await until(pilot, lambda: "99%" in str(summary.render()), timeout=5)


async def test_no_gpu_says_why_and_what_to_do(tmp_path: Path) -> None:
    host = fixed_host(tmp_path / "host", gpus=0)
    engine = Engine(make_home(tmp_path / "home"), network=False, probes=host.probes).start()
    try:
        engine.call_blocking(SetMode(mode="provider"))
        app = NunetApp(client=engine)
        async with app.run_test(size=(80, 24)) as pilot:
            await on_screen(pilot, ProviderDashboard)
            await until(pilot, lambda: app.node is not None)
            await pilot.press("g")
            screen = await on_screen(pilot, GpuScreen)
            text = screen.query_one("#no-gpu-text", Static)
            await until(pilot, lambda: screen.query_one("#no-gpu").display)
            shown = str(text.render())
            assert "libnvidia-ml.so" in shown
            assert "nunet-tui gpu doctor" in shown
            assert not screen.query(GpuCard)
    finally:
        engine.close()


async def test_the_gpu_key_is_for_providers_only(tmp_path: Path) -> None:
    host = fixed_host(tmp_path / "host", gpus=1)
    engine = Engine(make_home(tmp_path / "home"), network=False, probes=host.probes).start()
    try:
        engine.call_blocking(SetMode(mode="consumer"))
        app = NunetApp(client=engine)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.node is not None and app.mode == "consumer")
            await pilot.press("g")
            await pilot.pause(0.2)
            assert not isinstance(app.screen, GpuScreen)
            await pilot.press("m")
            await on_screen(pilot, ProviderDashboard)
            await pilot.press("g")
            await on_screen(pilot, GpuScreen)
    finally:
        engine.close()
