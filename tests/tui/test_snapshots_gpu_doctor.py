"""SVG snapshots of the GPU doctor screen (``g`` then ``d``) at 80x24 and 120x40.

The engine's real doctor reads a built host tree (tests/unit/test_gpu_doctor.py's ``make_env``):
an NVIDIA card on Ubuntu with no driver and no container toolkit, so the findings and fix
commands are the same on every machine. Update with ``pytest --snapshot-update`` and look
at the pictures before committing them.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import TextArea

from engine.api import SetMode
from engine.resources.gpu import commands as gpu_commands
from engine.resources.gpu.doctor import run_doctor
from nunet_tui.app import NunetApp
from tests.doubles.host import RIG_GPUS
from tests.tui.test_snapshots import SIZES, EngineFactory, _until, host_engine, settled
from tests.unit.test_gpu_doctor import make_env, nvidia_card

__all__ = ["host_engine"]  # the fixture, shared with tests/tui/test_snapshots.py


@pytest.mark.parametrize("size", SIZES)
def test_gpu_doctor_with_problems(
    snap_compare: Any,
    host_engine: EngineFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    size: tuple[int, int],
) -> None:
    nvidia_card(tmp_path / "tree")
    monkeypatch.setattr(
        gpu_commands, "run_doctor", partial(run_doctor, make_env(tmp_path / "tree"))
    )
    engine = host_engine(gpus=RIG_GPUS)
    engine.call_blocking(SetMode(mode="provider"))
    app = NunetApp(client=engine)

    async def report(pilot: Pilot[Any]) -> None:
        await _until(pilot, lambda: getattr(pilot.app.screen, "report", None) is not None)
        await pilot.pause(0.1)
        for area in pilot.app.screen.query(TextArea):
            area.cursor_blink = False

    run_before = settled("GpuDoctorScreen", keys=["g", "d"], then=report)
    assert snap_compare(app, terminal_size=size, run_before=run_before)
