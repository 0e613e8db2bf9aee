"""Real daemons on 127.0.0.1, driven through their control socket and the real CLI: shared by
the end-to-end tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import api
from engine.config import Paths
from engine.control_client import ControlClient
from engine.payments.keystore import SANDBOX_KDF_ENV
from nunet_tui.cli.zygote import ForkedChild
from tests import forkserver
from tests.conftest import FETCH_LOOPBACK_ENV, MACHINE_TOML, REPO, cli_env, make_home, run_cli

HEARTBEAT_ENV = {
    "NUNET_NETWORK_HEARTBEAT_INTERVAL_S": "1",
    # A test daemon's wallets are throwaway: created with the sandbox's cheap key derivation
    # (engine/payments/keystore.py SANDBOX_KDF_ENV), as `nunet-tui demo` creates its own. The
    # full Argon2id cost is tested in tests/unit/test_keystore.py; here it was 5 s of every
    # paid pair.
    SANDBOX_KDF_ENV: "1",
    **FETCH_LOOPBACK_ENV,
}


class Daemon:
    """A real `nunet-tui daemon` process (forked from the suite's zygote, tests/forkserver.py),
    queried through its control socket; ``cli`` runs the real command line against it."""

    def __init__(self, home: Paths, env: dict[str, str], netns: str = "") -> None:
        self.home = home
        self.env = env
        self.netns = netns  # a network namespace to run in (tests/slow_link.py)
        self.proc: ForkedChild | subprocess.Popen[bytes] | None = None
        self.client: ControlClient | None = None
        self.stderr_path = Path(str(home.home)) / "daemon.stderr"

    def start(self, timeout: float = 30.0) -> Daemon:
        args = ["--home", str(self.home.home), "daemon"]
        stderr = os.open(self.stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            if "PYTHONPATH" in self.env or self.netns:
                # A start-up hook (a sitecustomize.py on the path, tests/adversarial/
                # overbilling_hook) runs only in a new interpreter; a namespace is entered
                # before it starts.
                wrap = ["ip", "netns", "exec", self.netns] if self.netns else []
                self.proc = subprocess.Popen(
                    [*wrap, sys.executable, "-m", "nunet_tui", *args],
                    cwd=REPO,
                    env=cli_env(self.env),
                    stdout=devnull,
                    stderr=stderr,
                )
            else:
                self.proc = forkserver.fork(
                    args, env=cli_env(self.env), stdout=devnull, stderr=stderr, name="nunet-daemon"
                )
        finally:
            os.close(stderr)
            os.close(devnull)
        # Ready when the network listens: its control socket then shows an address.
        self.client = wait_for(self._connect, f"{self.home.home} never answered", timeout)
        wait_for(self.addrs, f"{self.home.home} never listened", timeout)
        return self

    def _connect(self) -> ControlClient | None:
        self._check_running()
        try:
            return ControlClient(self.home.control_socket)
        except OSError:
            return None

    def _check_running(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, (
            "daemon exited: " + self.stderr_path.read_text(errors="replace")[-2000:]
        )

    def call(self, command: api.Command, timeout: float = 30.0) -> Any:
        """One command through the control socket (what the CLI sends, without its process)."""
        assert self.client is not None, "the daemon is not started"
        return self.client.call_blocking(command, timeout=timeout)

    def cli(self, *args: str) -> Any:
        result = run_cli(*args, "--json", home=self.home)
        assert result.returncode == 0, (args, result.stderr)
        return json.loads(result.stdout)

    def listed(self, peer_id: str) -> dict[str, Any] | None:
        """``peer_id``'s row in this node's ``peer list`` (None: not listed)."""
        for peer in self.cli("peer", "list")["peers"]:
            if peer["peer_id"] == peer_id:
                return dict(peer)
        return None

    def addrs(self) -> list[str]:
        self._check_running()
        return [str(addr) for addr in self.call(api.GetPeerSelf()).addrs]

    @property
    def peer_id(self) -> str:
        return str(self.call(api.GetPeerSelf()).peer_id)

    def stop(self, kill: bool = False) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.proc is not None:
            if self.proc.poll() is None:
                if kill:
                    self.proc.kill()
                else:
                    self.proc.terminate()
                self.proc.wait(15)
            if isinstance(self.proc, ForkedChild):
                self.proc.close()
        self.proc = None


def wait_for(check: Callable[[], Any], message: str, timeout: float = 20.0) -> Any:
    """Call ``check`` until it returns something true; soon at first (most waits are short),
    then every 0.25 s."""
    deadline = time.monotonic() + timeout
    pause = 0.02
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(pause)
        pause = min(0.25, pause * 1.5)
    raise AssertionError(message)


def spawner(root: Path, started: list[Daemon]) -> Callable[..., Daemon]:
    """``spawn(name, seed, bootstrap=, channel=, extra_toml=, env=, netns=)``: a started
    daemon in ``root/name``, appended to ``started`` (the caller stops them)."""

    def spawn(
        name: str,
        seed: int,
        bootstrap: str | None = None,
        channel: str = "",
        extra_toml: str = "",
        env: dict[str, str] | None = None,
        netns: str = "",
    ) -> Daemon:
        home = make_home(
            root / name, seed=bytes([seed]) * 32, machine_toml=MACHINE_TOML + extra_toml
        )
        env = {**HEARTBEAT_ENV, **(env or {})}
        if bootstrap:
            env["NUNET_NETWORK_BOOTSTRAP"] = bootstrap
        if channel:
            env["NUNET_NETWORK_CHANNEL"] = channel
        daemon = Daemon(home, env, netns).start()
        started.append(daemon)
        return daemon

    return spawn


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []
    yield spawner(tmp_path, started)
    for daemon in started:
        daemon.stop(kill=True)
