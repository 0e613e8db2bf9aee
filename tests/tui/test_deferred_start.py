"""The TUI's cold start: the engine is chosen before the first frame and opened after it.

engine/connect.py ``prepare_client`` makes open_client's choice cheaply (the home's lock, or
a daemon answering); engine/deferred.py ``DeferredClient`` opens it on ``start()``; the app
starts it once its first frame is up; nunet_tui/cli/main.py ``_app_only`` lets the plain
``nunet-tui`` reach the app without loading the commands' modules. Real homes, a real
embedded engine, a real daemon where one is needed.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.api import GetInfo, SetMode
from engine.client import EngineClient
from engine.config import Paths
from engine.connect import prepare_client
from engine.deferred import DeferredClient, PendingEngine
from engine.errors import EngineError
from engine.homelock import HomeLock
from nunet_tui.app import NunetApp
from nunet_tui.cli.main import _app_only
from nunet_tui.screens.consumer_dashboard import ConsumerDashboard
from nunet_tui.screens.provider_dashboard import ProviderDashboard
from tests.pilot import anyio_backend, on_screen, until

__all__ = ["anyio_backend"]

REPO = Path(__file__).resolve().parents[2]


def _lock_is_free(paths: Paths) -> bool:
    probe = HomeLock(paths.lock_file)
    if probe.try_acquire():
        probe.release()
        return True
    return False


def test_prepare_takes_the_lock_and_opens_only_on_start(node_home: Paths) -> None:
    client = DeferredClient(prepare_client(node_home, network=False))
    try:
        assert client.embedded
        assert not _lock_is_free(node_home)  # chosen now: no one else starts an engine here
        with pytest.raises(EngineError) as caught:
            client.call_blocking(GetInfo(), timeout=0.2)
        assert caught.value.code == "timeout"  # not opened until start()
        client.start()
        assert client.call_blocking(GetInfo(), timeout=30).peer_id
        assert client.open_error is None
    finally:
        client.close()
    assert _lock_is_free(node_home)


def test_closed_before_start_frees_the_home(node_home: Paths) -> None:
    client = DeferredClient(prepare_client(node_home, network=False))
    client.close()
    assert _lock_is_free(node_home)
    client.start()  # too late: nothing opens
    with pytest.raises(EngineError):
        client.call_blocking(GetInfo(), timeout=1)


def test_attach_without_a_daemon_is_refused_before_anything_opens(node_home: Paths) -> None:
    with pytest.raises(EngineError) as caught:
        prepare_client(node_home, attach=True)
    assert caught.value.code == "no_daemon"
    assert _lock_is_free(node_home)


def test_an_engine_that_cannot_open_fails_every_call_with_its_reason(node_home: Paths) -> None:
    pending = prepare_client(node_home, network=False)

    def broken() -> EngineClient:
        pending.release()
        raise EngineError("bad_home", "the home is broken")

    client = DeferredClient(PendingEngine(embedded=True, open=broken, release=pending.release))
    client.start()
    with pytest.raises(EngineError) as caught:
        client.call_blocking(GetInfo(), timeout=10)
    assert caught.value.code == "bad_home"
    assert client.open_error is not None and client.open_error.message == "the home is broken"
    client.close()


def test_a_call_cancelled_while_waiting_leaves_the_opening_alone(node_home: Paths) -> None:
    """An app quitting during start-up cancels its workers; the engine must still open and
    close cleanly afterwards (asyncio.wrap_future alone would cancel the opening)."""
    client = DeferredClient(prepare_client(node_home, network=False))

    async def cancel_a_waiting_call() -> None:
        task = asyncio.ensure_future(client.call(GetInfo()))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(cancel_a_waiting_call())
        client.start()
        assert client.call_blocking(GetInfo(), timeout=30).peer_id
    finally:
        client.close()
    assert _lock_is_free(node_home)


@pytest.mark.anyio
async def test_the_app_paints_before_the_engine_opens_then_reaches_its_dashboard(
    node_home: Paths,
) -> None:
    from engine.facade import Engine

    engine = Engine(node_home, network=False).start()
    engine.call_blocking(SetMode(mode="provider"))
    engine.close()
    client = DeferredClient(prepare_client(node_home, network=False))
    at_first_frame: list[tuple[str, str]] = []

    class Recording(NunetApp):
        def on_ready(self) -> None:
            at_first_frame.append((type(self.screen).__name__, self.engine_state))
            super().on_ready()

    try:
        app = Recording(client=client)
        async with app.run_test(size=(100, 32)) as pilot:
            await on_screen(pilot, ProviderDashboard)
            await until(pilot, lambda: app.engine_state == "ready" and app.node is not None)
            # The app subscribed before the engine existed: its events still arrive.
            await client.call(SetMode(mode="consumer"))
            await on_screen(pilot, ConsumerDashboard)
    finally:
        client.close()
    assert at_first_frame == [("StartScreen", "starting")]
    assert _lock_is_free(node_home)


@pytest.mark.parametrize(
    ("argv", "app"),
    [
        ([], True),
        (["--home", "/h", "--attach", "--listen", "/ip4/127.0.0.1/tcp/0"], True),
        (["--home=/h", "--json"], True),
        (["--hom", "/h"], True),  # the same abbreviations as the full parser
        (["--h"], False),  # ambiguous there (--help, --home): the full parser says so
        (["-h"], False),
        (["--version"], False),
        (["--home"], False),  # its usage error comes from the full parser
        (["info"], False),
        (["--home", "/h", "job", "list"], False),
        (["--", "info"], False),
        (["--bogus"], False),
    ],
)
def test_only_a_bare_app_launch_skips_the_full_parser(argv: list[str], app: bool) -> None:
    args = _app_only(argv)
    assert (args is not None) == app
    if args is not None:
        assert args.command is None


def test_the_bare_launch_loads_no_command_module_nor_the_engine_before_the_app() -> None:
    """What the first frame waits for: the plain launch reaches App.run without trio, the
    node, the commands' modules or the full parser."""
    code = textwrap.dedent(
        """
        import sys, tempfile
        from textual.app import App

        def run(self, *args, **kwargs):
            heavy = sorted(
                name for name in sys.modules
                if name.split(".")[0] in ("trio", "libp2p", "psutil", "docker", "pycardano")
                or name in ("engine.facade", "engine.node", "engine.control", "tarfile")
                or name.startswith("nunet_tui.cli.") and name not in (
                    "nunet_tui.cli.main", "nunet_tui.cli.output")
                or name.startswith("nunet_tui.screens.") and name not in (
                    "nunet_tui.screens.base", "nunet_tui.screens.start")
            )
            print("HEAVY", heavy)

        App.run = run
        from nunet_tui.cli.main import main
        sys.exit(main(["--home", tempfile.mkdtemp()]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout, out.stdout


def test_a_bad_address_is_the_engines_error_on_screen_then_one_line_and_exit_1(
    tmp_path: Path,
) -> None:
    """The first frame does not wait for the multiaddr check: the engine makes it as it
    opens, the start screen says why, and the command still ends with the line and 1."""
    code = textwrap.dedent(
        """
        import sys
        from textual.app import App

        _run = App.run

        def run(self, *args, **kwargs):
            first_frame = type(self).on_ready

            def on_ready(app):
                first_frame(app)

                def poll():
                    if app.engine_state == "error":
                        print("ON SCREEN", app.startup_error, flush=True)
                        app.exit()

                app.set_interval(0.05, poll)

            type(self).on_ready = on_ready
            return _run(self, headless=True, size=(100, 32))

        App.run = run
        from nunet_tui.cli.main import main
        sys.exit(main(sys.argv[1:]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "--home", str(tmp_path / "home"), "--listen", "bogus"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "ON SCREEN network.listen: 'bogus' is not a multiaddr" in out.stdout, out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "network.listen: 'bogus' is not a multiaddr" in lines[0], lines
