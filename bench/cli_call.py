"""What one scripting command costs against a running daemon (`nunet-tui peer list --json`,
as scripts and the end-to-end tests call it by the thousand), against the interpreter's own
start (`python -c pass`) and the bare import of the CLI, measured in the same run.

    .venv/bin/python bench/cli_call.py [--runs 15]

Starts `nunet-tui daemon` in a fresh home on 127.0.0.1, waits until it listens, then runs
each command in turn (A B C, A B C, ...) and prints the median wall time and CPU (user+sys
of the child, from the kernel) of each, and the command's ratio to the interpreter's start.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="nunet-bench-cli-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUNET_")}
    env["NUNET_NETWORK_LISTEN"] = "/ip4/127.0.0.1/tcp/0"
    cli = [sys.executable, "-m", "nunet_tui", "--home", str(home)]
    daemon = subprocess.Popen(
        [*cli, "daemon"], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(
            [*cli, "--attach", "peer", "self", "--json"],
            cwd=REPO,
            env=env,
            capture_output=True,
        ).returncode:
            if time.monotonic() > deadline or daemon.poll() is not None:
                print("the daemon never answered")
                return 1
            time.sleep(0.2)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import nunet_tui.cli.main": [sys.executable, "-c", "import nunet_tui.cli.main"],
            "peer list --json": [*cli, "peer", "list", "--json"],
            "job list --json": [*cli, "job", "list", "--json"],
        }
        print(f"before: {os.getloadavg()[0]:.2f} load, {os.cpu_count()} CPUs")
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, argv in commands.items():
                figures[name].append(_timed(argv, env))
        base = statistics.median(w for w, _ in figures["python -c pass"])
        for name, runs in figures.items():
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            print(
                f"{name:28} wall {wall * 1000:6.0f} ms  cpu {cpu * 1000:6.0f} ms  "
                f"{wall / base:4.1f}x the interpreter's start"
            )
        print(f"after: {os.getloadavg()[0]:.2f} load; median of {args.runs} runs each")
    finally:
        daemon.terminate()
        daemon.wait(30)
        subprocess.run(["rm", "-rf", str(home)], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
