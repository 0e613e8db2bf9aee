"""What one scripting command costs against a running daemon (`nunet-tui peer list --json`,
as scripts and the end-to-end tests call it by the thousand), against the interpreter's own
start (`python -c pass`) and the bare import of the CLI, measured in the same run; and the
two ways the test suite now asks instead (tests/forkserver.py): the same command forked from
a zygote that imported the CLI, and the query through the daemon's control socket.

    .venv/bin/python bench/cli_call.py [--runs 15]

Starts `nunet-tui daemon` in a fresh home on 127.0.0.1, waits until it listens, then runs
each command in turn (A B C, A B C, ...) and prints the median wall time and CPU (user+sys
of the child, from the kernel; not measured for a fork, which is the zygote's child) of each,
and its ratio to the interpreter's start.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from engine import api
from engine.config import Paths
from engine.control_client import ControlClient
from nunet_tui.cli.demo_start import NODE_PRELOAD
from nunet_tui.cli.zygote import ZygoteClient

REPO = Path(__file__).resolve().parent.parent
PRELOAD = (*NODE_PRELOAD, "engine.control_client", "logging.handlers", "pickle")


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _forked(zygote: ZygoteClient, args: list[str], env: dict[str, str]) -> tuple[float, float]:
    devnull = os.open(os.devnull, os.O_WRONLY)
    start = time.perf_counter()
    try:
        child = zygote.fork("nunet_tui", args, env, "bench-cli", devnull, devnull, cwd=str(REPO))
    finally:
        os.close(devnull)
    code = child.wait(60)
    child.close()
    if code != 0:
        raise RuntimeError(f"the forked command exited {code}")
    return time.perf_counter() - start, float("nan")


def _in_process(call: Callable[[], object]) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - start, time.process_time() - cpu


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
        spawn = functools.partial(subprocess.Popen, cwd=REPO, process_group=0)
        zygote = ZygoteClient(
            spawn, PRELOAD, env=env, log=home / "zygote.log", tag=str(home), options=()
        )
        while not zygote.poll_ready(timeout=0.5):
            pass
        client = ControlClient(Paths.for_home(home).control_socket)
        peer_list = ["--home", str(home), "peer", "list", "--json"]
        commands: dict[str, Callable[[], tuple[float, float]]] = {
            "python -c pass": lambda: _timed([sys.executable, "-c", "pass"], env),
            "import nunet_tui.cli.main": lambda: _timed(
                [sys.executable, "-c", "import nunet_tui.cli.main"], env
            ),
            "peer list --json": lambda: _timed([*cli, "peer", "list", "--json"], env),
            "job list --json": lambda: _timed([*cli, "job", "list", "--json"], env),
            "forked: peer list --json": lambda: _forked(zygote, peer_list, env),
            "control socket: ListPeers": lambda: _in_process(
                lambda: client.call_blocking(api.ListPeers())
            ),
        }
        print(f"before: {os.getloadavg()[0]:.2f} load, {os.cpu_count()} CPUs")
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, timed in commands.items():
                figures[name].append(timed())
        base = statistics.median(w for w, _ in figures["python -c pass"])
        for name, runs in figures.items():
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            print(
                f"{name:28} wall {wall * 1000:8.1f} ms  cpu {cpu * 1000:8.1f} ms  "
                f"{wall / base:6.3f}x the interpreter's start"
            )
        print(f"after: {os.getloadavg()[0]:.2f} load; median of {args.runs} runs each")
        client.close()
        zygote.close()
    finally:
        daemon.terminate()
        daemon.wait(30)
        subprocess.run(["rm", "-rf", str(home)], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
