"""A provider behind a slow, lossy link: its own network namespace, reachable only through a
relay of ours (tests/latency_relay.py) that delays and cuts what crosses it.

The namespace has nothing but loopback, so the provider's daemon can reach the consumer, the
ledger and the oracle only through the relay's ports inside it, and nobody outside can dial it
at all (as behind a home router): every connection crosses the relay, and one the relay cut is
dialled again by the provider.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING

import pytest

from tests.conftest import REPO

if TYPE_CHECKING:
    from tests.daemon_harness import Daemon
    from tests.daemons.test_payments_e2e import Market

_names = count()


@contextlib.contextmanager
def namespace() -> Iterator[str]:
    """A fresh network namespace with loopback up, deleted at the end."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    name = f"nunet-slow-{os.getpid()}-{next(_names)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


@dataclass
class Relay:
    proc: subprocess.Popen[str]
    ports: list[int]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@contextlib.contextmanager
def relay(*routes: str, seed: int = 1) -> Iterator[Relay]:
    """tests/latency_relay.py's routes (its docstring says how to write one), as a process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.latency_relay", *routes, "--seed", str(seed)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "the relay did not start"
        running = Relay(proc, json.loads(line)["ports"])
        yield running
    finally:
        if proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@dataclass
class SlowPair:
    """A paid consumer on this side and a provider behind the slow link."""

    consumer: Daemon
    provider: Daemon
    relay: Relay
    scripts: str  # the scripts' server as the provider reaches it (through the relay)
    consumer_address: str
    provider_address: str


def _port(url_or_addr: str) -> int:
    match = re.search(r"(?:tcp/|:)(\d+)(?:/|$)", url_or_addr)
    assert match, url_or_addr
    return int(match.group(1))


def _via(url: str, port: int) -> str:
    """``url`` with its port replaced by the relay's."""
    return re.sub(r"^(https?://127\.0\.0\.1:)\d+", rf"\g<1>{port}", url)


@contextlib.contextmanager
def paid_pair_behind_link(
    market: Market,
    scripts: str,
    link: str,
    *,
    slots: int,
    services_link: str = "",
    env: dict[str, str] | None = None,
    provider_env: dict[str, str] | None = None,
    consumer_funds: tuple[int, int, int] = (4, 40, 5),
    provider_ada: int = 100,
    consumer_port: int = 0,
) -> Iterator[SlowPair]:
    """A consumer daemon here and a provider daemon in a new namespace, onboarded and seen by
    the consumer; ``link``: the relay's options between the two peers (latency_relay.py),
    ``services_link``: towards the ledger, the oracle and ``scripts`` (none: direct);
    ``consumer_funds``: (faucet outputs, ADA each, NTX each); ``consumer_port``: the
    consumer's libp2p port (a restarted consumer must come back where the relay points)."""
    from tests.conftest import TEST_ADDRESS
    from tests.daemon_harness import wait_for
    from tests.daemons.test_jobs_e2e import PROCESS_JOBS
    from tests.daemons.test_payments_e2e import PASSPHRASE, PRICES

    env = {**PASSPHRASE, **(env or {})}
    listen = (
        {"NUNET_NETWORK_LISTEN": f"/ip4/127.0.0.1/tcp/{consumer_port}"} if consumer_port else {}
    )
    consumer = market.spawn(
        "consumer", 41, extra_toml=market.toml() + PROCESS_JOBS, env={**env, **listen}
    )
    extra = f",{services_link}" if services_link else ""
    with namespace() as ns:
        consumer_addr = consumer.addrs()[0]
        routes = [
            f"{ns}:0=:127.0.0.1:{_port(consumer_addr)},{link}",
            f"{ns}:0=:127.0.0.1:{_port(market.ledger.url)}{extra}",
            f"{ns}:0=:127.0.0.1:{_port(market.oracle_url)}{extra}",
            f"{ns}:0=:127.0.0.1:{_port(scripts)}{extra}",
        ]
        with relay(*routes) as running:
            p2p, ledger, oracle, www = running.ports
            toml = (
                market.toml(_via(market.ledger.url, ledger)).replace(
                    market.oracle_url, _via(market.oracle_url, oracle)
                )
                + PROCESS_JOBS.replace("[jobs]", f"[jobs]\nslots = {slots}")
                + PRICES
            )
            peer = consumer_addr.rsplit("/p2p/", 1)[1]
            provider = market.spawn(
                "provider",
                40,
                bootstrap=f"/ip4/127.0.0.1/tcp/{p2p}/p2p/{peer}",
                extra_toml=toml,
                env={**env, **(provider_env or {})},
                netns=ns,
            )
            consumer_address = consumer.cli("wallet", "new")["address"]
            outputs, ada, ntx = consumer_funds
            for _ in range(outputs):  # locks and fees need not wait on one change output
                market.ledger.faucet(consumer_address, ada=ada, ntx=ntx)
            provider_address = provider.cli("wallet", "new")["address"]
            market.ledger.faucet(provider_address, ada=provider_ada, ntx=0)
            provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
            provider_id = provider.peer_id
            wait_for(
                lambda: any(
                    p["peer_id"] == provider_id for p in consumer.cli("peer", "list")["peers"]
                ),
                "the consumer never saw the provider",
                120,
            )
            yield SlowPair(
                consumer,
                provider,
                running,
                f"http://127.0.0.1:{www}",
                consumer_address,
                provider_address,
            )
