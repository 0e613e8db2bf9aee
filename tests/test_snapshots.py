"""SVG snapshots of every screen at 80x24 and 120x40, on a real embedded engine.

The node home declares its machine (conftest), so numbers and the peer id are fixed. What
the engine probes from the host itself (OS and kernel, Docker, GPU drivers) differs from one
test machine to the next, so ``HostProbeDouble`` pins those answers: a test double at the
hardware boundary, nothing else is faked. Update with ``pytest --snapshot-update`` and look
at the pictures before committing them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import pytest
from textual.pilot import Pilot
from textual.widgets import Input
from textual.worker import WorkerCancelled, WorkerFailed

from engine.api import (
    Capacity,
    Check,
    Command,
    GetInfo,
    GpuInfo,
    NodeInfo,
    OnboardRequest,
    Pause,
    Readiness,
    SetMode,
)
from engine.client import EventCallback
from engine.facade import Engine
from nunet_tui.app import NunetApp
from tests.conftest import TEST_ADDRESS

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]

FIXED_READINESS = Readiness(
    docker=Check(ok=True, detail="Docker Engine 27.3.1 reachable at /var/run/docker.sock"),
    gpu_driver=Check(ok=False, detail="no GPU detected (CPU-only jobs)"),
    gpu_runtime=Check(ok=False, detail="no GPU detected (CPU-only jobs)"),
)
GPU_READINESS = Readiness(
    docker=Check(ok=True, detail="Docker Engine 27.3.1 reachable at /var/run/docker.sock"),
    gpu_driver=Check(ok=True, detail="NVIDIA driver 550.54.15"),
    gpu_runtime=Check(ok=False, detail="nvidia-container-toolkit not installed"),
)
DOUBLE_GPUS = (
    GpuInfo(index=0, vendor="nvidia", name="NVIDIA GeForce RTX 3090", vram_mb=24_576, uuid="GPU-0"),
    GpuInfo(index=1, vendor="amd", name="AMD Radeon RX 6800", vram_mb=16_384, uuid="GPU-1"),
)


class HostProbeDouble:
    """An EngineClient that passes every call to the real engine, then pins host probes."""

    def __init__(self, engine: Engine, *, gpus: tuple[GpuInfo, ...] = ()) -> None:
        self.engine = engine
        self.gpus = gpus

    @property
    def embedded(self) -> bool:
        return True

    async def call(self, command: Command) -> Any:
        return self._pin(await self.engine.call(command))

    def call_blocking(self, command: Command, timeout: float = 30.0) -> Any:
        return self._pin(self.engine.call_blocking(command, timeout))

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        return self.engine.subscribe(callback)

    def close(self) -> None:
        self.engine.close()

    def _pin(self, reply: Any) -> Any:
        if isinstance(reply, NodeInfo):
            machine = msgspec.structs.replace(
                reply.machine, os="Debian GNU/Linux 12 (bookworm)", kernel="6.1.0-28", arch="x86_64"
            )
            readiness = GPU_READINESS if self.gpus else FIXED_READINESS
            return msgspec.structs.replace(reply, machine=machine, readiness=readiness)
        if isinstance(reply, Capacity) and reply.view != "onboarded":
            if self.gpus:
                return msgspec.structs.replace(reply, gpus=self.gpus, gpu_reason=None)
            return msgspec.structs.replace(
                reply, gpus=(), gpu_reason="no NVIDIA, AMD or Intel GPU found"
            )
        return reply


def settled(
    screen: str,
    *,
    keys: Sequence[str] = (),
    then: Callable[[Pilot[Any]], Awaitable[None]] | None = None,
) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """A ``run_before``: wait for the engine's answers and ``screen``, press ``keys``."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        await _until(pilot, lambda: getattr(app, "node", None) is not None)
        for key in keys:
            await pilot.press(key)
            await _quiet(pilot)
        await _until(pilot, lambda: type(app.screen).__name__ == screen)
        if then is not None:
            await then(pilot)
        await _quiet(pilot)
        for field in app.screen.query(Input):
            field.cursor_blink = False

    return run_before


async def _until(pilot: Pilot[Any], predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out; screen is {pilot.app.screen!r}")
        await pilot.pause(0.02)


async def _quiet(pilot: Pilot[Any]) -> None:
    """Wait for engine calls in flight (not for workers waiting on a screen to close)."""
    for _ in range(3):
        await pilot.pause(0.05)
        busy = [w for w in pilot.app.workers if w.group in ("validate", "refresh", "mode")]
        for worker in busy:
            with contextlib.suppress(WorkerCancelled, WorkerFailed):
                await worker.wait()


def _onboard(engine: Engine, **overrides: Any) -> None:
    engine.call_blocking(SetMode(mode="provider"))
    values: dict[str, Any] = {"memory_mb": 8000, "cpu_mhz": 3000, "address": TEST_ADDRESS}
    values.update(overrides)
    engine.call_blocking(OnboardRequest(**values))


@pytest.mark.parametrize("size", SIZES)
def test_mode_chooser(snap_compare: Any, engine_client: Engine, size: tuple[int, int]) -> None:
    app = NunetApp(client=HostProbeDouble(engine_client))
    assert snap_compare(app, terminal_size=size, run_before=settled("ModeChooserScreen"))


@pytest.mark.parametrize("size", SIZES)
def test_provider_dashboard_not_onboarded(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    engine_client.call_blocking(SetMode(mode="provider"))
    app = NunetApp(client=HostProbeDouble(engine_client))
    assert snap_compare(app, terminal_size=size, run_before=settled("ProviderDashboard"))


@pytest.mark.parametrize("size", SIZES)
def test_provider_dashboard_onboarded(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    _onboard(engine_client, local_discovery=True)
    app = NunetApp(client=HostProbeDouble(engine_client))
    assert snap_compare(app, terminal_size=size, run_before=settled("ProviderDashboard"))


@pytest.mark.parametrize("size", SIZES)
def test_provider_dashboard_paused(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    _onboard(engine_client)
    engine_client.call_blocking(Pause())
    app = NunetApp(client=HostProbeDouble(engine_client))
    assert snap_compare(app, terminal_size=size, run_before=settled("ProviderDashboard"))


@pytest.mark.parametrize("size", SIZES)
def test_provider_dashboard_gpu_rig(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    engine_client.call_blocking(SetMode(mode="provider"))
    app = NunetApp(client=HostProbeDouble(engine_client, gpus=DOUBLE_GPUS))
    assert snap_compare(app, terminal_size=size, run_before=settled("ProviderDashboard"))


@pytest.mark.parametrize("size", SIZES)
def test_onboarding_form_with_errors(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    engine_client.call_blocking(SetMode(mode="provider"))
    app = NunetApp(client=HostProbeDouble(engine_client))

    async def type_bad_values(pilot: Pilot[Any]) -> None:
        await pilot.press(*"2000", "tab", *"9000", "tab", "tab", *"addr1qx2fxv2um")
        await _quiet(pilot)
        await _until(
            pilot, lambda: pilot.app.screen.query_one("#address-field").has_class("-invalid")
        )
        await pilot.press("shift+tab", "shift+tab", "shift+tab")  # back to the top

    run_before = settled("OnboardingScreen", keys=["o"], then=type_bad_values)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_resources_form(snap_compare: Any, engine_client: Engine, size: tuple[int, int]) -> None:
    _onboard(engine_client)
    app = NunetApp(client=HostProbeDouble(engine_client))
    assert snap_compare(app, terminal_size=size, run_before=settled("OnboardingScreen", keys=["o"]))


@pytest.mark.parametrize("size", SIZES)
def test_consumer_dashboard(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=HostProbeDouble(engine_client))
    assert snap_compare(app, terminal_size=size, run_before=settled("ConsumerDashboard"))


@pytest.mark.parametrize("size", SIZES)
def test_help(snap_compare: Any, engine_client: Engine, size: tuple[int, int]) -> None:
    _onboard(engine_client)
    app = NunetApp(client=HostProbeDouble(engine_client))
    assert snap_compare(app, terminal_size=size, run_before=settled("HelpScreen", keys=["?"]))


@pytest.mark.parametrize("size", SIZES)
def test_confirm_offboard(snap_compare: Any, engine_client: Engine, size: tuple[int, int]) -> None:
    _onboard(engine_client)
    app = NunetApp(client=HostProbeDouble(engine_client))
    assert snap_compare(app, terminal_size=size, run_before=settled("ConfirmScreen", keys=["x"]))


def test_the_pinned_probes_are_what_the_snapshots_show(engine_client: Engine) -> None:
    """The double changes only host probes: identity and declared machine come through."""
    info = HostProbeDouble(engine_client).call_blocking(GetInfo())
    real = engine_client.call_blocking(GetInfo())
    assert info.peer_id == real.peer_id
    assert info.machine.hostname == real.machine.hostname == "rig-01"
    assert info.machine.cpu_cores == real.machine.cpu_cores
