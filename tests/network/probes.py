"""Start probe processes inside lab namespaces and read their JSON-line events."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.netlab import Host, Lab

REPO = Path(__file__).resolve().parents[2]


def start(lab: Lab, host: Host, module: str, *args: str, **env: str) -> subprocess.Popen[str]:
    """`python -m module args` inside host's namespace, this checkout first on the path."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return lab.popen(
        host,
        [sys.executable, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        cwd=REPO,
    )


def next_event(proc: subprocess.Popen[str], timeout: float = 60) -> dict[str, Any]:
    """The next JSON event the process prints; fails with its stderr if it exits or stalls."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([proc.stdout], [], [], max(left, 0))
        line = proc.stdout.readline() if ready else ""
        if line.strip():
            event: dict[str, Any] = json.loads(line)
            return event
        if not ready or proc.poll() is not None:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"no event from {proc.args!r}; stderr:\n{err[-3000:]}")
