"""The first hour of a new user: a wheel is a complete product, and the demo leaves nothing
behind however it is interrupted (issue 14 §1)."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import psutil
import pytest

from engine.errors import EngineError
from tests.conftest import REPO, run_cli
from tests.docker_fixture import docker_host

__all__ = ["docker_host"]

EXAMPLE_FILES = sorted(
    p.relative_to(REPO / "examples").as_posix()
    for p in (REPO / "examples" / "jobs").rglob("*")
    if p.is_file() and "__pycache__" not in p.parts
)


def _copy_tree(dest: Path) -> None:
    """The checkout as git sees it (tracked and new files), without build leftovers."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in filter(None, listed):
        rel = raw.decode()
        source = REPO / rel
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the work tree
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        elif source.is_file():
            shutil.copy2(source, target)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tree = tmp_path_factory.mktemp("tree")
    _copy_tree(tree)
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: nothing is downloaded; the venv's setuptools is new enough.
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(tree),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (path,) = out.glob("nunet_tui-*.whl")
    return path, built.stdout + built.stderr


def test_the_wheel_builds_without_warnings(wheel: tuple[Path, str]) -> None:
    _, log = wheel
    warnings = [line for line in log.splitlines() if "warning" in line.lower()]
    assert warnings == []


def test_the_wheel_ships_every_example(wheel: tuple[Path, str]) -> None:
    path, _ = wheel
    names = set(zipfile.ZipFile(path).namelist())
    assert EXAMPLE_FILES, "no examples found in the checkout"
    missing = [f for f in EXAMPLE_FILES if f"nunet_tui/examples/{f}" not in names]
    assert missing == []
    assert "nunet_tui/app.tcss" in names


def test_an_installed_wheel_finds_its_examples_and_says_its_version(
    wheel: tuple[Path, str], tmp_path: Path
) -> None:
    path, _ = wheel
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(path),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    # The target comes first on sys.path: the installed copy, not the checkout, is imported.
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = (
        "import nunet_tui.cli.demo_sandbox as d, nunet_tui; "
        "print(nunet_tui.__file__); print(d.EXAMPLES); print(sorted(d.example_names()))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert shown.returncode == 0, shown.stderr
    module, examples, names = shown.stdout.splitlines()
    assert module.startswith(str(target))
    assert examples.startswith(str(target.resolve()))
    assert "'iris'" in names and "'tensor_shape_error'" in names
    version = subprocess.run(
        [sys.executable, "-m", "nunet_tui", "--version"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert version.returncode == 0
    assert version.stdout.strip() == "nunet-tui 0.1.0"


# --- the demo stops everything it started -------------------------------------------------


def _demo(root: Path) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "nunet_tui", "demo", "--no-tui", "--root", str(root)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("NUNET_")},
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def _wait_line(
    proc: subprocess.Popen[str], lines: queue.Queue[str], seen: list[str], text: str, timeout: float
) -> None:
    """Collect the demo's descendants meanwhile, so none can slip away unnoticed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.05)
        except queue.Empty:
            assert proc.poll() is None, "".join(seen)
            continue
        seen.append(line)
        if text in line:
            return
    raise AssertionError(f"no {text!r} in {timeout} s: {''.join(seen)}")


def _descendants(pid: int, known: dict[int, psutil.Process]) -> None:
    try:
        for child in psutil.Process(pid).children(recursive=True):
            known.setdefault(child.pid, child)
    except psutil.NoSuchProcess:
        pass


@pytest.mark.parametrize(
    ("stage", "signum"),
    [
        ("at once", signal.SIGTERM),
        ("starting the ledger", signal.SIGTERM),
        ("listening", signal.SIGTERM),
        ("ledger up", signal.SIGINT),
        ("oracle up", signal.SIGTERM),
    ],
)
@pytest.mark.timeout(240)
def test_an_interrupted_demo_start_leaves_no_process_behind(
    tmp_path: Path, stage: str, signum: int
) -> None:
    root = tmp_path / "demo"
    proc, lines = _demo(root)
    seen: list[str] = []
    known: dict[int, psutil.Process] = {}
    try:
        if stage != "at once":
            poller_stop = threading.Event()

            def poll() -> None:
                while not poller_stop.is_set():
                    _descendants(proc.pid, known)
                    time.sleep(0.02)

            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
            try:
                _wait_line(proc, lines, seen, stage, timeout=180)
            finally:
                poller_stop.set()
                poller.join()
            _descendants(proc.pid, known)
            assert known, "the demo had started nothing yet"
        proc.send_signal(signum)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, 128 + signum, -signum)
    left = [p for p in known.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [p.cmdline() for p in left]
    if stage != "at once":
        _wait_line(proc, lines, seen, "demo: stopped", timeout=5)
        assert f"its files are in {root}" in seen[-1]
        assert "kept (--root)" in seen[-1]


# --- a newcomer keeps the providers it learnt of by exchange --------------------------------


def test_an_old_advert_from_exchange_lists_a_new_peer_until_its_heartbeat_is_due() -> None:
    """The advert a bootstrap peer relays was signed long ago; its peer is alive (the relay
    just heard from it). Dropped at the next expiry tick, it stayed unlisted until its next
    advert: seconds of every newcomer's discovery."""
    import msgspec

    from engine.network.peers import PeerTable
    from tests.unit.test_network_wire import ALICE, advert

    now = [1000.0]
    changes: list[tuple[str, bool]] = []
    table = PeerTable(
        "ch", 1.0, lambda p, i: changes.append((p, i is not None)), clock=lambda: now[0]
    )
    old = msgspec.structs.replace(advert(ALICE), at=now[0] - 600, expires_at=now[0] + 3000)
    assert table.on_advert(old)
    now[0] += 0.5
    assert table.expire() == []  # still listed: its first heartbeat is not due yet
    assert changes == [(ALICE.peer_id, True)]
    now[0] += 2.6  # no heartbeat at all: it was not alive after all
    assert table.expire() == [ALICE.peer_id]
    assert not table.on_advert(old)  # and the same old advert does not bring it back


# --- quitting is quick and quiet ----------------------------------------------------------


def test_quitting_never_waits_for_a_slow_readiness_probe(tmp_path: Path) -> None:
    """The TUI asks for the node's readiness as its first frame paints; a Docker probe still
    importing the SDK on a busy machine held the engine thread past its 5 s at quit."""
    import dataclasses

    from engine.api import GetInfo
    from engine.errors import EngineError
    from engine.facade import Engine
    from tests.conftest import make_home
    from tests.doubles.host import fixed_host

    host = fixed_host(tmp_path / "host")
    real = host.probes.check_readiness
    armed, started, release = threading.Event(), threading.Event(), threading.Event()

    def slow_probe(*args: object, **kwargs: object) -> object:
        if armed.is_set():
            started.set()
            release.wait(30)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    probes = dataclasses.replace(host.probes, check_readiness=slow_probe)
    engine = Engine(make_home(tmp_path / "home"), network=False, probes=probes).start()
    outcome: list[object] = []

    def ask() -> None:
        try:
            outcome.append(engine.call_blocking(GetInfo(), timeout=30))
        except (EngineError, RuntimeError, TimeoutError) as exc:
            outcome.append(exc)

    armed.set()
    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    try:
        assert started.wait(20), "the probe never ran"
        began = time.monotonic()
        engine.close()  # raised "did not stop within 5 s" (after 5 s) before
        assert time.monotonic() - began < 3
    finally:
        release.set()
    asking.join(10)
    assert outcome and not isinstance(outcome[0], dict)  # answered with an error, not hung


# --- [ml_images] is what the Docker executor runs --------------------------------------------


def test_the_docker_executor_runs_the_configured_ml_images(tmp_path: Path) -> None:
    from engine.facade import Engine
    from engine.jobs.executors.docker import DockerExecutor
    from engine.jobs.service import build_executors
    from engine.resources.container_host import ContainerFacts
    from tests.conftest import MACHINE_TOML, make_home
    from tests.engine.test_jobs_process import new_run, spec

    toml = (
        MACHINE_TOML + '[jobs]\nexecutors = ["docker"]\n'
        '[ml_images]\npytorch_cpu = "registry.example/torch:9"\ntensorflow_cpu = ""\n'
    )
    engine = Engine(make_home(tmp_path / "home", machine_toml=toml), network=False).start()
    try:
        executor = build_executors(engine.node, container_host=ContainerFacts())["docker"]
    finally:
        engine.close()
    assert isinstance(executor, DockerExecutor)
    assert executor.image_for(new_run(tmp_path, spec("pytorch"))) == "registry.example/torch:9"
    # An empty entry is no image: such jobs are refused with the reason, not run elsewhere.
    with pytest.raises(EngineError, match="no image for tensorflow_cpu"):
        executor.image_for(new_run(tmp_path, spec("tensorflow")))


def test_a_missing_image_names_the_command_that_pulls_it(docker_host: str, tmp_path: Path) -> None:
    import trio

    from engine.jobs.executors.docker import DockerExecutor
    from engine.resources.container_host import ContainerFacts
    from tests.engine.test_jobs_process import new_run, spec

    executor = DockerExecutor(
        container_host=ContainerFacts(),
        docker_host=docker_host,
        images={"pytorch_cpu": "nunet-test/absent:404"},
    )
    run = new_run(tmp_path, spec("pytorch"))
    with pytest.raises(EngineError) as refused:
        trio.run(executor.prepare, run, b"print(1)\n")
    assert "nunet-test/absent:404 is not on this provider" in refused.value.message
    assert "`nunet-tui onboard-ml`" in refused.value.message
    assert "prepare-images" not in refused.value.message
    assert run_cli("onboard-ml", "--help").returncode == 0  # the command it names exists


# --- a consumer-only node keeps to loopback ---------------------------------------------------


def test_a_consumer_only_node_listens_on_loopback_unless_configured() -> None:
    from engine.config import NetworkSettings
    from engine.network.link import DEFAULT_LISTEN, listen_for

    default = NetworkSettings().listen
    assert tuple(default) == DEFAULT_LISTEN  # the same default as the config's
    assert listen_for(default, onboarded=False, mode="consumer") == ["/ip4/127.0.0.1/tcp/9000"]
    assert listen_for(default, onboarded=False, mode=None) == ["/ip4/127.0.0.1/tcp/9000"]
    # Providers are dialled by consumers: every interface, as configured.
    assert listen_for(default, onboarded=True, mode="consumer") == default
    assert listen_for(default, onboarded=False, mode="provider") == default
    # A listen address the operator chose is never second-guessed.
    chosen = ["/ip4/0.0.0.0/tcp/9100"]
    assert listen_for(chosen, onboarded=False, mode="consumer") == chosen


def test_a_late_heartbeat_brings_a_dropped_peer_back_with_its_offer() -> None:
    """A provider that missed its heartbeats on a busy machine and then beats again is listed
    with its advert at once, not with nothing to offer until its next advert; an expired
    advert is not restored, and a withdrawal leaves nothing to restore."""
    import msgspec

    from engine.domain import wire
    from engine.network.peers import PeerTable
    from tests.unit.test_network_wire import ALICE, advert

    now = [1000.0]
    table = PeerTable("ch", 1.0, clock=lambda: now[0])
    offer = msgspec.structs.replace(advert(ALICE), at=now[0], expires_at=now[0] + 10)
    assert table.on_advert(offer)
    now[0] += 3.5
    assert table.expire() == [ALICE.peer_id]
    assert ALICE.peer_id not in table
    beat = wire.Heartbeat(peer_id=ALICE.peer_id, channel="ch", seq=1, at=now[0])
    assert table.on_heartbeat(beat)
    info = table.get(ALICE.peer_id)
    assert info is not None and info.advert == offer
    now[0] += 20  # silent again, and its advert has expired meanwhile
    assert table.expire() == [ALICE.peer_id]
    late = wire.Heartbeat(peer_id=ALICE.peer_id, channel="ch", seq=2, at=now[0])
    assert table.on_heartbeat(late)
    info = table.get(ALICE.peer_id)
    assert info is not None and info.advert is None
