"""``nunet-tui demo``: a sandbox compute market on 127.0.0.1, then the app in consumer mode.

Three provider daemons with different (declared) machines, a consumer node, and an HTTP server
for the example jobs, all in a fresh folder. Offline: the providers run jobs with the process
executor (the sandbox is a trusted local network). ``--no-tui`` starts the same sandbox, makes
the consumer a daemon too, prints one JSON line describing it, and runs until interrupted.
Everything stops when the app quits.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine import api
from engine.config import Paths
from engine.control import ControlClient
from engine.errors import EngineError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
# A CIP-19 test vector: a well-formed testnet address for the sandbox wallets.
DEMO_ADDRESS = (
    "addr_test1qz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3n0d3vllmyqwsx5wktcd8cc3sq835lu7"
    "drv2xwl2wywfgs68faae"
)
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
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    scripts_url: str = ""
    server: http.server.ThreadingHTTPServer | None = None

    def describe(self) -> dict[str, object]:
        return {
            "root": str(self.root),
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
    cores: int, mhz: int, memory: int, bootstrap: str | None, prices: tuple[float, ...]
) -> str:
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


def start_sandbox(root: Path | None = None, consumer_daemon: bool = False) -> Sandbox:
    root = Path(root or tempfile.mkdtemp(prefix="nunet-demo-"))
    sandbox = Sandbox(root=root, consumer=Paths.for_home(root / "consumer"))
    try:
        sandbox.server, sandbox.scripts_url = _serve_examples()
        bootstrap: str | None = None
        for name, cores, mhz, memory, onboard_mb, onboard_mhz, prices in PROVIDERS:
            paths = Paths.for_home(root / name)
            paths.ensure()
            paths.config_file.write_text(_config(cores, mhz, memory, bootstrap, prices))
            proc = _daemon(paths, root / f"{name}.log")
            sandbox.procs.append(proc)
            sandbox.providers.append(paths)
            client = _client(paths, proc)
            try:
                address = _listening(client)
                bootstrap = bootstrap or address
                client.call_blocking(
                    api.OnboardRequest(
                        memory_mb=onboard_mb,
                        cpu_mhz=onboard_mhz,
                        address=DEMO_ADDRESS,
                        channel="nunet-demo-test",
                        gpus=(),
                    )
                )
            finally:
                client.close()
        consumer = sandbox.consumer
        consumer.ensure()
        consumer.config_file.write_text(_config(4, 3000, 16_000, bootstrap, (1.0, 2.5, 6.0)))
        if consumer_daemon:
            proc = _daemon(consumer, root / "consumer.log")
            sandbox.procs.append(proc)
            client = _client(consumer, proc)
            try:
                _listening(client)
                client.call_blocking(api.SetMode(mode="consumer"))
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
            NunetApp(client=client, examples=sandbox.describe()).run()
        finally:
            client.close()
        return 0
    finally:
        sandbox.stop()
