"""``nunet-tui demo``: a sandbox compute market on 127.0.0.1, then the app in consumer mode.

Three provider daemons with different (declared) machines, a consumer node, an HTTP server
for the example jobs, the local ledger (``nunet-ledger``) and the reference oracle
(``nunet-oracle``), all in a fresh folder. Every node has a wallet funded from the ledger's
faucet, so jobs are paid through the escrow exactly as on a real network. Offline: the
providers run jobs with the process executor (the sandbox is a trusted local network).
``--no-tui`` starts the same sandbox, makes the consumer a daemon too, prints one JSON line
describing it (with ``ledger_url`` and ``oracle_url``), and runs until interrupted.
Everything stops when the app quits.

Start-up runs in parallel (ports and the first identities are chosen up front, so every node
can be configured before any is running) and says what it is doing on stderr. By default the
processes are forked from two zygotes (zygote.py) that import pycardano, and libp2p with the
engine, once instead of in every process, and the nodes' wallets are made before the nodes
start (sandbox_wallets.py); ``NUNET_TUI_DEMO_START=spawn`` starts a fresh interpreter for
each instead. SIGINT or SIGTERM at any moment, also during start-up, stops every process the
sandbox started; the last line says where its files are and whether they were removed.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from engine import api
from engine.config import Paths
from engine.errors import EngineError
from nunet_tui.cli.zygote import ForkedChild, ZygoteClient
from nunet_tui.presets import EXAMPLES

if TYPE_CHECKING:
    # imported once the zygotes are importing (_client)
    from engine.control_client import ControlClient

CHANNEL = "nunet-demo-test"
STOP_WAIT_S = 10.0
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


Progress = Callable[[str], None]
Child = subprocess.Popen[Any] | ForkedChild
START_ENV = "NUNET_TUI_DEMO_START"


def _quiet(message: str) -> None:
    pass


class Interrupted(BaseException):
    """SIGINT or SIGTERM, raised in the main thread so that every ``finally`` runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Signals:
    """SIGINT and SIGTERM as :class:`Interrupted`, except while a child is being spawned and
    recorded (``held``): a child forked but not yet in the list would be left behind. Once
    stopping, further signals are only noted: the clean-up must not be cut short."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending: int | None = None
        self.stopping = False
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        if self.stopping:
            return
        if self.depth:
            self.pending = signum
            return
        raise Interrupted(signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if not self.depth and self.pending is not None and not self.stopping:
                signum, self.pending = self.pending, None
                raise Interrupted(signum)


@dataclass
class Sandbox:
    root: Path
    consumer: Paths
    providers: list[Paths] = field(default_factory=list)
    procs: list[subprocess.Popen[Any] | ForkedChild] = field(default_factory=list)
    zygotes: list[ZygoteClient] = field(default_factory=list)
    scripts_url: str = ""
    server: http.server.ThreadingHTTPServer | None = None
    ledger_url: str = ""
    oracle_url: str = ""
    passphrase_file: Path | None = None
    bootstrap: list[str] = field(default_factory=list)
    signals: Signals = field(default_factory=Signals)
    # Wallets made before the nodes started (fork start: sandbox_wallets.py), by home.
    wallets: dict[str, str] = field(default_factory=dict)
    # The demo made the root itself and deletes it when it ends (not with --root): the app's
    # quit question says so.
    removed_on_exit: bool = False

    def describe(self) -> dict[str, object]:
        return {
            "root": str(self.root),
            "removed_on_exit": self.removed_on_exit,
            "ledger_url": self.ledger_url,
            "oracle_url": self.oracle_url,
            "consumer_home": str(self.consumer.home),
            "provider_homes": [str(p.home) for p in self.providers],
            "scripts_url": self.scripts_url,
            "examples_dir": str(EXAMPLES),
            "examples": {
                name: (
                    f"nunet-tui --home {self.consumer.home} job submit -f "
                    f"{EXAMPLES / name / 'job.toml'} --base-url {self.scripts_url}{name}/"
                )
                for name in sorted(_example_names())
            },
            # Not a submit-form preset: a notebook needs the token `notebook create` makes
            # (the Notebooks screen's n does the same). The providers' Python has no
            # JupyterLab: it is installed into the job first.
            "notebook": (
                f"nunet-tui --home {self.consumer.home} notebook create --spec "
                f"{EXAMPLES / 'notebook' / 'notebook.toml'} --base-url {self.scripts_url}notebook/"
                " --dep jupyterlab"
            ),
        }

    def spawn(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a child in its own process group (a terminal's Ctrl-C reaches only us, and
        we stop them in order) and record it before any signal can interrupt."""
        with self.signals.held():
            proc: subprocess.Popen[Any] = subprocess.Popen(argv, process_group=0, **kwargs)
            self.procs.append(proc)
        return proc

    def fork(
        self,
        zygote: ZygoteClient,
        module: str,
        args: list[str],
        *,
        env: dict[str, str],
        name: str,
        log: Path,
        pipe_stdout: bool = False,
    ) -> ForkedChild:
        """``python -m module args`` forked from ``zygote`` (see :meth:`spawn`); its stdout a
        pipe to us when ``pipe_stdout`` (a service's ready line), else /dev/null."""
        read_end, write_end = os.pipe() if pipe_stdout else (-1, os.open(os.devnull, os.O_WRONLY))
        # Ours until the child is recorded (then stop() closes it); an interruption deferred
        # by held() is raised on leaving it, after that.
        stdout = os.fdopen(read_end, "r") if pipe_stdout else None
        stderr = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        recorded = False
        try:
            with self.signals.held():
                child = zygote.fork(module, args, env, name, write_end, stderr)
                child.stdout = stdout
                self.procs.append(child)
                recorded = True
        finally:
            os.close(write_end)
            os.close(stderr)
            if not recorded and stdout is not None:
                stdout.close()
        return child

    def stop(self) -> int:
        """Stop every child (SIGTERM, then SIGKILL after ``STOP_WAIT_S``); returns how many
        were still running. The zygotes last: they would stop their children too, and a
        second SIGTERM would cut a child's own clean-up short."""
        self.signals.stopping = True
        zygotes = [zygote.proc for zygote in self.zygotes]
        running = _terminate([proc for proc in self.procs if proc not in zygotes])
        for zygote in self.zygotes:
            zygote.close()  # at the end of its socket a zygote exits; SIGTERM ends an import
        running += _terminate(zygotes)
        for proc in self.procs:
            # What a child left in its group (a job it ran) goes with it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            if proc.stdout is not None:
                proc.stdout.close()
            if isinstance(proc, ForkedChild):
                proc.close()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        return running


def _terminate(procs: Sequence[Child]) -> int:
    """SIGTERM to each process's group, SIGKILL to those still there after ``STOP_WAIT_S``;
    how many were running."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    for proc in running:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return len(running)


def _example_names() -> list[str]:
    return [p.name for p in EXAMPLES.iterdir() if (p / "job.toml").exists()]


def _free_port() -> int:
    # Chosen up front so that every node can be configured before the ledger, the oracle or
    # the first provider runs; a port taken meanwhile makes that process fail with its log.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(
    cores: int,
    mhz: int,
    memory: int,
    bootstrap: str | list[str] | None,
    prices: tuple[float, ...],
    sandbox: Sandbox | None = None,
    listen_port: int = 0,
) -> str:
    """A sandbox node's config.toml; with the sandbox's ledger and oracle, jobs are paid."""
    low, moderate, high = prices
    peers = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap or ())
    lines = [
        'log_level = "info"',
        "[machine]",
        f"cpu_cores = {cores}",
        f"cpu_mhz_per_core = {mhz}",
        f"memory_mb = {memory}",
        "disk_mb = 100000",
        "[network]",
        f'listen = ["/ip4/127.0.0.1/tcp/{listen_port}"]',
        "heartbeat_interval_s = 2",
        f'channel = "{CHANNEL}"',
    ]
    if peers:
        lines.append("bootstrap = [" + ", ".join(f'"{p}"' for p in peers) + "]")
    lines += [
        "[jobs]",
        'executors = ["process"]',
        # The demo's own jobs, each in its sandbox: `job shell` into them is part of the tour.
        "allow_process_shell = true",
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


def _daemon_argv(paths: Paths) -> list[str]:
    return [sys.executable, "-m", "nunet_tui", "--home", str(paths.home), "daemon"]


def _daemon_env() -> dict[str, str]:
    from engine.payments.keystore import SANDBOX_KDF_ENV  # keyrings: not for every demo import

    env = {k: v for k, v in os.environ.items() if not k.startswith("NUNET_")}
    # Sandbox wallets hold test ADA only: a cheap KDF (keystore.py SANDBOX_KDF), recorded in
    # each new keystore, instead of a full Argon2id per key use in every node at once.
    env[SANDBOX_KDF_ENV] = "1"
    return env


def _chain_env(base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``base`` for the sandbox's chain: its zygote, the ledger, the oracle and the wallet
    maker. SANDBOX ONLY: pycardano's typeguard instrumentation is off (its own
    PYCARDANO_NO_TYPE_CHECK), a second of CPU at the chain zygote's import, on the demo's
    critical path (the nodes wait for their wallets). These processes are our own stand-ins
    on 127.0.0.1; every node keeps pycardano's checks, and so does a real oracle."""
    return {**base, "PYCARDANO_NO_TYPE_CHECK": "1"}


def _daemon(paths: Paths, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        _daemon_argv(paths),
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
        env=_daemon_env(),
    )


def _client(paths: Paths, proc: Child, timeout: float = 30.0) -> ControlClient:
    from engine.control_client import ControlClient

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise EngineError("demo", f"a sandbox node failed to start; see {paths.home}.log")
        with contextlib.suppress(OSError):
            return ControlClient(paths.control_socket)
        if time.monotonic() > deadline:
            raise EngineError("demo", f"a sandbox node did not start in {timeout:.0f} s")
        time.sleep(0.05)


def _listening(client: ControlClient, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        addrs = client.call_blocking(api.GetPeerSelf()).addrs
        if addrs:
            return str(addrs[0])
        time.sleep(0.05)
    raise EngineError("demo", "a sandbox node never started listening")


def _serve_examples() -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(EXAMPLES))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, name="demo-http", daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def _service(sandbox: Sandbox, name: str, *args: str) -> subprocess.Popen[str]:
    """Start ``python -m oracle_client.<name> serve …``; its first stdout line says where."""
    return sandbox.spawn(
        [sys.executable, "-m", f"oracle_client.{name}", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=(sandbox.root / f"{name}.log").open("ab"),
        text=True,
    )


def _ready_line(sandbox: Sandbox, name: str, proc: Child) -> dict[str, str]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        ready: dict[str, str] = json.loads(line)
    except ValueError:
        raise EngineError(
            "demo", f"the sandbox's {name} did not start; see {sandbox.root / name}.log"
        ) from None
    return ready


def fund_wallet(
    sandbox: Sandbox,
    client: ControlClient | Any,
    ada: int,
    ntx: int,
    ledger_up: threading.Event | None = None,
    proc: Child | None = None,
    address: str | None = None,
) -> str | None:
    """A sandbox node's wallet, with test ADA and NTX from the ledger's faucet.

    ``address``: the wallet the sandbox made in the node's home before it started
    (sandbox_wallets.py). Otherwise the node makes one first, while the ledger may still be
    starting: that loads pycardano in the node (seconds of CPU), and only the faucet needs
    the ledger. None when the node's process ended while waiting."""
    import httpx

    if address is None:
        address = client.call_blocking(api.WalletNew(), timeout=60).wallet.address
    while ledger_up is not None and not ledger_up.wait(0.1):
        if proc is not None and proc.poll() is not None:
            return None
    response = httpx.post(
        f"{sandbox.ledger_url}/v0/ledger/faucet",
        json={"address": address, "ada": ada, "ntx": ntx, "note": "demo"},
        timeout=30,
    )
    response.raise_for_status()
    return str(address)


class _Worker(threading.Thread):
    """One node's set-up beside the others'; its error is raised again in the main thread.
    A daemon thread: an interrupted start-up stops the processes it waits on, and never
    waits for it."""

    def __init__(self, name: str, work: Callable[[], None]) -> None:
        super().__init__(name=f"demo-{name}", daemon=True)
        self.work = work
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:
            self.error = exc


def _join(workers: list[_Worker]) -> None:
    for worker in workers:
        while worker.is_alive():
            worker.join(0.1)  # short joins: a signal is handled between them
        if worker.error is not None:
            raise worker.error


def _wait_ledger_then_oracle(
    sandbox: Sandbox,
    ledger: subprocess.Popen[str],
    oracle_port: int,
    progress: Progress,
    ledger_up: threading.Event,
) -> None:
    root = sandbox.root
    ready = _ready_line(sandbox, "ledger", ledger)
    progress("ledger up")
    ledger_up.set()  # the faucet is all the nodes wait for; the oracle starts meanwhile
    oracle = _service(
        sandbox,
        "oracle_server",
        *("--db", str(root / "oracle.db"), "--key-file", str(root / "oracle.key")),
        *("--ledger-url", ready["url"], "--ntx-unit", ready["ntx_unit"]),
        *("--port", str(oracle_port)),
    )
    _ready_line(sandbox, "oracle", oracle)
    progress("oracle up")


def _set_up_provider(
    sandbox: Sandbox,
    paths: Paths,
    proc: Child,
    ledger_up: threading.Event,
    onboard: tuple[str, int, int],
    progress: Progress,
) -> None:
    name, memory_mb, cpu_mhz = onboard
    client = _client(paths, proc)
    try:
        _listening(client)
        progress(f"{name} listening")
        # ADA for fees and collateral; NTX come from the jobs they run.
        wallet = fund_wallet(
            sandbox,
            client,
            ada=50,
            ntx=0,
            ledger_up=ledger_up,
            proc=proc,
            address=sandbox.wallets.get(str(paths.home)),
        )
        if wallet is None:
            return
        client.call_blocking(
            api.OnboardRequest(
                memory_mb=memory_mb, cpu_mhz=cpu_mhz, address=wallet, channel=CHANNEL, gpus=()
            )
        )
        progress(f"{name} onboarded")
    finally:
        client.close()


def start_sandbox(
    root: Path | None = None,
    consumer_daemon: bool = False,
    progress: Progress = _quiet,
    signals: Signals | None = None,
) -> Sandbox:
    """Start the sandbox; on any error or interruption stop what was started and re-raise."""
    root = Path(root or tempfile.mkdtemp(prefix="nunet-demo-"))
    sandbox = Sandbox(root=root, consumer=Paths.for_home(root / "consumer"))
    if signals is not None:
        sandbox.signals = signals
    try:
        _start(sandbox, consumer_daemon, progress)
        return sandbox
    except BaseException:
        sandbox.stop()
        raise


def _start(sandbox: Sandbox, consumer_daemon: bool, progress: Progress) -> None:
    sandbox.root.mkdir(parents=True, exist_ok=True)
    if start_mode() == "fork":
        _start_forked(sandbox, consumer_daemon, progress)
    else:
        _start_spawned(sandbox, consumer_daemon, progress)


def start_mode() -> str:
    """``fork`` (zygotes, the default where the platform has pidfds) or ``spawn`` (a fresh
    interpreter per process; ``NUNET_TUI_DEMO_START=spawn``, and bench/demo_startup.py's
    baseline)."""
    wanted = os.environ.get(START_ENV, "fork")
    if wanted == "spawn" or not (hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")):
        return "spawn"
    return "fork"


@dataclass
class _Plan:
    """What is decided before anything runs: ports, provider homes and their configs."""

    homes: list[Paths]
    ledger_port: int
    oracle_port: int


def _plan(sandbox: Sandbox) -> _Plan:
    from engine import identity

    root = sandbox.root
    sandbox.server, sandbox.scripts_url = _serve_examples()
    ledger_port, oracle_port = _free_port(), _free_port()
    sandbox.ledger_url = f"http://127.0.0.1:{ledger_port}/api"
    sandbox.oracle_url = f"http://127.0.0.1:{oracle_port}"
    # One passphrase for the sandbox's keystores, in a 0600 file as a real node would keep it.
    sandbox.passphrase_file = root / "keystore-passphrase"
    fd = os.open(sandbox.passphrase_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_urlsafe(24) + "\n")
    # Every provider's identity and port up front: each node bootstraps from all providers
    # and so starts at once, whichever of them listens first.
    homes = [Paths.for_home(root / name) for name, *_ in PROVIDERS]
    ports = [_free_port() for _ in PROVIDERS]
    for paths, port in zip(homes, ports, strict=True):
        paths.ensure()
        peer_id = identity.load_or_create(paths.identity_key).peer_id
        sandbox.bootstrap.append(f"/ip4/127.0.0.1/tcp/{port}/p2p/{peer_id}")
    spec: tuple[Any, ...]
    for paths, port, spec in zip(homes, ports, PROVIDERS, strict=True):
        _name, cores, mhz, memory, _onboard_mb, _onboard_mhz, prices = spec
        paths.config_file.write_text(
            _config(cores, mhz, memory, sandbox.bootstrap, prices, sandbox, listen_port=port)
        )
    sandbox.providers.extend(homes)
    consumer = sandbox.consumer
    consumer.ensure()
    consumer.config_file.write_text(
        _config(4, 3000, 16_000, sandbox.bootstrap, (1.0, 2.5, 6.0), sandbox)
    )
    return _Plan(homes=homes, ledger_port=ledger_port, oracle_port=oracle_port)


def _ledger_args(sandbox: Sandbox, plan: _Plan) -> list[str]:
    root = sandbox.root
    return ["serve", "--db", str(root / "ledger.db"), "--dev", "--port", str(plan.ledger_port)]


def _oracle_args(sandbox: Sandbox, plan: _Plan, ready: dict[str, str]) -> list[str]:
    root = sandbox.root
    return [
        "serve",
        *("--db", str(root / "oracle.db"), "--key-file", str(root / "oracle.key")),
        *("--ledger-url", ready["url"], "--ntx-unit", ready["ntx_unit"]),
        *("--port", str(plan.oracle_port)),
    ]


def _provider_worker(
    sandbox: Sandbox, paths: Paths, proc: Child, ledger_up: threading.Event, progress: Progress
) -> _Worker:
    spec = next(p for p in PROVIDERS if p[0] == _home_name(paths))
    name, _cores, _mhz, _memory, onboard_mb, onboard_mhz, _prices = spec
    work = functools.partial(
        _set_up_provider, sandbox, paths, proc, ledger_up, (name, onboard_mb, onboard_mhz), progress
    )
    return _Worker(name, work)


def _consumer_worker(
    sandbox: Sandbox, proc: Child, ledger_up: threading.Event, progress: Progress
) -> _Worker:
    consumer = sandbox.consumer

    def set_up_consumer() -> None:
        client = _client(consumer, proc)
        try:
            _listening(client)
            client.call_blocking(api.SetMode(mode="consumer"))
            funded = fund_wallet(
                sandbox,
                client,
                ada=100,
                ntx=CONSUMER_NTX,
                ledger_up=ledger_up,
                proc=proc,
                address=sandbox.wallets.get(str(consumer.home)),
            )
            if funded is not None:
                progress("consumer funded")
        finally:
            client.close()

    return _Worker("consumer", set_up_consumer)


def _start_spawned(sandbox: Sandbox, consumer_daemon: bool, progress: Progress) -> None:
    """Every process a fresh interpreter (each imports pycardano, uplc or libp2p itself)."""
    root = sandbox.root
    plan = _plan(sandbox)
    names = ", ".join(name for name, *_ in PROVIDERS)
    progress(f"starting the ledger, the oracle and the providers {names} in {root}")
    ledger = _service(sandbox, "ledger", *_ledger_args(sandbox, plan)[1:])
    workers: list[_Worker] = []
    ledger_up = threading.Event()
    for paths in plan.homes:
        proc = sandbox.spawn(
            _daemon_argv(paths),
            stdout=subprocess.DEVNULL,
            stderr=(root / f"{_home_name(paths)}.log").open("ab"),
            env=_daemon_env(),
        )
        workers.append(_provider_worker(sandbox, paths, proc, ledger_up, progress))
    if consumer_daemon:
        proc = sandbox.spawn(
            _daemon_argv(sandbox.consumer),
            stdout=subprocess.DEVNULL,
            stderr=(root / "consumer.log").open("ab"),
            env=_daemon_env(),
        )
        workers.append(_consumer_worker(sandbox, proc, ledger_up, progress))
    for worker in workers:
        worker.start()
    _wait_ledger_then_oracle(sandbox, ledger, plan.oracle_port, progress, ledger_up)
    _join(workers)


# What the zygotes import before forking: the modules each component loads at start (a
# name that no longer imports is skipped, and the child imports what it needs itself).
ZYGOTE_IMPORT_S = 120.0  # seconds of wall time: minutes only on a machine loaded far past its cores
CHAIN_PRELOAD = (
    # What the wallets need (sandbox_wallets.py, not itself: runpy would warn of a module
    # imported twice); they come first, the daemons wait for them. The ledger and the oracle
    # import their own modules (uplc for the ledger) once forked, while the wallets are made.
    "pycardano",
    "engine.payments.service",
    "engine.store",
    "engine.identity",
)
NODE_PRELOAD = (
    "libp2p",
    "libp2p.network.connection.swarm_connection",
    "engine.daemon",
    "engine.facade",
    "engine.payments.service",
    "engine.payments.escrow",
    "engine.jobs.service",
    "engine.jobs.provider",
    "engine.jobs.consumer",
    "engine.jobs.notebooks",
    "engine.jobs.executors.process",
    "engine.network.service",
    "engine.network.link",
    "engine.network.heartbeat",
    "engine.network.chat",
    "engine.notify",
    # `nunet-tui daemon` parses its command line with the daemon's own parser (main._parse;
    # job_output for its usage checks), so no other command's module is loaded for it.
    "nunet_tui.cli.main",
    "nunet_tui.cli.job_output",
    "importlib_metadata",
    "email.policy",
)


def _start_forked(sandbox: Sandbox, consumer_daemon: bool, progress: Progress) -> None:
    """Two zygotes import in parallel (the chain's: pycardano; the nodes': libp2p and the
    engine). As soon as the chain's is ready it forks the maker of every node's wallet and
    the ledger (the oracle once the ledger is up); the daemons are forked from the nodes'
    zygote once it is ready and the wallets are in their homes."""
    root = sandbox.root
    tag = str(root)
    chain = ZygoteClient(
        sandbox.spawn,
        CHAIN_PRELOAD,
        env=_chain_env(),
        log=root / "zygote-chain.log",
        tag=tag,
        options=["--skip-pycardano-ogmios"],
    )
    sandbox.zygotes.append(chain)
    nodes = ZygoteClient(
        sandbox.spawn, NODE_PRELOAD, env=_daemon_env(), log=root / "zygote-nodes.log", tag=tag
    )
    sandbox.zygotes.append(nodes)
    plan = _plan(sandbox)
    names = ", ".join(name for name, *_ in PROVIDERS)
    progress(f"starting the ledger, the oracle and the providers {names} in {root}")
    ledger_up = threading.Event()
    workers: list[_Worker] = []
    ledger_line: _Worker | None = None
    oracle_line: _Worker | None = None
    wallets_line: _Worker | None = None
    ready: dict[str, dict[str, str]] = {}
    daemons_started = False
    deadline = time.monotonic() + ZYGOTE_IMPORT_S
    while True:
        if time.monotonic() > deadline and not (ledger_line is not None and daemons_started):
            raise EngineError(
                "demo",
                f"the sandbox's modules were not imported in {ZYGOTE_IMPORT_S:.0f} s; see "
                f"{root / 'zygote-chain.log'} and {root / 'zygote-nodes.log'}",
            )
        if ledger_line is None and chain.poll_ready():
            homes = [str(p.home) for p in (*plan.homes, sandbox.consumer)]
            maker = sandbox.fork(
                chain,
                "nunet_tui.cli.sandbox_wallets",
                ["--passphrase-file", str(sandbox.passphrase_file), "--channel", CHANNEL, *homes],
                env=_chain_env(_daemon_env()),
                name="nunet-wallets",
                log=root / "wallets.log",
                pipe_stdout=True,
            )
            wallets_line = _line_reader(sandbox, "wallets", maker, ready)
            ledger = sandbox.fork(
                chain,
                "oracle_client.ledger",
                _ledger_args(sandbox, plan),
                env=_chain_env(),
                name="nunet-ledger",
                log=root / "ledger.log",
                pipe_stdout=True,
            )
            ledger_line = _line_reader(sandbox, "ledger", ledger, ready)
        if "wallets" in ready and not sandbox.wallets:
            sandbox.wallets.update(ready["wallets"])
            progress("wallets made")
        if not daemons_started and sandbox.wallets and nodes.poll_ready():
            daemons_started = True
            for paths in plan.homes:
                proc = _fork_daemon(sandbox, nodes, paths, root / f"{_home_name(paths)}.log")
                workers.append(_provider_worker(sandbox, paths, proc, ledger_up, progress))
                workers[-1].start()
            if consumer_daemon:
                proc = _fork_daemon(sandbox, nodes, sandbox.consumer, root / "consumer.log")
                workers.append(_consumer_worker(sandbox, proc, ledger_up, progress))
                workers[-1].start()
        if ledger_line is not None and "ledger" in ready and oracle_line is None:
            progress("ledger up")
            ledger_up.set()
            oracle = sandbox.fork(
                chain,
                "oracle_client.oracle_server",
                _oracle_args(sandbox, plan, ready["ledger"]),
                env=_chain_env(),
                name="nunet-oracle",
                log=root / "oracle_server.log",
                pipe_stdout=True,
            )
            oracle_line = _line_reader(sandbox, "oracle", oracle, ready)
        for worker in (ledger_line, wallets_line, oracle_line, *workers):
            if worker is not None and worker.error is not None:
                raise worker.error
        if "oracle" in ready and oracle_line not in (None, _DONE) and not oracle_line.is_alive():
            progress("oracle up")
            oracle_line = _DONE
        if oracle_line is _DONE and daemons_started:
            break
        time.sleep(0.02)  # short: a signal is handled between polls
    _join(workers)


_DONE = _Worker("done", lambda: None)  # a reader whose line was read and reported


def _home_name(paths: Paths) -> str:
    assert paths.home is not None  # sandbox nodes always have a home folder
    return paths.home.name


def _fork_daemon(sandbox: Sandbox, nodes: ZygoteClient, paths: Paths, log: Path) -> ForkedChild:
    return sandbox.fork(
        nodes,
        "nunet_tui",
        ["--home", str(paths.home), "daemon"],
        env=_daemon_env(),
        name=f"nunet-{_home_name(paths)}",
        log=log,
    )


def _line_reader(
    sandbox: Sandbox, name: str, proc: Child, ready: dict[str, dict[str, str]]
) -> _Worker:
    def read() -> None:
        ready[name] = _ready_line(sandbox, name, proc)

    worker = _Worker(f"{name}-line", read)
    worker.start()
    return worker


def _say(started: float) -> Progress:
    def say(message: str) -> None:
        print(f"demo: {message} ({time.monotonic() - started:.1f} s)", file=sys.stderr, flush=True)

    return say


def _finish(sandbox: Sandbox | None, root: Path, made_root: bool, ok: bool) -> None:
    """The last line: where the sandbox's files are, and whether they are gone."""
    if made_root and ok:
        shutil.rmtree(root, ignore_errors=True)
        gone = not root.exists()
        message = f"removed its files ({root})" if gone else f"could not remove {root}"
    else:
        why = "kept (--root)" if not made_root else "kept for their logs"
        message = f"its files are in {root}, {why}; remove them with: rm -rf {root}"
    print(f"demo: stopped; {message}", file=sys.stderr, flush=True)


def run_demo(*, tui: bool, root: Path | None = None) -> int:
    started = time.monotonic()
    say = _say(started)
    made_root = root is None
    root = Path(root or tempfile.mkdtemp(prefix="nunet-demo-"))
    signals = Signals()
    signals.install()
    if (extra := _extra_log()) is not None:
        say(f"the example jobs' frameworks are installing in the background: tail -f {extra}")
    elif missing := _missing_frameworks():
        # The sandbox's providers run jobs with this Python and offer only the frameworks it
        # has: without them the examples are refused ("framework ... not offered").
        say(
            f"this Python lacks {', '.join(missing)}: the examples that need them will find no "
            "provider; install them with: pip install 'nunet-tui[demo]'"
        )
    sandbox: Sandbox | None = None
    ok = False
    try:
        # The consumer is a daemon of the sandbox in both modes, started and funded with the
        # providers; the app attaches to it. Embedded in the app, its engine started only
        # once the sandbox was up, and ready came ~3 s later (7.4 s against 4.7 s).
        if tui:  # the app's modules load while the sandbox starts, not after it
            threading.Thread(target=_preload_app, name="demo-preload", daemon=True).start()
        sandbox = start_sandbox(root, consumer_daemon=True, progress=say, signals=signals)
        sandbox.removed_on_exit = made_root
        if not tui:
            say("ready")
            print(json.dumps(sandbox.describe()), flush=True)
            with contextlib.suppress(Interrupted):
                while True:
                    time.sleep(3600)
            ok = True
            return 0
        status = _run_app(sandbox, say)
        ok = status == 0
        return status
    except Interrupted as exc:
        ok = sandbox is not None  # interrupted once it ran: a normal end
        return 128 + exc.signum
    finally:
        signals.stopping = True
        if sandbox is not None:
            sandbox.stop()
        signals.restore()
        _finish(sandbox, root, made_root, ok)


def _preload_app() -> None:
    import importlib

    for name in ("engine.connect", "engine.control_client", "engine.reconnect", "nunet_tui.app"):
        importlib.import_module(name)


def _extra_log() -> Path | None:
    """scripts/start.sh installs the example jobs' frameworks in the background and names
    its log here; None once that install is over (or for any other start)."""
    name = os.environ.get("NUNET_TUI_DEMO_EXTRA_LOG")
    if not name:
        return None
    log = Path(name)
    return None if _extra_state(log) == "done" else log


def _missing_frameworks() -> list[str]:
    """The frameworks the example jobs use that this Python (the sandbox's providers') lacks."""
    from engine.jobs.executors.process import FRAMEWORK_MODULES, importable

    found = importable(sys.executable, tuple(FRAMEWORK_MODULES.values()))
    return [name for name, module in FRAMEWORK_MODULES.items() if module not in found]


def _extra_state(log: Path) -> str:
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - 4096))
            lines = handle.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return "unknown"
    last = lines[-1] if lines else ""
    if last == "done":
        return "done"
    return "failed" if last.startswith("failed") else "installing"


def _follow_extra_install(app: Any, log: Path) -> None:
    """Say in the app that the frameworks are still coming, and again when they are in."""
    from nunet_tui.cli.output import safe_lines

    deadline = time.monotonic() + 30
    while not app.is_running and time.monotonic() < deadline:
        time.sleep(0.2)
    if not app.is_running:
        return
    place = safe_lines(str(log))
    notify = functools.partial(_notify_from_thread, app)
    notify(
        f"Installing PyTorch and TensorFlow for the examples in the background ({place}); "
        "iris needs only scikit-learn, which comes first.",
        timeout=15,
    )
    while app.is_running:
        state = _extra_state(log)
        if state != "installing":
            text = (
                "The examples' frameworks are installed."
                if state == "done"
                else f"Installing the examples' frameworks failed: see {place}"
            )
            notify(text, severity="information" if state == "done" else "error")
            return
        time.sleep(2)


def _notify_from_thread(app: Any, text: str, **kwargs: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the app quit meanwhile
        app.call_from_thread(app.notify, text, **kwargs)


def _run_app(sandbox: Sandbox, say: Progress) -> int:
    from engine.connect import open_client
    from engine.logsetup import configure
    from nunet_tui.app import NunetApp

    configure(sandbox.consumer)
    # Set to consumer mode and funded by the sandbox already; reconnect: as any attached app.
    client = open_client(sandbox.consumer, attach=True, reconnect=True)
    try:
        say("ready")
        app = NunetApp(client=client, examples=sandbox.describe())
        if (extra := _extra_log()) is not None:
            threading.Thread(
                target=_follow_extra_install, args=(app, extra), name="demo-extra", daemon=True
            ).start()

        def quit_app(signum: int, frame: FrameType | None) -> None:
            # Inside Textual's loop an exception would leave the terminal raw: ask it to exit.
            app.exit()

        signal.signal(signal.SIGTERM, quit_app)
        signal.signal(signal.SIGINT, quit_app)
        app.run()
        return 0
    finally:
        client.close()
