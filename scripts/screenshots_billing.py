"""The billing pictures (issue 12): screenshots/resources-*.svg, account.svg, submit-spec.svg,
cancel-paid.svg.

    .venv/bin/python scripts/screenshots_billing.py [--out screenshots] [--size 160x48 ...]

(``scripts/screenshots.py`` runs this too; ``--only billing`` there runs just this.) A
provider on the fixed rig of tests/doubles/host.py, onboarded, defines what it sells through
the engine's own commands (the snapshot tests' custom resources, specs, group and pool) and
the Resources screen is shot tab by tab, then with a new spec's form showing its problems as
typed. A consumer's account, submit form and cancel dialog are shot on a second engine whose
records are the snapshot tests' (a finished paid job; a provider's advert with specs; a
running paid job), scripted with tests/pilot.py's FakeEngineClient.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from textual.widgets import Input  # noqa: E402

from engine.api import (  # noqa: E402
    EscrowList,
    GetJob,
    GetJobLogs,
    JobLogs,
    OnboardRequest,
    RewardList,
    SetMode,
)
from engine.facade import Engine  # noqa: E402
from nunet_tui.app import NunetApp  # noqa: E402
from nunet_tui.screens.job_detail import JobDetailScreen  # noqa: E402
from screenshots import on, shoot, until  # noqa: E402  (the main tour's helpers)
from tests.conftest import MACHINE_TOML, TEST_ADDRESS, make_home  # noqa: E402
from tests.doubles.fake_pynvml import FakeNvml  # noqa: E402
from tests.doubles.host import fixed_host  # noqa: E402
from tests.tui import test_tui_billing as billing  # noqa: E402
from tests.tui import test_tui_paid_job_walk as walk  # noqa: E402
from tests.tui.test_snapshots_provider_jobs import RIG_TOML, _rig  # noqa: E402
from tests.tui.test_snapshots_resources import define  # noqa: E402


async def provider_tour(engine: Engine, out: Path, size: tuple[int, int]) -> None:
    app = NunetApp(client=engine)
    async with app.run_test(size=size) as pilot:
        await until(pilot, on(pilot, "ProviderDashboard"))
        await until(pilot, lambda: app.node is not None)
        await pilot.press("e")
        await until(pilot, lambda: getattr(app.screen, "listing", None) is not None)
        for key, name in (("1", "system"), ("2", "custom"), ("3", "specs"), ("4", "pools")):
            await pilot.press(key)
            await pilot.pause(0.2)
            await shoot(pilot, out, f"resources-{name}", size)
        await pilot.press("3", "n")
        screen = app.screen
        for box, text in (
            ("spec-name", "gpu huge"),
            ("spec-cpu_cores", "64"),
            ("spec-ram_mb", "4096"),
            ("spec-gpus", "1"),
            ("spec-gpu_resource", "RTX 3090"),
            ("spec-price_units_hour", "1.0000001"),
            ("spec-pool", "vip"),
        ):
            screen.query_one(f"#{box}", Input).value = text
        await pilot.pause(0.2)
        await shoot(pilot, out, "resources-spec-form", size)


async def consumer_tour(engine: Engine, out: Path, size: tuple[int, int]) -> None:
    app = NunetApp(client=walk.client_for(engine, "consumer"), clock=lambda: walk.NOW)  # type: ignore[arg-type]
    async with app.run_test(size=size) as pilot:
        await until(pilot, on(pilot, "ConsumerDashboard"))
        await pilot.press("a")
        await until(pilot, lambda: getattr(app.screen, "account", None) is not None)
        await shoot(pilot, out, "account", size)

    app = NunetApp(client=billing.consumer_client(engine), clock=lambda: billing.T0)  # type: ignore[arg-type]
    async with app.run_test(size=size) as pilot:
        await until(pilot, on(pilot, "ConsumerDashboard"))
        await pilot.press("s")
        await until(pilot, lambda: bool(getattr(app.screen, "peers", None)))
        for field, text in (
            ("script_url", "https://example.org/train.py"),
            ("expected_minutes", "30"),
            ("max_minutes", "60"),
            ("budget_ntx", "1"),
        ):
            app.screen.query_one(f"#{field}", Input).value = text
        await pilot.pause(0.3)
        await shoot(pilot, out, "submit-spec", size)

    job = billing.running_job()
    client = billing.consumer_client(
        engine,
        {
            GetJob: job,
            GetJobLogs: JobLogs(job_id=job.job_id),
            RewardList: EscrowList(escrows=(billing.locked_escrow(),)),
        },
    )
    app = NunetApp(client=client, clock=lambda: billing.T0 + 15 * 60)  # type: ignore[arg-type]
    async with app.run_test(size=size) as pilot:
        await until(pilot, on(pilot, "ConsumerDashboard"))
        app.push_screen(JobDetailScreen(job.job_id))
        await until(pilot, lambda: getattr(app.screen, "escrow", None) is not None)
        await pilot.press("x")
        await until(pilot, on(pilot, "ConfirmScreen"))
        await shoot(pilot, out, "cancel-paid", size)


def shoot_size(out: Path, size: tuple[int, int]) -> None:
    with tempfile.TemporaryDirectory(prefix="nunet-shots-bill-") as tmp:
        root = Path(tmp)
        gpus = _rig()
        host = fixed_host(root / "host", gpus=gpus, nvml=FakeNvml(gpus=gpus), clock=time.time)
        provider = Engine(
            make_home(root / "provider", machine_toml=RIG_TOML), network=False, probes=host.probes
        ).start()
        try:
            provider.call_blocking(SetMode(mode="provider"))
            provider.call_blocking(
                OnboardRequest(memory_mb=8_192, cpu_mhz=8_000, address=TEST_ADDRESS)
            )
            define(provider)
            asyncio.run(provider_tour(provider, out, size))
        finally:
            provider.close()
        consumer = Engine(
            make_home(root / "consumer", machine_toml=MACHINE_TOML), network=False
        ).start()
        try:
            asyncio.run(consumer_tour(consumer, out, size))
        finally:
            consumer.close()


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "screenshots")
    parser.add_argument("--size", action="append", default=None, help="WIDTHxHEIGHT")
    args = parser.parse_args(argv)
    sizes = [tuple(int(n) for n in s.split("x")) for s in (args.size or ["160x48", "80x24"])]
    args.out.mkdir(parents=True, exist_ok=True)
    for width, height in sizes:
        shoot_size(args.out, (width, height))


if __name__ == "__main__":
    main()
