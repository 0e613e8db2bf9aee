"""Shared by the benchmarks: a throwaway home and the project's interpreter."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def fresh_home() -> Path:
    return Path(tempfile.mkdtemp(prefix="nunet-bench-"))


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "nunet_tui", "--home", str(home), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )


def summary(label: str, samples: list[float], unit: str = "s", goal: float | None = None) -> str:
    median = statistics.median(samples)
    text = (
        f"{label}: median {median:.3f} {unit}, min {min(samples):.3f}, max {max(samples):.3f} "
        f"(n={len(samples)})"
    )
    if goal is not None:
        verdict = "met" if median < goal else "MISSED"
        text += f"; goal < {goal} {unit}: {verdict} ({median / goal:.2f}x goal)"
    return text


def serve_directory(root: Path) -> str:
    """Serve ``root`` over HTTP on 127.0.0.1 from a daemon thread; its base URL."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass  # a line per request would drown the figures

    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def rss_mb(pid: int) -> float:
    """A process's resident memory now, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for pid {pid}")
