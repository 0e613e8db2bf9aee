"""Regenerate screenshots/*.svg by driving the real app on a real embedded engine.

    .venv/bin/python scripts/screenshots.py [--out screenshots] [--size 160x48 --size 80x24]

Each size gets a fresh temporary node home whose config declares the machine (so the
pictures show the same numbers everywhere) and a fixed identity key (so the same peer id).
The host itself is the fixed one of tests/doubles/host.py (Debian 12, Docker reachable, two
NVIDIA boards through the NVML double), so the pictures do not depend on this machine.
A second engine ("bob", a provider) runs beside it on 127.0.0.1 so that the peers, chat and
network pictures have someone in them.
The script walks a provider through the first run: choose the mode, onboard (with a typo
first), look at the GPUs, peers, chat and network status, a job running here (the dashboard's
job panels, then its detail with the GPUs beside the log), pause, then help, the command
palette and consumer mode, its jobs, notebooks and data by CID. Then
scripts/screenshots_payments.py walks the wallet and the rewards (``--only payments``: just
those), and scripts/screenshots_billing.py the Resources screen, the account, the submit form
with a spec and the cancel dialog of a paid job (``--only billing``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import msgspec  # noqa: E402
from nacl.signing import SigningKey  # noqa: E402
from textual.pilot import Pilot  # noqa: E402
from textual.widgets import Input  # noqa: E402

from engine.api import (  # noqa: E402
    ChatSend,
    DataAdd,
    GetCapacity,
    GetPeerSelf,
    JobLogLine,
    ListPeers,
    OnboardRequest,
    SetMode,
)
from engine.config import Paths  # noqa: E402
from engine.facade import Engine  # noqa: E402
from engine.identity import Identity, save  # noqa: E402
from engine.jobs.joblog import JobLog  # noqa: E402
from engine.store import Store  # noqa: E402
from nunet_tui.app import NunetApp  # noqa: E402
from nunet_tui.screens.job_detail import JobDetailScreen  # noqa: E402
from tests.doubles.fake_pynvml import FakeNvml  # noqa: E402
from tests.doubles.host import RIG_GPUS, fixed_host  # noqa: E402
from tests.tui.test_snapshots_data import data_tree  # noqa: E402
from tests.tui.test_snapshots_jobs import EXAMPLES, JOBS, NOW, SERVICE, SERVICE_LOG  # noqa: E402
from tests.tui.test_snapshots_notebooks import NOTEBOOKS  # noqa: E402
from tests.tui.test_snapshots_notebooks import NOW as NOTEBOOKS_NOW  # noqa: E402
from tests.tui.test_snapshots_provider_jobs import NOW as RUN_NOW  # noqa: E402
from tests.tui.test_snapshots_provider_jobs import RUNNING, TRAIN_LOG  # noqa: E402

MACHINE_TOML = """\
[machine]
hostname = "rig-01"
cpu_model = "AMD Ryzen 9 5950X 16-Core Processor"
cpu_cores = 16
cpu_mhz_per_core = 3400
memory_mb = 64000
disk_mb = 500000

[network]
listen = ["/ip4/127.0.0.1/tcp/0"]
heartbeat_interval_s = 1
"""
BOB_TOML = """\
[machine]
hostname = "bob"
cpu_model = "Intel(R) Xeon(R) Gold 6248R CPU @ 3.00GHz"
cpu_cores = 8
cpu_mhz_per_core = 3000
memory_mb = 32000
disk_mb = 200000

[network]
listen = ["/ip4/127.0.0.1/tcp/0"]
heartbeat_interval_s = 1
bootstrap = ["{bootstrap}"]

[provider]
display_name = "bob's xeon"
"""
SEED = bytes(range(32))
BOB_SEED = bytes([7]) * 32
# A CIP-19 testnet base address, valid for the default nunet-test channel.
ADDRESS = (
    "addr_test1qz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3n0d3vllmyqwsx5wktcd8cc3sq835lu7"
    "drv2xwl2wywfgs68faae"
)


def make_home(root: Path, toml: str = MACHINE_TOML, seed: bytes = SEED) -> Paths:
    paths = Paths.for_home(root)
    paths.ensure()
    paths.config_file.write_text(toml, encoding="utf-8")
    save(Identity(SigningKey(seed)), paths.identity_key)
    return paths


def wait(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(what)


def start_bob(root: Path, bootstrap: str) -> Engine:
    """A provider peer on 127.0.0.1: onboarded, beating every second, one RTX 4070."""
    host = fixed_host(root / "host", gpus=RIG_GPUS[1:])
    home = make_home(root / "home", BOB_TOML.format(bootstrap=bootstrap), BOB_SEED)
    bob = Engine(home, probes=host.probes).start()
    bob.call_blocking(SetMode(mode="provider"))
    bob.call_blocking(OnboardRequest(memory_mb=12_000, cpu_mhz=20_000, address=ADDRESS))
    return bob


async def wobble(nvml: FakeNvml) -> None:
    """Busy boards move: the first GPU's load and power follow a slow wave."""
    began = time.monotonic()
    gpu = nvml.gpus[0]
    while True:
        t = time.monotonic() - began
        gpu.utilization_gpu = int(70 + 28 * math.sin(t / 1.7) * math.sin(t / 5.3))
        gpu.power_usage_mw = int(gpu.utilization_gpu * 3_900)
        gpu.temperature = int(78 + gpu.utilization_gpu / 15)
        await asyncio.sleep(0.25)


async def until(pilot: Pilot[Any], predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError(f"waiting on {pilot.app.screen!r}")
        await pilot.pause(0.02)
    await pilot.pause(0.2)


def on(pilot: Pilot[Any], screen: str) -> Callable[[], bool]:
    return lambda: type(pilot.app.screen).__name__ == screen


async def shoot(pilot: Pilot[Any], out: Path, name: str, size: tuple[int, int]) -> None:
    app = pilot.app
    for field in app.screen.query(Input):
        field.cursor_blink = False
    app.clear_notifications()
    await pilot.pause(0.2)
    filename = f"{name}-{size[0]}x{size[1]}.svg"
    app.save_screenshot(filename=filename, path=str(out))
    print(out / filename)


async def tour(
    engine: Engine, bob: Engine, nvml: FakeNvml, out: Path, size: tuple[int, int]
) -> None:
    app = NunetApp(client=engine, examples=EXAMPLES)
    moving = asyncio.create_task(wobble(nvml))
    async with app.run_test(size=size) as pilot:
        await until(pilot, on(pilot, "ModeChooserScreen"))
        await shoot(pilot, out, "mode-chooser", size)

        await pilot.press("p")
        await until(pilot, on(pilot, "ProviderDashboard"))
        await shoot(pilot, out, "provider-dashboard-new", size)

        await pilot.press("o")
        await until(pilot, on(pilot, "OnboardingScreen"))
        await pilot.press(*"99000", "tab", *"24000", "tab", "tab", *ADDRESS[:-3], *"xyz")
        await until(pilot, lambda: app.screen.query_one("#address-field").has_class("-invalid"))
        await pilot.press("shift+tab", "shift+tab", "shift+tab")
        await shoot(pilot, out, "onboarding-errors", size)

        # The available view is this host's free memory: offer what it can take.
        available = await engine.call(GetCapacity(view="available"))
        memory = app.screen.query_one("#memory_mb", Input)
        memory.value = str(max(min(32_000, available.memory_mb // 1000 * 1000), 4_096))
        address = app.screen.query_one("#address", Input)
        address.value = ADDRESS
        await until(pilot, lambda: not app.screen.query_one("#address-field").has_class("-invalid"))
        await shoot(pilot, out, "onboarding-ready", size)

        await pilot.press("ctrl+s")
        await until(pilot, lambda: on(pilot, "ProviderDashboard")() and app.onboarding is not None)
        await shoot(pilot, out, "provider-dashboard", size)

        await pilot.press("g")
        await until(pilot, on(pilot, "GpuScreen"))
        await pilot.pause(12)  # a little history for the sparklines
        await shoot(pilot, out, "gpus", size)

        bob_id = bob.call_blocking(GetPeerSelf()).peer_id
        me = engine.call_blocking(GetPeerSelf()).peer_id
        await pilot.press("p")
        await until(pilot, on(pilot, "PeersScreen"))
        await until(pilot, lambda: bob_id in app.screen.peers)  # type: ignore[attr-defined]
        await shoot(pilot, out, "peers", size)

        await pilot.press("enter")
        await until(pilot, on(pilot, "ChatScreen"))
        await pilot.press(*"hi bob, is the 4070 free tonight?", "enter")
        await pilot.pause(0.5)
        bob.call_blocking(ChatSend(peer_id=me, text="yes, from 20:00. [b]markup[/b] stays literal"))
        await pilot.pause(0.5)
        await shoot(pilot, out, "chat", size)
        await pilot.press("escape")  # the text field has the keys: leave first
        await until(pilot, on(pilot, "ProviderDashboard"))

        await pilot.press("n")
        await until(pilot, on(pilot, "NetworkScreen"))
        network: Any = app.screen
        await until(
            pilot, lambda: network.status is not None and network.status.totals.providers >= 2
        )
        await shoot(pilot, out, "network-status", size)
        # A consumer's GPU job, mid-run here: back on the dashboard its job panels show it.
        store_running_job(engine.paths)
        await pilot.press("escape")
        await until(pilot, on(pilot, "ProviderDashboard"))
        panel: Any = app.screen.query_one("#provider-jobs")
        await until(pilot, lambda: RUNNING.job_id in panel.tails)
        await shoot(pilot, out, "provider-dashboard-jobs", size)
        await pilot.press("home", "enter")  # the newest job, the running one (the list
        # keeps its highlight on the job it had, the one this node ran before)
        await until(pilot, on(pilot, "JobDetailScreen"))
        await until(pilot, lambda: app.screen.query_one("#job-gpus").display)
        await pilot.pause(3)  # a few fresh samples at the right of the sparklines
        await shoot(pilot, out, "job-detail-gpu", size)
        await pilot.press("escape")
        await until(pilot, on(pilot, "ProviderDashboard"))

        await pilot.press("space")
        await until(pilot, on(pilot, "ConfirmScreen"))
        await shoot(pilot, out, "confirm-pause", size)
        await pilot.press("y")
        await until(pilot, lambda: app.onboarding is not None and app.onboarding.state == "paused")
        await shoot(pilot, out, "provider-dashboard-paused", size)

        await pilot.press("question_mark")
        await until(pilot, on(pilot, "HelpScreen"))
        await shoot(pilot, out, "help", size)
        await pilot.press("escape")

        await until(pilot, on(pilot, "ProviderDashboard"))
        await pilot.press("ctrl+p")
        await until(pilot, on(pilot, "CommandPalette"))
        await pilot.pause(0.5)
        await shoot(pilot, out, "command-palette", size)
        await pilot.press(*"consumer", "enter")
        await until(pilot, on(pilot, "ConsumerDashboard"))
        await shoot(pilot, out, "consumer-dashboard", size)

        # Jobs: the submit form with the demo's iris example (bob in "Who can run it"),
        # then the jobs stored in this node (see store_jobs) and two of them in detail.
        await pilot.press("s")
        await until(pilot, on(pilot, "SubmitScreen"))
        await pilot.press("f1")
        await until(pilot, lambda: bool(app.screen.peers))  # type: ignore[attr-defined]
        await shoot(pilot, out, "submit", size)
        await pilot.press("escape")
        await until(pilot, on(pilot, "ConsumerDashboard"))
        await pilot.press("j")
        await until(pilot, on(pilot, "JobsScreen"))
        await until(pilot, lambda: len(app.screen.jobs) == len(JOBS) + 1)  # type: ignore[attr-defined]
        await shoot(pilot, out, "jobs", size)
        await pilot.press("down", "enter")  # past the provider's running job, to 7f3a
        await until(pilot, on(pilot, "JobDetailScreen"))
        await until(pilot, lambda: len(app.screen.query_one("#job-log").lines) >= 8)  # type: ignore[attr-defined]
        await shoot(pilot, out, "job-detail", size)
        await pilot.press("escape", "down", "enter")
        await until(pilot, on(pilot, "JobDetailScreen"))
        await until(pilot, lambda: len(app.screen.query_one("#job-log").lines) >= 7)  # type: ignore[attr-defined]
        await shoot(pilot, out, "job-detail-failed", size)

        # Notebooks (b): the snapshot tests' three, written while the engine runs.
        store_notebooks(engine.paths)
        await pilot.press("escape", "escape")
        await until(pilot, on(pilot, "ConsumerDashboard"))
        await pilot.press("b")
        await until(pilot, on(pilot, "NotebooksScreen"))
        await until(pilot, lambda: len(app.screen.notebooks) == len(NOTEBOOKS))  # type: ignore[attr-defined]
        await shoot(pilot, out, "notebooks", size)

        # A service job's ports panel (t forwards them, e opens a shell), written likewise.
        store_service(engine.paths)
        await pilot.press("escape")
        await until(pilot, on(pilot, "ConsumerDashboard"))
        app.push_screen(JobDetailScreen(SERVICE.job_id))
        await until(pilot, on(pilot, "JobDetailScreen"))
        await until(pilot, lambda: len(app.screen.query_one("#job-log").lines) >= 2)  # type: ignore[attr-defined]
        await shoot(pilot, out, "job-detail-service", size)

        # Data by CID (d): the snapshot tests' files, added through the engine now.
        with tempfile.TemporaryDirectory() as files:
            for path, _, pinned in data_tree(Path(files)):
                engine.call_blocking(DataAdd(path=str(path), pin=pinned))
        await pilot.press("escape")
        await until(pilot, on(pilot, "ConsumerDashboard"))
        await pilot.press("d")
        await until(pilot, on(pilot, "DataScreen"))
        await until(pilot, lambda: len(app.screen.roots) == 4)  # type: ignore[attr-defined]
        await shoot(pilot, out, "data", size)
    moving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await moving


def store_jobs(home: Paths) -> None:
    """The snapshot tests' jobs (tests/tui/test_snapshots_jobs.py), moved to the present."""
    shift = time.time() - NOW
    store = Store(home.database)
    for job, lines in JOBS:
        moved = msgspec.structs.replace(
            job,
            created_at=job.created_at + shift,
            updated_at=job.updated_at + shift,
            started_at=None if job.started_at is None else job.started_at + shift,
            finished_at=None if job.finished_at is None else job.finished_at + shift,
        )
        store.save_job(moved)
        JobLog(home.state_dir / "jobs" / job.job_id / "log.jsonl").append(
            JobLogLine(
                seq=seq,
                stream="system" if text.startswith("resumed") else "stdout",
                text=text,
                at=time.time(),
            )
            for seq, text in enumerate(lines)
        )
    store.close()


def store_notebooks(home: Paths) -> None:
    """The notebook snapshot tests' notebooks (tests/tui/test_snapshots_notebooks.py), moved to
    the present."""
    shift = time.time() - NOTEBOOKS_NOW
    store = Store(home.database)
    for job in NOTEBOOKS:
        store.save_job(
            msgspec.structs.replace(
                job,
                created_at=job.created_at + shift,
                updated_at=job.updated_at + shift,
                started_at=None if job.started_at is None else job.started_at + shift,
                finished_at=None if job.finished_at is None else job.finished_at + shift,
            )
        )
    store.close()


def store_service(home: Paths) -> None:
    """The snapshot tests' running service job (tests/tui/test_snapshots_jobs.py) and its log."""
    shift = time.time() - NOW
    store = Store(home.database)
    assert SERVICE.started_at is not None
    store.save_job(
        msgspec.structs.replace(
            SERVICE,
            created_at=SERVICE.created_at + shift,
            updated_at=SERVICE.updated_at + shift,
            started_at=SERVICE.started_at + shift,
        )
    )
    store.close()
    JobLog(home.state_dir / "jobs" / SERVICE.job_id / "log.jsonl").append(
        JobLogLine(seq=seq, stream="stdout", text=text, at=time.time())
        for seq, text in enumerate(SERVICE_LOG)
    )


def store_running_job(home: Paths) -> None:
    """The provider snapshot tests' running GPU job and its log, moved to the present.

    Written while the engine runs: one it found running at start it would resume, and with
    no checkpoint end as interrupted. (Running a real one needs a consumer and a GPU
    container runtime; the picture needs only its record and its log.)
    """
    shift = time.time() - RUN_NOW
    moved = msgspec.structs.replace(
        RUNNING,
        created_at=RUNNING.created_at + shift,
        updated_at=RUNNING.updated_at + shift,
        started_at=(RUNNING.started_at or 0) + shift,
    )
    store = Store(home.database)
    store.save_job(moved)
    store.close()
    JobLog(home.state_dir / "jobs" / RUNNING.job_id / "log.jsonl").append(
        JobLogLine(seq=seq, stream="stdout", text=text, at=time.time())
        for seq, text in enumerate(TRAIN_LOG)
    )


def shoot_size(out: Path, size: tuple[int, int]) -> None:
    with tempfile.TemporaryDirectory(prefix="nunet-shots-") as tmp:
        host = fixed_host(Path(tmp) / "host", gpus=RIG_GPUS, clock=time.time)
        home = make_home(Path(tmp) / "home")
        store_jobs(home)
        engine = Engine(home, probes=host.probes).start()
        bob: Engine | None = None
        try:
            addrs = wait(lambda: engine.call_blocking(GetPeerSelf()).addrs, "listening")
            bob = start_bob(Path(tmp) / "bob", addrs[0])
            bob_id = bob.call_blocking(GetPeerSelf()).peer_id
            wait(
                lambda: any(
                    p.peer_id == bob_id and p.last_heartbeat
                    for p in engine.call_blocking(ListPeers()).peers
                ),
                "bob's heartbeat",
            )
            asyncio.run(tour(engine, bob, host.nvml, out, size))
        finally:
            if bob is not None:
                bob.close()
            engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "screenshots")
    parser.add_argument("--size", action="append", default=None, help="WIDTHxHEIGHT")
    parser.add_argument(
        "--only",
        choices=["payments", "billing"],
        help="only the wallet and rewards, or only the resources, account and billing screens",
    )
    args = parser.parse_args()
    sizes = [tuple(int(n) for n in s.split("x")) for s in (args.size or ["160x48", "80x24"])]
    args.out.mkdir(parents=True, exist_ok=True)
    # The wallet and rewards walk a home of their own (a local ledger, a new wallet).
    import screenshots_billing
    import screenshots_payments

    for width, height in sizes:
        if args.only is None:
            shoot_size(args.out, (width, height))
        if args.only in (None, "payments"):
            screenshots_payments.shoot_size(args.out, (width, height))
        if args.only in (None, "billing"):
            # What a provider sells and what a consumer pays (issue 12).
            screenshots_billing.shoot_size(args.out, (width, height))


if __name__ == "__main__":
    main()
