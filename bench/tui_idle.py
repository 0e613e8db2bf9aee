"""Idle CPU and RSS of the TUI with its embedded engine over 30 s.

Goals: < 1% of a core, < 150 MB.
"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
from _common import PYTHON, REPO, cli, fresh_home

CHILD = """
import sys
from engine.config import Paths
from engine.connect import open_client
from nunet_tui.app import NunetApp

client = open_client(Paths.for_home(sys.argv[1]), defer_network=True)
try:
    NunetApp(client=client).run(headless=True, size=(160, 48))
finally:
    client.close()
"""


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    home = fresh_home()
    cli(home, "mode", "provider")
    proc = subprocess.Popen([PYTHON, "-c", CHILD, str(home)], cwd=REPO)
    try:
        ps = psutil.Process(proc.pid)
        time.sleep(3.0)  # past start-up
        before = ps.cpu_times()
        began = time.monotonic()
        time.sleep(seconds)
        after = ps.cpu_times()
        elapsed = time.monotonic() - began
        rss_mb = ps.memory_info().rss / 2**20
        cpu = (after.user + after.system - before.user - before.system) / elapsed * 100
        print(
            f"idle over {elapsed:.0f} s: {cpu:.2f}% of one core (goal < 1%: "
            f"{'met' if cpu < 1 else 'MISSED'}), RSS {rss_mb:.0f} MB (goal < 150 MB: "
            f"{'met' if rss_mb < 150 else 'MISSED'})"
        )
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
