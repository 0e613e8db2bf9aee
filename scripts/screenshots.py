"""Regenerate screenshots/*.svg by driving the real app on a real embedded engine.

    .venv/bin/python scripts/screenshots.py [--out screenshots] [--size 160x48 --size 80x24]

Each size gets a fresh temporary node home whose config declares the machine (so the
pictures show the same numbers everywhere) and a fixed identity key (so the same peer id).
What the engine probes from this host (OS, Docker, GPU drivers) is shown as found.
The script walks a provider through the first run: choose the mode, onboard (with a typo
first), pause, then looks at help, the command palette and consumer mode.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nacl.signing import SigningKey  # noqa: E402
from textual.pilot import Pilot  # noqa: E402
from textual.widgets import Input  # noqa: E402

from engine.api import GetCapacity  # noqa: E402
from engine.config import Paths  # noqa: E402
from engine.facade import Engine  # noqa: E402
from engine.identity import Identity, save  # noqa: E402
from nunet_tui.app import NunetApp  # noqa: E402

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
"""
SEED = bytes(range(32))
# A CIP-19 testnet base address, valid for the default nunet-test channel.
ADDRESS = (
    "addr_test1qz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3n0d3vllmyqwsx5wktcd8cc3sq835lu7"
    "drv2xwl2wywfgs68faae"
)


def make_home(root: Path) -> Paths:
    paths = Paths.for_home(root)
    paths.ensure()
    paths.config_file.write_text(MACHINE_TOML, encoding="utf-8")
    save(Identity(SigningKey(SEED)), paths.identity_key)
    return paths


async def until(pilot: Pilot[Any], predicate: Callable[[], bool], timeout: float = 15.0) -> None:
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


async def tour(engine: Engine, out: Path, size: tuple[int, int]) -> None:
    app = NunetApp(client=engine)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "screenshots")
    parser.add_argument("--size", action="append", default=None, help="WIDTHxHEIGHT")
    args = parser.parse_args()
    sizes = [tuple(int(n) for n in s.split("x")) for s in (args.size or ["160x48", "80x24"])]
    args.out.mkdir(parents=True, exist_ok=True)
    for width, height in sizes:
        with tempfile.TemporaryDirectory(prefix="nunet-shots-") as tmp:
            engine = Engine(make_home(Path(tmp) / "home")).start()
            try:
                asyncio.run(tour(engine, args.out, (width, height)))
            finally:
                engine.close()


if __name__ == "__main__":
    main()
