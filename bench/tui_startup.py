"""TUI cold start to first frame, beside a minimal Textual app with a header and a footer
(goal: at most 1.3x the minimal app). Printed side by side with the ratio.

Each run is a new interpreter that stops at Textual's Ready event (the first frame is on
screen). Ours is launched as the ``nunet-tui`` command is (``nunet_tui.cli.main:main`` on a
provider home), so it pays for everything a user waits for: the CLI, the choice of engine,
the app; the embedded engine itself opens after the first frame, as the header says. The
clock starts before the process does. The two kinds of run alternate, so a busy moment of
the machine weighs on both alike.
Usage: python bench/tui_startup.py [RUNS]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from _common import PYTHON, REPO, cli, fresh_home

GOAL_RATIO = 1.3

# Textual's App.run, headless and stopping at the first Ready: the app itself is untouched
# (main imports it when it launches it, as it always does).
CHILD = """
import os, sys, time
from textual.app import App

_run = App.run

def run(self, *args, **kwargs):
    first_frame = type(self).on_ready

    def on_ready(app):
        print(f"{time.time() - float(os.environ['BENCH_T0']):.4f}", flush=True)
        first_frame(app)
        app.exit()

    type(self).on_ready = on_ready
    return _run(self, headless=True, size=(160, 48))

App.run = run
from nunet_tui.cli.main import main
sys.exit(main(["--home", sys.argv[1]]))
"""

MINIMAL = """
import os, time
from textual.app import App
from textual.widgets import Footer, Header

class Minimal(App[None]):
    BINDINGS = [("q", "quit", "Quit")]

    def compose(self):
        yield Header()
        yield Footer()

    def on_ready(self) -> None:
        print(f"{time.time() - float(os.environ['BENCH_T0']):.4f}")
        self.exit()

Minimal().run(headless=True, size=(160, 48))
"""


def _run(code: str, *args: str) -> float:
    env = {**os.environ, "BENCH_T0": repr(time.time())}
    # An installed package runs from bytecode (pip compiles it, as it did Textual's): let the
    # uncounted first run write ours, rather than compile every module from source each run.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run(
        [PYTHON, "-c", code, *args], capture_output=True, text=True, env=env, cwd=REPO, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    home = fresh_home()
    cli(home, "mode", "provider")
    ours: list[float] = []
    minimal: list[float] = []
    _run(MINIMAL)  # warm the OS file cache for both, uncounted
    _run(CHILD, str(home))
    for _ in range(runs):
        minimal.append(_run(MINIMAL))
        ours.append(_run(CHILD, str(home)))
    print(f"{'to first frame (s)':<28}{'median':>8}{'min':>8}{'max':>8}")
    for label, samples in (("minimal Textual app", minimal), ("nunet-tui (the command)", ours)):
        print(
            f"{label:<28}{statistics.median(samples):>8.3f}{min(samples):>8.3f}{max(samples):>8.3f}"
        )
    ratio = statistics.median(ours) / statistics.median(minimal)
    verdict = "met" if ratio <= GOAL_RATIO else "MISSED"
    print(f"ratio {ratio:.2f}x the minimal app (goal <= {GOAL_RATIO}x: {verdict}; n={runs})")


if __name__ == "__main__":
    main()
