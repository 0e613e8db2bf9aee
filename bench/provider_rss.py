"""A provider daemon's memory over many short jobs: its RSS before and after.

Real daemons on 127.0.0.1 (a provider with the process executor, a consumer) and a local HTTP
server for the script. Each job prints LINES lines (default 5,000 of ~100 characters, about
half a megabyte); a finished job must leave no executor state or log buffer behind in the
provider's memory (its log stays on disk: `job logs` reads it from there). The RSS is read
from /proc after a warm-up of WARMUP jobs (libraries loaded, allocator grown) and after JOBS
more. Goal: growth < 20 MB over 200 jobs.
Usage: python bench/provider_rss.py [JOBS] [LINES]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import DaemonPair, rss_mb, serve_directory
from engine import api
from engine.domain.spec import JobSpec
from engine.errors import EngineError

WARMUP = 10
GOAL_MB = 20.0


def script(lines: int) -> str:
    return (
        "import sys\nw = sys.stdout.write\n"
        f"for i in range({lines}):\n    w(f'line {{i:08d}} ' + 'x' * 80 + '\\n')\n"
    )


def main() -> None:
    numbers = [int(a) for a in sys.argv[1:] if a.isdigit()]
    jobs = numbers[0] if numbers else 200
    lines = numbers[1] if len(numbers) > 1 else 5_000
    root = Path(tempfile.mkdtemp(prefix="nunet-bench-rss-"))
    (root / "www").mkdir()
    (root / "www" / "job.py").write_text(script(lines))
    url = serve_directory(root / "www")
    pair = DaemonPair(root, channel="nunet-demo-test")
    client, pclient = pair.consumer, pair.provider
    try:
        spec = JobSpec(script_url=f"{url}/job.py", framework="scikit-learn")

        def run_one() -> None:
            # The heartbeat saying the slot is free again may come just after the last end.
            for _ in range(100):
                try:
                    job = client.call_blocking(api.SubmitJob(spec=spec), timeout=60)
                    break
                except EngineError as exc:
                    if "busy" not in str(exc):
                        raise
                    time.sleep(0.1)
            else:
                raise SystemExit("the provider stayed busy")
            deadline = time.monotonic() + 120
            while (state := pclient.call_blocking(api.GetJob(job_id=job.job_id)).state) not in (
                api.TERMINAL_STATES
            ):
                if time.monotonic() > deadline:
                    raise SystemExit(f"job {job.job_id} stalled")
                time.sleep(0.05)
            if state != "completed":
                raise SystemExit(f"job {job.job_id} ended {state}")

        for _ in range(WARMUP):
            run_one()
        before = rss_mb(pair.procs[0].pid)
        began = time.monotonic()
        for _ in range(jobs):
            run_one()
        after = rss_mb(pair.procs[0].pid)
        took = time.monotonic() - began
        # The last job's log, read back after the run: from the provider's disk.
        last = pclient.call_blocking(api.ListJobs()).jobs[0]
        logs = pclient.call_blocking(api.GetJobLogs(job_id=last.job_id, limit=10))
        growth = after - before
        verdict = "met" if growth < GOAL_MB else "MISSED"
        print(
            f"provider RSS over {jobs} jobs of {lines:,} lines each (process executor, after "
            f"{WARMUP} warm-up jobs): before {before:.1f} MB, after {after:.1f} MB, growth "
            f"{growth:+.1f} MB ({took:.0f} s); goal < {GOAL_MB:g} MB: {verdict}"
        )
        print(
            f"last job's log read back: {len(logs.lines)} of {last.log_lines:,} lines, "
            f"first {logs.lines[0].text[:20]!r}"
        )
    finally:
        pair.close()


if __name__ == "__main__":
    main()
