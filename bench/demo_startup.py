"""Time `nunet-tui demo --no-tui` from start to ready, stage by stage, for each start mode;
with ``--app``, `nunet-tui demo` itself, in the app, on a 160x48 pseudo-terminal.

    .venv/bin/python bench/demo_startup.py [--runs 3] [--modes spawn,fork] [--app]

Each run starts the demo in a fresh folder, reads its progress lines (``demo: STAGE (T s)``)
until ``ready`` (also timed from the exec: ``ready_from_exec``), adds up the CPU time every
process of the sandbox had used by then (from /proc, so a figure that depends little on what
else the machine runs), stops it with SIGTERM and times the stop. Modes alternate run by run
(``NUNET_TUI_DEMO_START``: ``spawn`` is a fresh interpreter per process, the old path;
``fork`` the zygotes), so both see the same load. Prints each run, then the median per mode
and stage, with ``uptime`` before and after.

``--app`` times what a person sees: from the exec to the app's first frame (``first_frame``)
and to its header saying the sandbox's three providers are online (``usable``: the market
is there to submit to), besides the same progress stages.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^demo: (?P<stage>.+) \((?P<t>[0-9.]+) s\)$")
TICKS = os.sysconf("SC_CLK_TCK")


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _cpu_seconds(root: Path, demo_pid: int) -> float:
    """utime+stime of the demo and of every process whose command line names ``root``."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(entry.name) != demo_pid and str(root).encode() not in cmdline:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
    return total


def run_once(mode: str, timeout: float) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="nunet-bench-demo-")) / "demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUNET_")}
    env["NUNET_TUI_DEMO_START"] = mode
    argv = [sys.executable, "-m", "nunet_tui", "demo", "--no-tui", "--root", str(root)]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stages: dict[str, float] = {}
    stages_note: list[str] = []
    assert proc.stderr is not None
    launched = time.monotonic()
    deadline = time.monotonic() + timeout
    try:
        for line in proc.stderr:
            if line.startswith("nunet-tui:"):  # why it ended before ready
                stages_note.append(line.strip())
            match = LINE.match(line.strip())
            if match:
                stage = match["stage"]
                stage = "starting" if stage.startswith("starting") else stage
                stages[stage] = float(match["t"])
                if stage == "ready":
                    # The progress clock starts in run_demo, after the CLI's own imports.
                    stages["ready_from_exec"] = time.monotonic() - launched
                    stages["cpu_s"] = _cpu_seconds(root, proc.pid)
                    break
            if time.monotonic() > deadline:  # checked per line: a silent hang waits longer
                break
    finally:
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        stages["stop_s"] = time.monotonic() - stopped
        subprocess.run(["rm", "-rf", str(root.parent)], check=False)
    if "ready" not in stages and stages_note:
        print(f"{mode}: {stages_note[-1]}")
    return stages


# What the app writes when its first frame goes up (the alternate screen), and when its header
# says the consumer sees the sandbox's providers (nunet_tui/widgets: "online · 3 peers").
FIRST_FRAME = b"\x1b[?1049h"
USABLE = "online · 3 peers".encode()
PROGRESS = re.compile(rb"demo: (?P<stage>[^\r\n(]+?) \((?P<t>[0-9.]+) s\)")


def run_app_once(mode: str, timeout: float) -> dict[str, float]:
    """`nunet-tui demo` in the app on a 160x48 pseudo-terminal, to "online · 3 peers"."""
    root = Path(tempfile.mkdtemp(prefix="nunet-bench-demo-")) / "demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUNET_")}
    env.update(NUNET_TUI_DEMO_START=mode, TERM="xterm-256color", COLUMNS="160", LINES="48")
    argv = [sys.executable, "-m", "nunet_tui", "demo", "--root", str(root)]
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
    launched = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    stages: dict[str, float] = {}
    seen = b""
    deadline = launched + timeout

    def drain(until: float) -> bytes:
        got = b""
        while (left := until - time.monotonic()) > 0:
            ready, _, _ = select.select([master], [], [], min(left, 0.05))
            if not ready:
                if got:
                    return got
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                return got
            if not chunk:
                return got
            got += chunk
        return got

    try:
        while time.monotonic() < deadline and "usable" not in stages:
            chunk = drain(deadline)
            if not chunk and proc.poll() is not None:
                break
            seen += chunk
            now = time.monotonic() - launched
            for match in PROGRESS.finditer(seen):
                stage = match["stage"].decode(errors="replace").strip()
                stage = "starting" if stage.startswith("starting") else stage
                stages.setdefault(stage, float(match["t"]))
            if FIRST_FRAME in seen:
                stages.setdefault("first_frame", now)
            if USABLE in seen:
                stages["usable"] = now
                stages["cpu_s"] = _cpu_seconds(root, proc.pid)
    finally:
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        end = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < end:
            drain(time.monotonic() + 0.2)  # a full terminal would block the app's exit
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        stages["stop_s"] = time.monotonic() - stopped
        os.close(master)
        subprocess.run(["rm", "-rf", str(root.parent)], check=False)
    return stages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="spawn,fork")
    parser.add_argument("--timeout", type=float, default=300.0, help="per run, to ready")
    parser.add_argument("--app", action="store_true", help="`demo` in the app, not --no-tui")
    args = parser.parse_args()
    once = run_app_once if args.app else run_once
    goal = "usable" if args.app else "ready"
    modes = [m for m in args.modes.split(",") if m]
    print(f"before: {_uptime()}  ({os.cpu_count()} CPUs)")
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for run in range(args.runs):
        for mode in modes:
            stages = once(mode, args.timeout)
            shown = ", ".join(f"{k} {v:.1f}" for k, v in stages.items())
            if goal not in stages:
                print(f"run {run + 1} {mode}: not ready in {args.timeout:.0f} s ({shown})")
                continue
            results[mode].append(stages)
            print(f"run {run + 1} {mode}: {shown}", flush=True)
    print(f"after: {_uptime()}")
    print("median (s) over", args.runs, "runs:")
    for mode in modes:
        if not results[mode]:
            print(f"  {mode}: no run got to ready")
            continue
        keys = [k for k in results[mode][0] if all(k in r for r in results[mode])]
        shown = ", ".join(f"{k} {statistics.median(r[k] for r in results[mode]):.1f}" for k in keys)
        print(f"  {mode}: {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
