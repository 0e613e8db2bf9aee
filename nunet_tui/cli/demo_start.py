"""Starting the demo's sandbox: the plan, then one of two strategies, with a worker per node.

The plan (:func:`_plan`) decides everything before anything runs: ports, the providers'
identities and configs, the passphrase file, the example server. Then either every process
is a fresh interpreter (``_start_spawned``, ``NUNET_TUI_DEMO_START=spawn``) or the processes
are forked from two zygotes (``_start_forked``, the default: :data:`CHAIN_PRELOAD` and
:data:`NODE_PRELOAD` are what they import once). A worker thread per node waits for it to
listen, funds its wallet and onboards it (a provider) or sets consumer mode; its error is
raised again in the main thread. Any error or interruption stops what was started
(:func:`start_sandbox`).
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import api
from engine.config import Paths
from engine.errors import EngineError
from nunet_tui.cli.demo_chain import (
    chain_env,
    fund_wallet,
    ledger_args,
    oracle_args,
    ready_line,
    start_service,
    wait_ledger_then_oracle,
)
from nunet_tui.cli.demo_sandbox import (
    CHANNEL,
    PROVIDERS,
    Child,
    Progress,
    Sandbox,
    Signals,
    daemon_argv,
    daemon_env,
    free_port,
    node_client,
    node_config,
    serve_examples,
    wait_listening,
)
from nunet_tui.cli.zygote import ForkedChild, ZygoteClient

CONSUMER_NTX = 500  # enough for a day of demo jobs at the sandbox's prices
START_ENV = "NUNET_TUI_DEMO_START"


def _quiet(message: str) -> None:
    pass


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


def _set_up_provider(
    sandbox: Sandbox,
    paths: Paths,
    proc: Child,
    ledger_up: threading.Event,
    onboard: tuple[str, int, int],
    progress: Progress,
) -> None:
    name, memory_mb, cpu_mhz = onboard
    client = node_client(paths, proc)
    try:
        wait_listening(client)
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
    sandbox.server, sandbox.scripts_url = serve_examples()
    ledger_port, oracle_port = free_port(), free_port()
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
    ports = [free_port() for _ in PROVIDERS]
    for paths, port in zip(homes, ports, strict=True):
        paths.ensure()
        peer_id = identity.load_or_create(paths.identity_key).peer_id
        sandbox.bootstrap.append(f"/ip4/127.0.0.1/tcp/{port}/p2p/{peer_id}")
    spec: tuple[Any, ...]
    for paths, port, spec in zip(homes, ports, PROVIDERS, strict=True):
        name, cores, mhz, memory, _onboard_mb, _onboard_mhz, prices = spec
        paths.config_file.write_text(
            node_config(
                cores,
                mhz,
                memory,
                sandbox.bootstrap,
                prices,
                sandbox,
                listen_port=port,
                display_name=name,
            )
        )
    sandbox.providers.extend(homes)
    consumer = sandbox.consumer
    consumer.ensure()
    consumer.config_file.write_text(
        node_config(4, 3000, 16_000, sandbox.bootstrap, (1.0, 2.5, 6.0), sandbox)
    )
    return _Plan(homes=homes, ledger_port=ledger_port, oracle_port=oracle_port)


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
        client = node_client(consumer, proc)
        try:
            wait_listening(client)
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
    ledger = start_service(sandbox, "ledger", *ledger_args(sandbox, plan.ledger_port)[1:])
    workers: list[_Worker] = []
    ledger_up = threading.Event()
    for paths in plan.homes:
        proc = sandbox.spawn(
            daemon_argv(paths),
            stdout=subprocess.DEVNULL,
            stderr=(root / f"{_home_name(paths)}.log").open("ab"),
            env=daemon_env(),
        )
        workers.append(_provider_worker(sandbox, paths, proc, ledger_up, progress))
    if consumer_daemon:
        proc = sandbox.spawn(
            daemon_argv(sandbox.consumer),
            stdout=subprocess.DEVNULL,
            stderr=(root / "consumer.log").open("ab"),
            env=daemon_env(),
        )
        workers.append(_consumer_worker(sandbox, proc, ledger_up, progress))
    for worker in workers:
        worker.start()
    wait_ledger_then_oracle(sandbox, ledger, plan.oracle_port, progress, ledger_up)
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
        env=chain_env(),
        log=root / "zygote-chain.log",
        tag=tag,
        options=["--skip-pycardano-ogmios"],
    )
    sandbox.zygotes.append(chain)
    nodes = ZygoteClient(
        sandbox.spawn, NODE_PRELOAD, env=daemon_env(), log=root / "zygote-nodes.log", tag=tag
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
                env=chain_env(daemon_env()),
                name="nunet-wallets",
                log=root / "wallets.log",
                pipe_stdout=True,
            )
            wallets_line = _line_reader(sandbox, "wallets", maker, ready)
            ledger = sandbox.fork(
                chain,
                "oracle_client.ledger",
                ledger_args(sandbox, plan.ledger_port),
                env=chain_env(),
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
                oracle_args(sandbox, plan.oracle_port, ready["ledger"]),
                env=chain_env(),
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
        env=daemon_env(),
        name=f"nunet-{_home_name(paths)}",
        log=log,
    )


def _line_reader(
    sandbox: Sandbox, name: str, proc: Child, ready: dict[str, dict[str, str]]
) -> _Worker:
    def read() -> None:
        ready[name] = ready_line(sandbox, name, proc)

    worker = _Worker(f"{name}-line", read)
    worker.start()
    return worker
