"""The demo's sandbox: what it started and how it stops, and what one sandbox node is.

:class:`Sandbox` records every process it starts (spawned, or forked from a zygote) before a
signal can interrupt, and stops them in order; :class:`Signals` turns SIGINT and SIGTERM into
:class:`Interrupted` except while a child is being recorded. A sandbox node is a config.toml
(:func:`node_config`: the declared machine, prices, the local ledger and oracle), a command
line and environment (:func:`daemon_argv`, :func:`daemon_env`), and the waits for its control
socket and its first listen address. Separate from the start-up (demo_start.py), the chain
(demo_chain.py) and the app (demo.py): bench/ runs nodes of its own with these.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
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
    # imported once the zygotes are importing (node_client)
    from engine.control_client import ControlClient


CHANNEL = "nunet-demo-test"
STOP_WAIT_S = 10.0
# A CIP-19 test vector: a well-formed testnet address for nodes of an unpaid sandbox (bench/).
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


Progress = Callable[[str], None]
Child = subprocess.Popen[Any] | ForkedChild


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
                for name in sorted(example_names())
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


# Examples the demo's process-executor providers cannot run: a gang needs Docker, the torch
# image and its overlay on each of two providers (examples/jobs/ddp, issue 25).
NOT_IN_THE_DEMO = ("ddp",)


def example_names() -> list[str]:
    return [
        p.name
        for p in EXAMPLES.iterdir()
        if (p / "job.toml").exists() and p.name not in NOT_IN_THE_DEMO
    ]


def free_port() -> int:
    # Chosen up front so that every node can be configured before the ledger, the oracle or
    # the first provider runs; a port taken meanwhile makes that process fail with its log.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def node_config(
    cores: int,
    mhz: int,
    memory: int,
    bootstrap: str | list[str] | None,
    prices: tuple[float, ...],
    sandbox: Sandbox | None = None,
    listen_port: int = 0,
    display_name: str = "",
) -> str:
    """A sandbox node's config.toml; with the sandbox's ledger and oracle, jobs are paid. A
    provider's ``display_name`` goes into its signed advert ([provider])."""
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
    if display_name:
        lines += ["[provider]", f"display_name = {json.dumps(display_name)}"]
    if sandbox is not None and sandbox.ledger_url:
        lines += [
            "[payments]",
            'backend = "local"',
            f'ledger_url = "{sandbox.ledger_url}"',
            f'oracle_url = "{sandbox.oracle_url}"',
            f'passphrase_file = "{sandbox.passphrase_file}"',
        ]
    return "\n".join(lines) + "\n"


def daemon_argv(paths: Paths) -> list[str]:
    return [sys.executable, "-m", "nunet_tui", "--home", str(paths.home), "daemon"]


def daemon_env() -> dict[str, str]:
    from engine.payments.keystore import SANDBOX_KDF_ENV  # keyrings: not for every demo import

    env = {k: v for k, v in os.environ.items() if not k.startswith("NUNET_")}
    # Sandbox wallets hold test ADA only: a cheap KDF (keystore.py SANDBOX_KDF), recorded in
    # each new keystore, instead of a full Argon2id per key use in every node at once.
    env[SANDBOX_KDF_ENV] = "1"
    return env


def start_daemon(paths: Paths, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        daemon_argv(paths),
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
        env=daemon_env(),
    )


def node_client(paths: Paths, proc: Child, timeout: float = 30.0) -> ControlClient:
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


def wait_listening(client: ControlClient, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        addrs = client.call_blocking(api.GetPeerSelf()).addrs
        if addrs:
            return str(addrs[0])
        time.sleep(0.05)
    raise EngineError("demo", "a sandbox node never started listening")


def serve_examples() -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(EXAMPLES))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, name="demo-http", daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"
