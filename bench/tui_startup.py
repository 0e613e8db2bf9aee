"""TUI cold start to first frame (goal < 1 s): a fresh process, imports, engine, first paint.

Each run is a new interpreter that starts the embedded engine and the app headless and stops at
Textual's Ready event (the first frame is on screen). The clock starts before the process does.
"""

from __future__ import annotations

import os
import subprocess
import time

from _common import PYTHON, REPO, cli, fresh_home, summary

CHILD = """
import os, sys, time
from engine.config import Paths
from engine.connect import open_client
from nunet_tui.app import NunetApp

class Timed(NunetApp):
    def on_ready(self) -> None:
        print(f"{time.time() - float(os.environ['BENCH_T0']):.4f}")
        self.exit()

client = open_client(Paths.for_home(sys.argv[1]), defer_network=True)
try:
    Timed(client=client).run(headless=True, size=(160, 48))
finally:
    client.close()
"""


def main() -> None:
    home = fresh_home()
    cli(home, "mode", "provider")
    samples: list[float] = []
    for _ in range(10):
        env = {**os.environ, "BENCH_T0": repr(time.time())}
        out = subprocess.run(
            [PYTHON, "-c", CHILD, str(home)],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            check=True,
        )
        samples.append(float(out.stdout.strip().splitlines()[-1]))
    print(summary("TUI cold start to first frame", samples, goal=1.0))


if __name__ == "__main__":
    main()
