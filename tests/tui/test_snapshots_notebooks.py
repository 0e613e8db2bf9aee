"""SVG snapshots of the Notebooks screen (consumer mode) at 80x24 and 160x48, on a real
embedded engine: three notebooks written into the node's store with fixed times (running,
stopped with its files back, failed), the app's clock pinned. The notebooks' tokens are in
their specs but never on the screen. Update with ``pytest --snapshot-update`` and look at the
pictures before committing them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from textual.pilot import Pilot

from engine.api import JobInfo, JobMetering, SetMode
from engine.config import Paths
from engine.domain.spec import JobSpec
from engine.store import Store
from nunet_tui.app import NunetApp
from tests.tui.test_snapshots import EngineFactory, _until, host_engine, settled

__all__ = ["host_engine"]

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]
T0 = 1_750_000_000.0
NOW = T0 + 3_600
PROVIDER = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW"
OTHER = "12D3KooWRWcUSHYQhJjq4z1S8u5iEHoYwqHW6dFCzXvL1b8Ztq2a"
LAUNCHER = "http://127.0.0.1:8765/notebook/notebook.py"
TOKENS = ("a1" * 24, "b2" * 24, "c3" * 24)


def _notebook(job_id: str, name: str, token: str, port: int, **fields: Any) -> JobInfo:
    spec = JobSpec(
        name=name,
        script_url=LAUNCHER,
        framework="scikit-learn",
        kind="service",
        ports=(port,),
        env={"JUPYTER_TOKEN": token, "NOTEBOOK_PORT": str(port)},
        outputs=("notebooks",),
        expected_minutes=120,
    )
    return JobInfo(
        job_id=job_id,
        role="consumer",
        provider=PROVIDER,
        consumer="self",
        spec=spec,
        price_units_hour=600_000,
        executor="docker",
        **fields,
    )


NOTEBOOKS = [
    _notebook(
        "7b0e5c1a2f3d",
        "training sweep",
        TOKENS[0],
        24_811,
        state="running",
        created_at=T0 + 2_400,
        started_at=T0 + 2_410,
        updated_at=T0 + 2_410,
    ),
    _notebook(
        "3c9d41e0aa17",
        "data exploration",
        TOKENS[1],
        31_207,
        state="completed",
        reason="stopped by the consumer",
        created_at=T0,
        started_at=T0 + 12,
        finished_at=T0 + 1_800,
        updated_at=T0 + 1_800,
        metering=JobMetering(wall_s=1_788, cpu_s=240, cost_units=300_000),
        results_sha256="4e" * 32,
        results_size=18_432,
        # Already fetched: an engine on the network would otherwise fetch it.
        results_dir="/var/lib/nunet/jobs/3c9d41e0aa17/results.tar.gz",
    ),
    _notebook(
        "e41f00b3c2d9",
        "no jupyterlab here",
        TOKENS[2],
        27_450,
        state="failed",
        reason="this image has no JupyterLab: create the notebook with --dep jupyterlab",
        exit_code=2,
        created_at=T0 - 600,
        started_at=T0 - 590,
        finished_at=T0 - 588,
        updated_at=T0 - 588,
    ),
]
# A plain job of the same node: not a notebook, not listed.
BATCH = JobInfo(
    job_id="51c0a1b2c3d4",
    role="consumer",
    state="completed",
    provider=OTHER,
    consumer="self",
    spec=JobSpec(name="iris", script_url=LAUNCHER, framework="scikit-learn"),
    created_at=T0 + 60,
)


@pytest.fixture
def stored_notebooks(node_home: Paths) -> Iterator[Paths]:
    store = Store(node_home.database)
    for job in (*NOTEBOOKS, BATCH):
        store.save_job(job)
    store.close()
    yield node_home


def _app(host_engine: EngineFactory) -> NunetApp:
    engine = host_engine()
    engine.call_blocking(SetMode(mode="consumer"))
    return NunetApp(client=engine, clock=lambda: NOW)


async def _listed(pilot: Pilot[Any]) -> None:
    await _until(pilot, lambda: len(pilot.app.screen.notebooks) == len(NOTEBOOKS))  # type: ignore[attr-defined]


@pytest.mark.parametrize("size", SIZES)
def test_notebooks_list(
    snap_compare: Any, stored_notebooks: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    app = _app(host_engine)
    assert snap_compare(
        app, terminal_size=size, run_before=settled("NotebooksScreen", keys=["b"], then=_listed)
    )


@pytest.mark.parametrize("size", SIZES)
def test_notebooks_delete_asks_first(
    snap_compare: Any, stored_notebooks: Paths, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    """d on the stopped notebook: a question, Cancel focused (nothing is deleted)."""
    app = _app(host_engine)

    async def ask(pilot: Pilot[Any]) -> None:
        await _listed(pilot)
        await pilot.press("down", "d")
        await _until(pilot, lambda: type(pilot.app.screen).__name__ == "ConfirmScreen")

    assert snap_compare(
        app, terminal_size=size, run_before=settled("NotebooksScreen", keys=["b"], then=ask)
    )
