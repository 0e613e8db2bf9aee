"""SVG snapshots of the provider's Resources screen at 80x24 and 160x48, on a real engine.

The host is the fixed rig of tests/doubles/host.py (two GPUs), onboarded (the engine of the
provider jobs' snapshots), and
the resources are defined through the engine's own commands: the two RTX 3090 regrouped as a
custom resource, a declared accelerator, two specs at their prices, a group and a pool that
reserves one spec for it. Update with ``pytest --snapshot-update`` and look at the pictures.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from engine.api import (
    CustomAdd,
    CustomResource,
    Group,
    GroupAdd,
    Pool,
    PoolAdd,
    ResourceSpec,
    SpecAdd,
)
from engine.facade import Engine
from nunet_tui.app import NunetApp
from tests.tui.test_snapshots import OTHER_PEER, _quiet, _until, settled
from tests.tui.test_snapshots_provider_jobs import _rig, provider_engine

__all__ = ["provider_engine"]
EngineFactory = Callable[..., Engine]

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]


def define(engine: Engine) -> None:
    engine.call_blocking(
        CustomAdd(
            custom=CustomResource(
                name="RTX 3090", count=1, from_gpus=(0,), vram_mb=24_576, model="GeForce RTX 3090"
            )
        )
    )
    engine.call_blocking(
        CustomAdd(
            custom=CustomResource(
                name="TPU 1684X", kind="accelerator", count=1, vram_mb=12_288, model="BM1684X"
            )
        )
    )
    engine.call_blocking(GroupAdd(group=Group(name="students", members=(OTHER_PEER,))))
    engine.call_blocking(PoolAdd(pool=Pool(name="lab", groups=("students",))))
    engine.call_blocking(
        SpecAdd(
            spec=ResourceSpec(name="cpu small", cpu_cores=1, ram_mb=2048, price_units_hour=400_000)
        )
    )
    engine.call_blocking(
        SpecAdd(
            spec=ResourceSpec(
                name="gpu large",
                cpu_cores=2,
                ram_mb=6144,
                disk_mb=10_000,
                gpus=1,
                gpu_resource="RTX 3090",
                price_units_hour=2_400_000,
                min_charge_units=50_000,
                pool="lab",
            )
        )
    )


@pytest.fixture(autouse=True)
def home_is_the_test_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The resources file is shown under ``~``: the same path in every run."""
    monkeypatch.setenv("HOME", str(tmp_path))


def _app(provider_engine: EngineFactory) -> NunetApp:
    engine = provider_engine([], gpus=_rig())
    define(engine)
    return NunetApp(client=engine)


async def _loaded(pilot: Pilot[Any]) -> None:
    await _until(pilot, lambda: getattr(pilot.app.screen, "listing", None) is not None)
    await _quiet(pilot)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("tab", ["1", "2", "3", "4"], ids=["system", "custom", "specs", "pools"])
def test_resources_tabs(
    snap_compare: Any, provider_engine: EngineFactory, size: tuple[int, int], tab: str
) -> None:
    app = _app(provider_engine)

    async def then(pilot: Pilot[Any]) -> None:
        await _loaded(pilot)
        await pilot.press(tab)
        await _quiet(pilot)

    assert snap_compare(
        app, terminal_size=size, run_before=settled("ResourcesScreen", keys=["e"], then=then)
    )


@pytest.mark.parametrize("size", SIZES)
def test_resources_spec_form_with_problems(
    snap_compare: Any, provider_engine: EngineFactory, size: tuple[int, int]
) -> None:
    """A new spec as it is typed: too many cores, a price with a 7th decimal, no such pool."""
    app = _app(provider_engine)

    async def then(pilot: Pilot[Any]) -> None:
        await _loaded(pilot)
        await pilot.press("n")
        screen = pilot.app.screen
        values = {
            "spec-name": "gpu huge",
            "spec-cpu_cores": "64",
            "spec-ram_mb": "4096",
            "spec-gpus": "1",
            "spec-gpu_resource": "RTX 3090",
            "spec-price_units_hour": "1.0000001",
            "spec-pool": "vip",
        }
        for box_id, text in values.items():
            screen.query_one(f"#{box_id}", Input).value = text
        await pilot.pause()
        screen.query_one("#spec-name", Input).focus()
        await _quiet(pilot)

    assert snap_compare(
        app, terminal_size=size, run_before=settled("ResourcesScreen", keys=["e"], then=then)
    )
