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
