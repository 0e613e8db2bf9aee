"""Shared fixtures: a node home with declared machine values and a fixed identity.

Declared values ([machine] in config.toml, a real feature for VMs whose probes lie) keep
numbers and pictures identical from one machine to the next; the fixed key keeps the peer id.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from nacl.signing import SigningKey

from engine.config import Paths
from engine.domain.fetch_policy import FetchPolicy
from engine.identity import Identity, save

if TYPE_CHECKING:
    from engine.facade import Engine

REPO = Path(__file__).resolve().parent.parent
FIXED_SEED = bytes(range(32))
# A CIP-19 testnet base address: valid for the default test channel.
TEST_ADDRESS = (
    "addr_test1qz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3n0d3vllmyqwsx5wktcd8cc3sq835lu7"
    "drv2xwl2wywfgs68faae"
)
MACHINE_TOML = """\
[machine]
hostname = "rig-01"
cpu_model = "AMD EPYC 7543 32-Core Processor"
cpu_cores = 2
cpu_mhz_per_core = 2500
memory_mb = 16000
disk_mb = 20000

[network]
listen = ["/ip4/127.0.0.1/tcp/0"]
"""
# Providers refuse to fetch job code from loopback by default; the tests serve it there, so
# they allow 127.0.0.0/8 explicitly, as a LAN market would allow its own network. An env
# override rather than a [jobs] line: several tests write their own [jobs] table.
FETCH_LOOPBACK_ENV = {"NUNET_JOBS_FETCH_ALLOW_NETWORKS": "127.0.0.0/8"}
LOOPBACK_FETCH = FetchPolicy.from_settings(["127.0.0.0/8"])  # for executors used directly


def make_home(root: Path, *, seed: bytes = FIXED_SEED, machine_toml: str = MACHINE_TOML) -> Paths:
    paths = Paths.for_home(root)
    paths.ensure()
    paths.config_file.write_text(machine_toml, encoding="utf-8")
    save(Identity(SigningKey(seed)), paths.identity_key)
    return paths


@pytest.fixture
def node_home(tmp_path: Path) -> Paths:
    return make_home(tmp_path / "home")


@pytest.fixture
def engine_client(node_home: Paths) -> Iterator[Engine]:
    """An embedded engine without the network: what the pictures and most tests need
    (peer discovery timing would make snapshots differ from run to run)."""
    from engine.facade import Engine

    engine = Engine(node_home, network=False).start()
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture
def networked_engine(node_home: Paths) -> Iterator[Engine]:
    """An embedded engine on the real libp2p network (listening on 127.0.0.1)."""
    from engine.facade import Engine

    engine = Engine(node_home).start()
    try:
        yield engine
    finally:
        engine.close()


def run_cli(
    *args: str,
    home: Paths | None = None,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the real command line in its own process, as a user's shell would: forked from
    the suite's zygote (tests/forkserver.py), which imported it once.

    ``input`` is piped to its stdin (a secret such as a mnemonic; never a terminal, so no
    prompt waits for a person)."""
    from tests import forkserver

    return forkserver.run(_cli_args(args, home), env=cli_env(env), timeout=timeout, input=input)


def run_cli_fresh(
    *args: str,
    home: Paths | None = None,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``run_cli`` in a new interpreter: for the tests of what a fork cannot show (the
    interpreter's start, imports, the entry point): tests/cli/test_cli*.py."""
    return subprocess.run(
        [sys.executable, "-m", "nunet_tui", *_cli_args(args, home)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(env),
        cwd=REPO,
        input=input,
    )


def _cli_args(args: tuple[str, ...], home: Paths | None) -> list[str]:
    return (["--home", str(home.home)] if home is not None else []) + list(args)


def cli_env(env: dict[str, str] | None) -> dict[str, str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("NUNET_HOME", None)
    return full_env


# -- markers --------------------------------------------------------------------------------
# Applied from what a test uses, so a new test is marked without anyone remembering to:
# `pytest -m "not docker and not multiprocess"` is the fast inner loop (README, "Tests").
_FIXTURE_MARKS = {
    "daemons": "multiprocess",  # tests/daemon_harness.py: real `nunet-tui daemon` processes
    "docker_host": "docker",  # tests/docker_fixture.py (sklearn_image depends on it)
    "snap_compare": "snapshot",  # pytest-textual-snapshot
}


def _starts_processes(func: object, seen: set[int]) -> bool:
    """Whether the code of ``func`` starts a process (a subprocess, the CLI in a fresh
    interpreter, a standalone network node), following the functions and classes of tests/
    it uses (helpers, fixtures) and its nested functions."""
    func = getattr(func, "__wrapped__", func)
    code = getattr(func, "__code__", None)
    if code is None or id(code) in seen:
        return False
    seen.add(id(code))
    names: set[str] = set()
    stack = [code]
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack.extend(c for c in current.co_consts if hasattr(c, "co_names"))
    module_globals: dict[str, object] = getattr(func, "__globals__", {})
    for name in names:
        target = module_globals.get(name)
        if target is subprocess or target is subprocess.Popen or target is subprocess.run:
            return True
        if (
            target is run_cli
            or getattr(target, "__name__", None) == "tests.forkserver"
            or (getattr(target, "__module__", None) == "tests.forkserver")
        ):
            return True  # forks the command line or a daemon from the suite's zygote
        if target is _starts_processes:  # this hook's own code names subprocess
            continue
        if not str(getattr(target, "__module__", "")).startswith("tests"):
            continue
        members = vars(target).values() if isinstance(target, type) else (target,)
        if any(_starts_processes(member, seen) for member in members):
            return True
    return False


# Tests that share something of the machine run on one xdist worker (`--dist loadgroup`):
# the Docker engine (a provider's start removes the containers its node label left, and the
# test nodes share the label "rig-01") and mDNS on loopback (multicast reaches every worker).
_SHARED = {"docker": "docker"}
_SHARED_FILES = {"test_network_mdns.py": "mdns"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        marks = {mark for fixture, mark in _FIXTURE_MARKS.items() if fixture in fixtures}
        if "multiprocess" not in marks:
            seen: set[int] = set()
            info = getattr(item, "_fixtureinfo", None)
            reached = [getattr(item, "function", None)]
            # The Docker fixtures start dockerd once a session: that is the `docker` mark.
            for name in fixtures - {"docker_host", "sklearn_image"}:
                reached += [d.func for d in (info.name2fixturedefs.get(name, ()) if info else ())]
            if any(_starts_processes(func, seen) for func in reached):
                marks.add("multiprocess")
        for mark in sorted(marks):
            item.add_marker(mark)
        group = next((_SHARED[m] for m in sorted(marks) if m in _SHARED), None)
        group = _SHARED_FILES.get(item.path.name, group)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


# -- the slow-test rule ---------------------------------------------------------------------
SLOW_TEST_S = 60.0  # a test over this says why in its docstring (README, "Tests")


def _docstring(nodeid: str) -> str | None:
    """The docstring of the test function ``nodeid`` names, or None when it cannot tell."""
    path, _, name = nodeid.partition("::")
    name = name.split("[")[0].split("@")[0].split("::")[-1]
    module = ".".join(Path(path).with_suffix("").parts)
    try:
        import importlib

        func = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None
    return func.__doc__


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """After the 30 slowest: the tests over ``SLOW_TEST_S``, each with its docstring's reason,
    or a note that it gives none."""
    slow = sorted(
        (
            (report.duration, report.nodeid)
            for reports in terminalreporter.stats.values()
            for report in reports
            if getattr(report, "when", None) == "call"
            and getattr(report, "duration", 0.0) > SLOW_TEST_S
        ),
        reverse=True,
    )
    terminalreporter.write_sep("-", f"tests over {SLOW_TEST_S:.0f} s: {len(slow)}")
    for duration, nodeid in slow:
        doc = _docstring(nodeid)
        why = doc.strip().splitlines()[0] if doc else "NO DOCSTRING: say why it is slow"
        terminalreporter.write_line(f"{duration:7.1f}s {nodeid}\n          {why}")
