"""SVG snapshots of every screen at 80x24 and 120x40, on a real embedded engine.

The node home declares its machine (conftest), so numbers and the peer id are fixed. What
the engine would probe from the host itself (OS and kernel, Docker, GPU drivers) differs from
one test machine to the next, so the engine reads a fixed host instead: the doubles in
tests/doubles/host.py (a file tree, the NVML library, a Docker answer) at the hardware
boundary, with the engine's own code reading them. Update with ``pytest --snapshot-update``
and look at the pictures before committing them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input
from textual.worker import WorkerCancelled, WorkerFailed

from engine.api import ChatSend, GetInfo, OnboardRequest, Pause, SetMode
from engine.config import Paths
from engine.facade import Engine
from nunet_tui.app import NunetApp
from tests.conftest import TEST_ADDRESS
from tests.doubles.host import RIG_GPUS, fixed_host

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]
OTHER_PEER = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW"

EngineFactory = Callable[..., Engine]


@pytest.fixture
def host_engine(node_home: Paths, tmp_path: Path) -> Iterator[EngineFactory]:
    """``host_engine(gpus=0)``: the real engine without the network, on a fixed host."""
    started: list[Engine] = []

    def start(gpus: Any = 0) -> Engine:
        host = fixed_host(tmp_path / "host", gpus=gpus)
        engine = Engine(node_home, network=False, probes=host.probes).start()
        started.append(engine)
        return engine

    yield start
    for engine in started:
        engine.close()


@pytest.fixture
def engine_client(host_engine: EngineFactory) -> Engine:
    """Every snapshot's engine: no GPU, Debian 12, Docker reachable."""
    return host_engine()


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
        busy = [
            w
            for w in pilot.app.workers
            if w.group in ("validate", "refresh", "mode", "history", "chat-list")
        ]
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
    app = NunetApp(client=engine_client)
    assert snap_compare(app, terminal_size=size, run_before=settled("ModeChooserScreen"))


@pytest.mark.parametrize("size", SIZES)
def test_provider_dashboard_not_onboarded(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    engine_client.call_blocking(SetMode(mode="provider"))
    app = NunetApp(client=engine_client)
    assert snap_compare(app, terminal_size=size, run_before=settled("ProviderDashboard"))


@pytest.mark.parametrize("size", SIZES)
def test_provider_dashboard_onboarded(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    _onboard(engine_client, local_discovery=True)
    app = NunetApp(client=engine_client)
    assert snap_compare(app, terminal_size=size, run_before=settled("ProviderDashboard"))


@pytest.mark.parametrize("size", SIZES)
def test_provider_dashboard_paused(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    _onboard(engine_client)
    engine_client.call_blocking(Pause())
    app = NunetApp(client=engine_client)
    assert snap_compare(app, terminal_size=size, run_before=settled("ProviderDashboard"))


@pytest.mark.parametrize("size", SIZES)
def test_provider_dashboard_gpu_rig(
    snap_compare: Any, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    engine = host_engine(gpus=RIG_GPUS)
    engine.call_blocking(SetMode(mode="provider"))
    app = NunetApp(client=engine)
    run_before = settled("ProviderDashboard", then=_gpu_lines_live)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_onboarding_form_with_errors(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    engine_client.call_blocking(SetMode(mode="provider"))
    app = NunetApp(client=engine_client)

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
    app = NunetApp(client=engine_client)
    assert snap_compare(app, terminal_size=size, run_before=settled("OnboardingScreen", keys=["o"]))


@pytest.mark.parametrize("size", SIZES)
def test_consumer_dashboard(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=engine_client)
    assert snap_compare(app, terminal_size=size, run_before=settled("ConsumerDashboard"))


@pytest.mark.parametrize("size", SIZES)
def test_help(snap_compare: Any, engine_client: Engine, size: tuple[int, int]) -> None:
    _onboard(engine_client)
    app = NunetApp(client=engine_client)
    assert snap_compare(app, terminal_size=size, run_before=settled("HelpScreen", keys=["?"]))


@pytest.mark.parametrize("size", SIZES)
def test_confirm_offboard(snap_compare: Any, engine_client: Engine, size: tuple[int, int]) -> None:
    _onboard(engine_client)
    app = NunetApp(client=engine_client)
    assert snap_compare(app, terminal_size=size, run_before=settled("ConfirmScreen", keys=["x"]))


def test_the_fixed_host_is_what_the_snapshots_show(engine_client: Engine) -> None:
    """The engine's real probes read the fixed host; identity and declared machine stay."""
    info = engine_client.call_blocking(GetInfo())
    assert info.machine.hostname == "rig-01"
    assert (info.machine.os, info.machine.kernel, info.machine.arch) == (
        "Debian GNU/Linux 12 (bookworm)",
        "6.1.0-28",
        "x86_64",
    )
    assert info.readiness.docker.ok
    assert not info.readiness.gpu_driver.ok


# --- peers, chat, network, GPUs -------------------------------------------------------------


async def _gpu_lines_live(pilot: Pilot[Any]) -> None:
    from nunet_tui.widgets.gpu_card import GpuSummary

    def live() -> bool:
        found = pilot.app.screen.query(GpuSummary)
        return bool(found) and found.first().feed.latest is not None

    await _until(pilot, live)


@pytest.mark.parametrize("size", SIZES)
def test_peers_without_network(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    engine_client.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=engine_client)
    assert snap_compare(app, terminal_size=size, run_before=settled("PeersScreen", keys=["p"]))


@pytest.mark.parametrize("size", SIZES)
def test_network_status_without_network(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    _onboard(engine_client)
    app = NunetApp(client=engine_client)
    assert snap_compare(app, terminal_size=size, run_before=settled("NetworkScreen", keys=["n"]))


@pytest.mark.parametrize("size", SIZES)
def test_chat_with_a_queued_conversation(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    """Messages to a peer that is not reachable are kept (queued); markup stays literal."""
    engine_client.call_blocking(SetMode(mode="consumer"))
    for text in ("hello from rig-01", "[bold red]x[/] and \x1b[2J stay as typed"):
        engine_client.call_blocking(ChatSend(peer_id=OTHER_PEER, text=text))
    app = NunetApp(client=engine_client)

    async def pick_it(pilot: Pilot[Any]) -> None:
        await _quiet(pilot)
        await _until(
            pilot, lambda: "stay as typed" in str(pilot.app.screen.query_one("#messages").render())
        )

    run_before = settled("ChatScreen", keys=["c"], then=pick_it)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_gpus_on_a_rig(
    snap_compare: Any, host_engine: EngineFactory, size: tuple[int, int]
) -> None:
    engine = host_engine(gpus=RIG_GPUS)
    engine.call_blocking(SetMode(mode="provider"))
    app = NunetApp(client=engine)

    async def cards(pilot: Pilot[Any]) -> None:
        await _until(pilot, lambda: len(pilot.app.screen.query("GpuCard")) == 2)

    run_before = settled("GpuScreen", keys=["g"], then=cards)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_gpus_without_a_gpu(
    snap_compare: Any, engine_client: Engine, size: tuple[int, int]
) -> None:
    engine_client.call_blocking(SetMode(mode="provider"))
    app = NunetApp(client=engine_client)

    async def reason(pilot: Pilot[Any]) -> None:
        await _until(pilot, lambda: pilot.app.screen.query_one("#no-gpu").display)

    run_before = settled("GpuScreen", keys=["g"], then=reason)
    assert snap_compare(app, terminal_size=size, run_before=run_before)
