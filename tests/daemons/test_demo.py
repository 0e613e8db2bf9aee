"""`nunet-tui demo --no-tui`: the sandbox a user (and the README) starts with."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine.config import Paths
from tests.conftest import REPO, run_cli
from tests.daemon_harness import wait_for


def test_demo_sandbox_runs_the_examples_and_stops_cleanly(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "nunet_tui", "demo", "--no-tui", "--root", str(tmp_path / "demo")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("NUNET_")},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:  # the sandbox did not start: show why
            proc.wait(30)
            raise AssertionError(proc.stderr.read() if proc.stderr else "no output")
        described = json.loads(line)
        consumer = Paths.for_home(described["consumer_home"])
        assert len(described["provider_homes"]) == 3

        def listed() -> int:
            result = run_cli("peer", "list", "--json", home=consumer)
            return len(json.loads(result.stdout)["peers"]) if result.returncode == 0 else 0

        wait_for(lambda: listed() == 3, "the consumer did not see the three providers", 30)
        jobs = {}
        for name in ("iris", "tensor_shape_error"):
            command = described["examples"][name].split()
            result = run_cli(*command[3:], "--json", home=consumer)
            assert result.returncode == 0, result.stderr
            jobs[name] = json.loads(result.stdout)["job_id"]

        def state(job_id: str) -> str:
            result = run_cli("job", "show", job_id, "--json", home=consumer)
            return str(json.loads(result.stdout)["state"])

        wait_for(lambda: state(jobs["iris"]) == "completed", "iris did not complete", 90)

        def escrow_state(job_id: str) -> str:
            listed = json.loads(run_cli("reward", "list", "--json", home=consumer).stdout)
            return next(e["state"] for e in listed["escrows"] if e["job_id"] == job_id)

        # Paid through the sandbox's ledger and oracle: the provider claimed the escrow.
        assert described["ledger_url"].startswith("http://127.0.0.1:")
        assert described["oracle_url"].startswith("http://127.0.0.1:")
        wait_for(lambda: escrow_state(jobs["iris"]) == "paid_out", "iris was never paid", 60)
        wait_for(lambda: state(jobs["tensor_shape_error"]) == "failed", "no failure", 90)
        shown = json.loads(
            run_cli("job", "show", jobs["tensor_shape_error"], "--json", home=consumer).stdout
        )
        assert "size of tensor a (5)" in shown["reason"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    # Every node of the sandbox is gone with it.
    time.sleep(0.5)
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path / "demo")], capture_output=True)
    assert leftover.stdout.strip() == b""
