"""Pilot tests: the real app on a real embedded engine, driven from the keyboard."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, Static

from engine.api import CheckOnboarding, GetInfo, OnboardRequest, SetMode
from engine.control_client import DAEMON_GONE
from engine.errors import EngineError
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.screens.consumer_dashboard import ConsumerDashboard
from nunet_tui.screens.help import HelpScreen
from nunet_tui.screens.mode_chooser import ModeChooserScreen
from nunet_tui.screens.onboarding import OnboardingScreen
from nunet_tui.screens.provider_dashboard import ProviderDashboard
from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.meter import Meter
from tests.conftest import MACHINE_TOML, TEST_ADDRESS, make_home
from tests.pilot import FakeEngineClient, anyio_backend, on_screen, settle, text_of, until

__all__ = ["anyio_backend"]

SIZE = (100, 32)
pytestmark = pytest.mark.anyio


def onboard(engine: Engine, memory_mb: int = 8000, cpu_mhz: int = 3000) -> None:
    engine.call_blocking(OnboardRequest(memory_mb=memory_mb, cpu_mhz=cpu_mhz, address=TEST_ADDRESS))


@pytest.fixture
def provider_engine(engine_client: Engine) -> Engine:
    engine_client.call_blocking(SetMode(mode="provider"))
    return engine_client


async def test_first_run_asks_for_the_mode_and_remembers_it(engine_client: Engine) -> None:
    app = NunetApp(client=engine_client)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ModeChooserScreen)
        assert engine_client.call_blocking(GetInfo()).mode is None
        await pilot.press("down", "enter")  # the second choice: consumer
        await on_screen(pilot, ConsumerDashboard)
        assert app.current_mode == "consumer"
        assert engine_client.call_blocking(GetInfo()).mode == "consumer"


async def test_a_stored_mode_opens_straight_on_its_dashboard(provider_engine: Engine) -> None:
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=SIZE) as pilot:
        screen = await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: app.node is not None)
        assert "not onboarded" in text_of(screen, "#node-state")
        assert "AMD EPYC 7543" in text_of(screen, "#machine-line")
        assert screen.query_one("#ram-meter", Meter).total == 16_000
        assert screen.query_one("#cpu-meter", Meter).total == 5_000


async def test_onboard_entirely_from_the_keyboard(engine_client: Engine) -> None:
    app = NunetApp(client=engine_client)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ModeChooserScreen)
        await pilot.press("p")
        await on_screen(pilot, ProviderDashboard)
        await pilot.press("o")
        form = await on_screen(pilot, OnboardingScreen)
        assert form.focused is not None and form.focused.id == "memory_mb"
        await pilot.press(*"8000", "tab", *"3000", "tab", "tab", *TEST_ADDRESS)
        await settle(pilot)
        await pilot.press("enter")
        dashboard = await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: "accepting jobs" in text_of(dashboard, "#node-state"))
        assert dashboard.query_one("#ram-meter", Meter).used == 8_000
        assert dashboard.query_one("#cpu-meter", Meter).used == 3_000
        assert "nunet-test" in dashboard.query_one("#offer-table", KeyTable).plain_text()
        onboarded = engine_client.call_blocking(GetInfo()).onboarded
        assert onboarded is not None
        assert (onboarded.memory_mb, onboarded.cpu_mhz, onboarded.address) == (
            8000,
            3000,
            TEST_ADDRESS,
        )


async def _open_onboarding(app: NunetApp, pilot: Any) -> OnboardingScreen:
    """From the provider dashboard, once the node is read: o, the onboarding form."""
    await on_screen(pilot, ProviderDashboard)
    await until(pilot, lambda: app.node is not None)
    await pilot.press("o")
    form: OnboardingScreen = await on_screen(pilot, OnboardingScreen)
    return form


async def test_the_form_validates_as_you_type(provider_engine: Engine) -> None:
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=SIZE) as pilot:
        form = await _open_onboarding(app, pilot)
        # Nothing touched yet: no shouting.
        await settle(pilot)
        assert not form.query_one("#memory_mb-problems").has_class("-shown")

        await pilot.press(*"99999")
        await until(pilot, lambda: "requested but only" in text_of(form, "#memory_mb-problems"))
        assert "memory: 99,999 MB requested" in text_of(form, "#memory_mb-problems")
        assert form.query_one("#memory_mb-field").has_class("-invalid")

        await pilot.press("tab", "tab", "tab", *"addr1notanaddress")
        await until(pilot, lambda: "address:" in text_of(form, "#address-problems"))
        # The memory message is still there, the CPU field was never touched.
        assert "requested but only" in text_of(form, "#memory_mb-problems")
        assert not form.query_one("#cpu_mhz-problems").has_class("-shown")

        # Fixing the value makes its message go away.
        form.query_one("#memory_mb").value = "8000"
        await until(pilot, lambda: not form.query_one("#memory_mb-problems").has_class("-shown"))

        # Submitting with problems left keeps the form open and onboards nothing.
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert isinstance(app.screen, OnboardingScreen)
        assert form.query_one("#cpu_mhz-problems").has_class("-shown")
        assert provider_engine.call_blocking(GetInfo()).onboarded is None


async def test_the_placeholders_suggest_values_the_form_accepts(provider_engine: Engine) -> None:
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=SIZE) as pilot:
        form = await _open_onboarding(app, pilot)
        # It said "e.g. 4000": below the 4,096 MB the form then asked for.
        for name in ("memory_mb", "cpu_mhz"):
            suggested = re.findall(r"\d+", form.query_one(f"#{name}", Input).placeholder)[0]
            form.query_one(f"#{name}", Input).value = suggested
            await settle(pilot)
            assert "minimum" not in text_of(form, f"#{name}-problems"), suggested


async def test_a_reconnect_clears_the_daemon_gone_problem(provider_engine: Engine) -> None:
    """The form said "the daemon closed the connection" until something was typed, long
    after the app had reconnected."""
    gone = EngineError(DAEMON_GONE, "the daemon closed the connection (stopped or restarted)")
    client = FakeEngineClient({CheckOnboarding: gone}, delegate=provider_engine)
    app = NunetApp(client=client)
    async with app.run_test(size=SIZE) as pilot:
        form = await _open_onboarding(app, pilot)
        await until(pilot, lambda: "closed the connection" in text_of(form, "#general-problems"))
        app.engine_state = "offline"
        del client.replies[CheckOnboarding]  # the daemon is back
        app.engine_state = "ready"  # what the app's DaemonConnection(online) handler sets
        await until(
            pilot, lambda: "closed the connection" not in text_of(form, "#general-problems")
        )


async def test_pause_resume_and_offboard_ask_first(provider_engine: Engine) -> None:
    onboard(provider_engine)
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=SIZE) as pilot:
        dashboard = await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: "accepting jobs" in text_of(dashboard, "#node-state"))

        await pilot.press("space")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("n")  # changed my mind
        await on_screen(pilot, ProviderDashboard)
        assert provider_engine.call_blocking(GetInfo()).onboarded.state == "active"

        await pilot.press("space")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: "paused" in text_of(dashboard, "#node-state"))
        assert provider_engine.call_blocking(GetInfo()).onboarded.state == "paused"

        await pilot.press("space")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("enter")  # the focused button: Resume
        await until(pilot, lambda: "accepting jobs" in text_of(dashboard, "#node-state"))
        assert provider_engine.call_blocking(GetInfo()).onboarded.state == "active"

        await pilot.press("x")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("enter")  # offboarding is dangerous: Cancel has the focus
        await on_screen(pilot, ProviderDashboard)
        assert provider_engine.call_blocking(GetInfo()).onboarded is not None

        await pilot.press("x")
        await on_screen(pilot, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: "not onboarded" in text_of(dashboard, "#node-state"))
        assert provider_engine.call_blocking(GetInfo()).onboarded is None


async def test_resources_form_is_prefilled_and_changes_the_amounts(
    provider_engine: Engine,
) -> None:
    onboard(provider_engine)
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=SIZE) as pilot:
        dashboard = await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: app.onboarding is not None)
        await pilot.press("o")
        form = await on_screen(pilot, OnboardingScreen)
        assert form.query_one("#memory_mb").value == "8000"
        assert form.query_one("#address").disabled
        form.query_one("#memory_mb").value = ""
        await pilot.press(*"10000", "enter")
        await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: dashboard.query_one("#ram-meter", Meter).used == 10_000)
        assert provider_engine.call_blocking(GetInfo()).onboarded.memory_mb == 10_000


async def test_m_switches_mode_and_the_engine_remembers(provider_engine: Engine) -> None:
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ProviderDashboard)
        await pilot.press("m")
        await on_screen(pilot, ConsumerDashboard)
        await until(pilot, lambda: provider_engine.call_blocking(GetInfo()).mode == "consumer")
        await pilot.press("m")
        await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: provider_engine.call_blocking(GetInfo()).mode == "provider")


async def test_question_mark_opens_help_and_escape_goes_back(provider_engine: Engine) -> None:
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: app.node is not None)
        await pilot.press("question_mark")
        help_screen = await on_screen(pilot, HelpScreen)
        keys = " ".join(str(s.render()) for s in help_screen.query(Static))
        assert "Onboard this machine" in keys
        assert "ctrl+p" in keys
        await pilot.press("escape")
        await on_screen(pilot, ProviderDashboard)


async def test_help_lists_each_key_once_on_every_screen(provider_engine: Engine) -> None:
    """A binding of several keys was a help line per key: the same line twice."""
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: app.node is not None)
        for key in ("", "p", "j", "n", "c", "w", "e", "g"):
            if key:
                await pilot.press(key)
                await settle(pilot)
            under = type(app.screen).__name__
            await pilot.press("question_mark")
            help_screen = await on_screen(pilot, HelpScreen)
            texts = [text for _, text in help_screen.under_keys]
            assert len(texts) == len(set(texts)), (under, help_screen.under_keys)
            here = {k for keys, _ in help_screen.under_keys for k in keys.split(" or ")}
            there = {k for keys, _ in help_screen.everywhere_keys for k in keys.split(" or ")}
            assert not here & there, (under, here & there)
            await pilot.press("escape")
            await settle(pilot)
            if key:
                await pilot.press("escape")
                await on_screen(pilot, ProviderDashboard)


async def test_command_palette_switches_mode(provider_engine: Engine) -> None:
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=SIZE) as pilot:
        await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: app.node is not None)
        await pilot.press("ctrl+p")
        await pilot.pause(0.1)
        await pilot.press(*"consumer mode")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await on_screen(pilot, ConsumerDashboard)
        await until(pilot, lambda: provider_engine.call_blocking(GetInfo()).mode == "consumer")


async def test_dashboard_follows_changes_made_elsewhere(provider_engine: Engine) -> None:
    """An onboarding from the CLI (same engine) reaches the dashboard as an event."""
    app = NunetApp(client=provider_engine)
    async with app.run_test(size=SIZE) as pilot:
        dashboard = await on_screen(pilot, ProviderDashboard)
        await until(pilot, lambda: app.node is not None)
        await asyncio.to_thread(onboard, provider_engine, 6000, 2500)
        await until(pilot, lambda: dashboard.query_one("#ram-meter", Meter).used == 6_000)
        assert "accepting jobs" in text_of(dashboard, "#node-state")


async def test_peer_text_is_shown_literally(tmp_path: Path) -> None:
    """Markup in untrusted text (here a hostname) is printed, never interpreted."""
    hostile = MACHINE_TOML.replace('hostname = "rig-01"', 'hostname = "[b red]rig[/] \\u001b[31m"')
    home = make_home(tmp_path / "home", machine_toml=hostile)
    engine = Engine(home).start()
    try:
        engine.call_blocking(SetMode(mode="provider"))
        app = NunetApp(client=engine)
        async with app.run_test(size=SIZE) as pilot:
            dashboard = await on_screen(pilot, ProviderDashboard)
            await until(pilot, lambda: app.node is not None)
            line = text_of(dashboard, "#machine-line")
            assert "[b red]rig[/]" in line
            assert "\x1b" not in line
    finally:
        engine.close()
