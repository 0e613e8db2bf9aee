"""Real daemons on 127.0.0.1, driven through the real CLI: shared by the end-to-end tests."""

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

from engine.config import Paths
from engine.payments.keystore import SANDBOX_KDF_ENV
from tests.conftest import FETCH_LOOPBACK_ENV, MACHINE_TOML, REPO, make_home, run_cli

HEARTBEAT_ENV = {
    "NUNET_NETWORK_HEARTBEAT_INTERVAL_S": "1",
    # A test daemon's wallets are throwaway: created with the sandbox's cheap key derivation
    # (engine/payments/keystore.py SANDBOX_KDF_ENV), as `nunet-tui demo` creates its own. The
    # full Argon2id cost is tested in tests/test_keystore.py; here it was 5 s of every paid pair.
    SANDBOX_KDF_ENV: "1",
    **FETCH_LOOPBACK_ENV,
}


class Daemon:
    def __init__(self, home: Paths, env: dict[str, str]) -> None:
        self.home = home
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr_path = Path(str(home.home)) / "daemon.stderr"

    def start(self) -> Daemon:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nunet_tui", "--home", str(self.home.home), "daemon"],
            cwd=REPO,
            env={**os.environ, **self.env},
            stdout=subprocess.DEVNULL,
            stderr=open(self.stderr_path, "ab"),  # noqa: SIM115 - the child owns it
        )
        # Ready when the network listens: `peer self` then shows an address.
        wait_for(lambda: self.addrs(), f"{self.home.home} never listened", timeout=30)
        return self

    def cli(self, *args: str) -> Any:
        result = run_cli(*args, "--json", home=self.home)
        assert result.returncode == 0, (args, result.stderr)
        return json.loads(result.stdout)

    def addrs(self) -> list[str]:
        assert self.proc is not None and self.proc.poll() is None, (
            "daemon exited: " + self.stderr_path.read_text(errors="replace")[-2000:]
        )
        result = run_cli("--attach", "peer", "self", "--json", home=self.home)
        return json.loads(result.stdout)["addrs"] if result.returncode == 0 else []

    @property
    def peer_id(self) -> str:
        return str(self.cli("peer", "self")["peer_id"])

    def stop(self, kill: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            self.proc.wait(15)
        self.proc = None


def wait_for(check: Callable[[], Any], message: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(message)


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []

    def spawn(
        name: str,
        seed: int,
        bootstrap: str | None = None,
        channel: str = "",
        extra_toml: str = "",
        env: dict[str, str] | None = None,
    ) -> Daemon:
        home = make_home(
            tmp_path / name, seed=bytes([seed]) * 32, machine_toml=MACHINE_TOML + extra_toml
        )
        env = {**HEARTBEAT_ENV, **(env or {})}
        if bootstrap:
            env["NUNET_NETWORK_BOOTSTRAP"] = bootstrap
        if channel:
            env["NUNET_NETWORK_CHANNEL"] = channel
        daemon = Daemon(home, env).start()
        started.append(daemon)
        return daemon

    yield spawn
    for daemon in started:
        daemon.stop(kill=True)
