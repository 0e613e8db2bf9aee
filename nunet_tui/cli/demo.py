"""``nunet-tui demo``: a sandbox compute market on 127.0.0.1, then the app in consumer mode.

Three provider daemons with different (declared) machines, a consumer node, an HTTP server
for the example jobs, the local ledger (``nunet-ledger``) and the reference oracle
(``nunet-oracle``), all in a fresh folder. Every node has a wallet funded from the ledger's
faucet, so jobs are paid through the escrow exactly as on a real network. Offline: the
providers run jobs with the process executor (the sandbox is a trusted local network).
``--no-tui`` starts the same sandbox, makes the consumer a daemon too, prints one JSON line
describing it (with ``ledger_url`` and ``oracle_url``), and runs until interrupted.
Everything stops when the app quits.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import api
from engine.config import Paths
from engine.control import ControlClient
from engine.errors import EngineError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
# A CIP-19 test vector: a well-formed testnet address for nodes of an unpaid sandbox (bench/).
DEMO_ADDRESS = (
    "addr_test1qz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3n0d3vllmyqwsx5wktcd8cc3sq835lu7"
    "drv2xwl2wywfgs68faae"
)
CONSUMER_NTX = 500  # enough for a day of demo jobs at the sandbox's prices
PROVIDERS = (
    # name, cores, MHz per core, RAM MB, onboarded MB, onboarded MHz, NTX/h per tier
    ("rig-a", 8, 3200, 32_000, 16_000, 12_000, (0.8, 2.0, 5.0)),
    ("rig-b", 4, 2800, 16_000, 8_000, 6_000, (1.0, 2.5, 6.0)),
    ("laptop", 2, 2400, 8_000, 4_500, 3_000, (0.6, 1.5, 4.0)),
)


@dataclass
class Sandbox:
    root: Path
    consumer: Paths
    providers: list[Paths] = field(default_factory=list)
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)
    scripts_url: str = ""
    server: http.server.ThreadingHTTPServer | None = None
    ledger_url: str = ""
    oracle_url: str = ""
    passphrase_file: Path | None = None

    def describe(self) -> dict[str, object]:
        return {
            "root": str(self.root),
            "ledger_url": self.ledger_url,
            "oracle_url": self.oracle_url,
            "consumer_home": str(self.consumer.home),
            "provider_homes": [str(p.home) for p in self.providers],
            "scripts_url": self.scripts_url,
            "examples": {
                name: (
                    f"nunet-tui --home {self.consumer.home} job submit -f "
                    f"{EXAMPLES / name / 'job.toml'} --base-url {self.scripts_url}{name}/"
                )
                for name in sorted(_example_names())
            },
        }

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _example_names() -> list[str]:
    return [p.name for p in EXAMPLES.iterdir() if (p / "job.toml").exists()]


def _config(
    cores: int,
    mhz: int,
    memory: int,
    bootstrap: str | None,
    prices: tuple[float, ...],
    sandbox: Sandbox | None = None,
) -> str:
    """A sandbox node's config.toml; with the sandbox's ledger and oracle, jobs are paid."""
    low, moderate, high = prices
    lines = [
        'log_level = "info"',
        "[machine]",
        f"cpu_cores = {cores}",
        f"cpu_mhz_per_core = {mhz}",
        f"memory_mb = {memory}",
        "disk_mb = 100000",
        "[network]",
        'listen = ["/ip4/127.0.0.1/tcp/0"]',
        "heartbeat_interval_s = 2",
        'channel = "nunet-demo-test"',
    ]
    if bootstrap:
        lines.append(f'bootstrap = ["{bootstrap}"]')
    lines += [
        "[jobs]",
        'executors = ["process"]',
        "checkpoint_interval_s = 5",
        f"prices = {{ low = {low}, moderate = {moderate}, high = {high} }}",
        # The sandbox serves the example scripts on 127.0.0.1, which providers refuse to
        # fetch from unless told (a consumer could read their local services otherwise).
        'fetch_allow_networks = ["127.0.0.1/32"]',
    ]
    if sandbox is not None and sandbox.ledger_url:
        lines += [
            "[payments]",
            'backend = "local"',
            f'ledger_url = "{sandbox.ledger_url}"',
            f'oracle_url = "{sandbox.oracle_url}"',
            f'passphrase_file = "{sandbox.passphrase_file}"',
        ]
    return "\n".join(lines) + "\n"


def _daemon(paths: Paths, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "nunet_tui", "--home", str(paths.home), "daemon"],
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
        env={k: v for k, v in os.environ.items() if not k.startswith("NUNET_")},
    )


def _client(paths: Paths, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> ControlClient:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise EngineError("demo", f"a sandbox node failed to start; see {paths.home}.log")
        with contextlib.suppress(OSError):
            return ControlClient(paths.control_socket)
        if time.monotonic() > deadline:
            raise EngineError("demo", f"a sandbox node did not start in {timeout:.0f} s")
        time.sleep(0.1)


def _listening(client: ControlClient, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        addrs = client.call_blocking(api.GetPeerSelf()).addrs
        if addrs:
            return str(addrs[0])
        time.sleep(0.1)
    raise EngineError("demo", "a sandbox node never started listening")


def _serve_examples() -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(EXAMPLES))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, name="demo-http", daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def _service(sandbox: Sandbox, name: str, *args: str) -> dict[str, str]:
    """Start ``python -m oracle_client.<name> serve …``; its first stdout line says where."""
    proc = subprocess.Popen(
        [sys.executable, "-m", f"oracle_client.{name}", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=(sandbox.root / f"{name}.log").open("ab"),
        text=True,
    )
    sandbox.procs.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        ready: dict[str, str] = json.loads(line)
    except ValueError:
        raise EngineError(
            "demo", f"the sandbox's {name} did not start; see {sandbox.root / name}.log"
        ) from None
    return ready


def _start_chain(sandbox: Sandbox) -> None:
    root = sandbox.root
    root.mkdir(parents=True, exist_ok=True)
    ledger = _service(sandbox, "ledger", "--db", str(root / "ledger.db"), "--dev", "--port", "0")
    sandbox.ledger_url = ledger["url"]
    oracle = _service(
        sandbox,
        "oracle",
        *("--db", str(root / "oracle.db"), "--key-file", str(root / "oracle.key")),
        *("--ledger-url", ledger["url"], "--ntx-unit", ledger["ntx_unit"]),
    )
    sandbox.oracle_url = oracle["url"]
    # One passphrase for the sandbox's keystores, in a 0600 file as a real node would keep it.
    sandbox.passphrase_file = root / "keystore-passphrase"
    fd = os.open(sandbox.passphrase_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_urlsafe(24) + "\n")


def fund_wallet(sandbox: Sandbox, client: ControlClient | Any, ada: int, ntx: int) -> str:
    """A new wallet for a sandbox node, with test ADA and NTX from the ledger's faucet."""
    import httpx

    address = client.call_blocking(api.WalletNew(), timeout=60).wallet.address
    response = httpx.post(
        f"{sandbox.ledger_url}/v0/ledger/faucet",
        json={"address": address, "ada": ada, "ntx": ntx, "note": "demo"},
        timeout=30,
    )
    response.raise_for_status()
    return str(address)


def start_sandbox(root: Path | None = None, consumer_daemon: bool = False) -> Sandbox:
    root = Path(root or tempfile.mkdtemp(prefix="nunet-demo-"))
    sandbox = Sandbox(root=root, consumer=Paths.for_home(root / "consumer"))
    try:
        sandbox.server, sandbox.scripts_url = _serve_examples()
        _start_chain(sandbox)
        bootstrap: str | None = None
        for name, cores, mhz, memory, onboard_mb, onboard_mhz, prices in PROVIDERS:
            paths = Paths.for_home(root / name)
            paths.ensure()
            paths.config_file.write_text(_config(cores, mhz, memory, bootstrap, prices, sandbox))
            proc = _daemon(paths, root / f"{name}.log")
            sandbox.procs.append(proc)
            sandbox.providers.append(paths)
            client = _client(paths, proc)
            try:
                address = _listening(client)
                bootstrap = bootstrap or address
                # ADA for fees and collateral; NTX come from the jobs they run.
                wallet = fund_wallet(sandbox, client, ada=50, ntx=0)
                client.call_blocking(
                    api.OnboardRequest(
                        memory_mb=onboard_mb,
                        cpu_mhz=onboard_mhz,
                        address=wallet,
                        channel="nunet-demo-test",
                        gpus=(),
                    )
                )
            finally:
                client.close()
        consumer = sandbox.consumer
        consumer.ensure()
        consumer.config_file.write_text(
            _config(4, 3000, 16_000, bootstrap, (1.0, 2.5, 6.0), sandbox)
        )
        if consumer_daemon:
            proc = _daemon(consumer, root / "consumer.log")
            sandbox.procs.append(proc)
            client = _client(consumer, proc)
            try:
                _listening(client)
                client.call_blocking(api.SetMode(mode="consumer"))
                fund_wallet(sandbox, client, ada=100, ntx=CONSUMER_NTX)
            finally:
                client.close()
        return sandbox
    except BaseException:
        sandbox.stop()
        raise


def run_demo(*, tui: bool, root: Path | None = None) -> int:
    sandbox = start_sandbox(root, consumer_daemon=not tui)
    try:
        if not tui:
            print(json.dumps(sandbox.describe()), flush=True)
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait()
            return 0
        from engine.connect import open_client
        from engine.logsetup import configure
        from nunet_tui.app import NunetApp

        configure(sandbox.consumer)
        client = open_client(sandbox.consumer)
        try:
            client.call_blocking(api.SetMode(mode="consumer"))
            fund_wallet(sandbox, client, ada=100, ntx=CONSUMER_NTX)
            NunetApp(client=client, examples=sandbox.describe()).run()
        finally:
            client.close()
        return 0
    finally:
        sandbox.stop()
