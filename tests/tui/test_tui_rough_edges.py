"""What a new user tripped over in the app (issue 14 §2), each on a real embedded engine with
Textual's Pilot: the onboarding form's defaults, `q` with jobs running, the cancel dialog's
buttons, a screenshot with no Downloads folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Input

from engine import api
from engine.api import SetMode, WalletNew
from engine.config import Paths
from engine.domain.spec import JobSpec
from engine.facade import Engine
from engine.payments.keystore import PASSPHRASE_ENV
from nunet_tui import app_guards
from nunet_tui.app import NunetApp
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.screens.consumer_dashboard import ConsumerDashboard
from nunet_tui.screens.onboarding import OnboardingScreen
from nunet_tui.screens.provider_dashboard import ProviderDashboard
from tests.conftest import MACHINE_TOML, make_home
from tests.daemons.test_wallet import PASSPHRASE
from tests.pilot import anyio_backend, until
from tests.tui.test_snapshots import host_engine
from tests.tui.test_snapshots_jobs import NOW, stored_jobs

__all__ = ["anyio_backend", "host_engine", "stored_jobs"]

pytestmark = pytest.mark.anyio
SIZE = (100, 32)
SANDBOX_CHANNEL = "nunet-demo-test"


@pytest.fixture
def sandbox_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Paths:
    """A node on the demo's channel with a wallet of its own, as the sandbox makes them."""
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)
    toml = MACHINE_TOML + f'channel = "{SANDBOX_CHANNEL}"\n[payments]\nkeystore = "file"\n'
    return make_home(tmp_path / "home", machine_toml=toml)


async def test_onboarding_defaults_to_the_nodes_channel_and_its_own_wallet(
    sandbox_home: Paths,
) -> None:
    engine = Engine(sandbox_home, network=False).start()
    try:
        address = engine.call_blocking(WalletNew(), timeout=60).wallet.address
        engine.call_blocking(SetMode(mode="provider"))
        app = NunetApp(client=engine)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, ProviderDashboard))
            await until(pilot, lambda: app.node is not None)
            await pilot.press("o")
            await until(pilot, lambda: isinstance(app.screen, OnboardingScreen))
            form = app.screen
            assert form.query_one("#channel", Input).value == SANDBOX_CHANNEL
            await until(pilot, lambda: form.query_one("#address", Input).value == address)
            # Prefilled is not typed: no problem is shown for a field the user never touched.
            assert "address" not in form.touched
    finally:
        engine.close()


async def test_a_typed_address_is_never_overwritten_by_the_prefill(sandbox_home: Paths) -> None:
    engine = Engine(sandbox_home, network=False).start()
    try:
        engine.call_blocking(SetMode(mode="provider"))
        # No wallet: nothing to prefill, and the field stays the user's.
        app = NunetApp(client=engine)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, ProviderDashboard))
            await until(pilot, lambda: app.node is not None)
            await pilot.press("o")
            await until(pilot, lambda: isinstance(app.screen, OnboardingScreen))
            for worker in [w for w in app.workers if w.group == "prefill"]:
                await worker.wait()
            assert app.screen.query_one("#address", Input).value == ""
    finally:
        engine.close()


async def test_q_with_a_job_running_asks_first(stored_jobs: Paths, host_engine: Any) -> None:
    engine = host_engine()
    engine.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=engine, clock=lambda: NOW)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ConsumerDashboard))
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, app_guards.QuitConfirm))
        question = app.screen
        assert "still running" in str(question.query_one("#question").render())
        labels = [str(b.label) for b in question.query(Button).results(Button)]
        assert labels == ["Quit (y)", "Stay (n)"]
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, ConsumerDashboard))
        assert app.is_running
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, app_guards.QuitConfirm))
        await pilot.press("y")
        await until(pilot, lambda: not app.is_running)


async def test_q_with_nothing_running_quits_at_once(host_engine: Any) -> None:
    engine = host_engine()
    engine.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=engine)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ConsumerDashboard))
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)


async def test_a_cancel_question_does_not_offer_two_cancels(host_engine: Any) -> None:
    engine = host_engine()
    engine.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=engine)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ConsumerDashboard))
        app.push_screen(ConfirmScreen("Cancel job j1?", confirm_label="Cancel job", danger=True))
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        labels = [str(b.label) for b in app.screen.query(Button).results(Button)]
        assert labels == ["Cancel job (y)", "Back (n)"]


async def test_screenshot_without_downloads_goes_home_and_says_where(
    host_engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DOWNLOAD_DIR", str(home / "Downloads"))  # missing
    engine = host_engine()
    engine.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=engine)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ConsumerDashboard))
        app.deliver_screenshot("shot.svg")
        await until(pilot, lambda: (home / "shot.svg").exists())
        assert (home / "shot.svg").read_text().startswith("<svg")


async def test_screenshot_into_a_missing_folder_says_why(host_engine: Any, tmp_path: Path) -> None:
    engine = host_engine()
    engine.call_blocking(SetMode(mode="consumer"))
    app = NunetApp(client=engine)
    missing = tmp_path / "no-such-folder"
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ConsumerDashboard))
        assert app.deliver_screenshot("shot.svg", str(missing)) is None
        await pilot.pause()
        messages = [n.message for n in app._notifications]
        assert any(f"{missing} does not exist" in m for m in messages), messages
        assert not missing.exists()


def test_the_quit_question_says_what_quitting_does_where_the_app_runs() -> None:
    """In the demo the app attaches to the sandbox's consumer daemon, but quitting ends the
    sandbox: it said "the daemon keeps running them", then deleted jobs and results."""
    job = api.JobInfo(
        job_id="a" * 12,
        role="consumer",
        state="running",
        provider="p",
        consumer="c",
        spec=JobSpec(framework="scikit-learn"),
    )

    def detail(**kwargs: Any) -> str:
        return str(app_guards.quit_question([job], **kwargs).detail)

    removed = detail(embedded=False, demo={"root": "/tmp/d", "removed_on_exit": True})
    assert "ends the demo" in removed and "deleted, jobs and results included" in removed
    kept = detail(embedded=False, demo={"root": "/tmp/d", "removed_on_exit": False})
    assert "stay in /tmp/d" in kept and "keeps running" not in kept
    assert "keeps running them" in detail(embedded=False)
    assert "stops this node" in detail(embedded=True)
    assert app_guards.quit_question([job], embedded=False, demo={}).danger
