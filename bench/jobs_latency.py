"""Submit -> first log line at the consumer, and the consumer's log throughput.

Real daemons on 127.0.0.1 (a provider with the process executor, a consumer) and a local HTTP
server for the scripts; the consumer is watched through its control socket's JobLogEvents,
the way the TUI sees them. Goals: first line < 1 s with the process executor; >= 50,000
lines/s arriving at the consumer.
Usage: python bench/jobs_latency.py [ROUNDS] [--docker]   (--docker: DOCKER_HOST must answer and
the test image be present: `bash scripts/dockerd.sh start`, `bash scripts/build_test_image.sh`;
goal < 2 s)
"""

from __future__ import annotations

import functools
import http.server
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import DaemonPair
from engine import api
from engine.domain.spec import JobSpec
from engine.errors import EngineError

HELLO = 'print("hello", flush=True)\n'
FLOOD = "import sys\nw = sys.stdout.write\nfor i in range(200_000):\n    w(f'line {i}\\n')\n"


def serve(root: Path) -> str:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def main() -> None:
    docker = "--docker" in sys.argv
    numbers = [a for a in sys.argv[1:] if a.isdigit()]
    rounds = int(numbers[0]) if numbers else 5
    root = Path(tempfile.mkdtemp(prefix="nunet-bench-jobs-"))
    (root / "www").mkdir()
    (root / "www" / "hello.py").write_text(HELLO)
    (root / "www" / "flood.py").write_text(FLOOD)
    url = serve(root / "www")
    pair = DaemonPair(root, channel="nunet-demo-test", docker=docker)
    client = pair.consumer
    try:
        first_lines: dict[str, float] = {}
        counts: dict[str, list[float]] = {}

        def on_event(event: api.Event) -> None:
            if isinstance(event, api.JobLogEvent):
                now = time.perf_counter()
                first_lines.setdefault(event.job_id, now)
                counts.setdefault(event.job_id, []).extend([now] * len(event.lines))

        client.subscribe(on_event)

        def submit(spec: dict[str, str]) -> tuple[api.JobInfo, float]:
            # The provider's heartbeat saying its slot is free again may arrive just after
            # the last job's end: a "busy" refusal then is a matter of milliseconds.
            for _ in range(50):
                began = time.perf_counter()
                try:
                    return client.call_blocking(api.SubmitJob(spec=spec), timeout=60), began
                except EngineError as exc:
                    if "busy" not in str(exc):
                        raise
                    time.sleep(0.1)
            raise SystemExit("the provider stayed busy")

        def run(script: str, wait_lines: int) -> tuple[str, float]:
            spec = JobSpec(script_url=f"{url}/{script}", framework="scikit-learn")
            job, began = submit(spec)
            deadline = time.monotonic() + 120
            while len(counts.get(job.job_id, [])) < wait_lines:
                if time.monotonic() > deadline:
                    raise SystemExit(f"job {job.job_id} stalled")
                time.sleep(0.01)
            while client.call_blocking(api.GetJob(job_id=job.job_id)).state not in (
                api.TERMINAL_STATES
            ):
                time.sleep(0.05)
            return job.job_id, began

        latencies = []
        for _ in range(rounds):
            job_id, began = run("hello.py", 1)
            latencies.append(first_lines[job_id] - began)
        print(
            f"submit -> first log line at the consumer ({'docker' if docker else 'process'} "
            "executor): median "
            f"{statistics.median(latencies):.3f} s, min {min(latencies):.3f}, "
            f"max {max(latencies):.3f} (n={rounds}; goal < {2 if docker else 1} s)"
        )
        job_id, _ = run("flood.py", 200_000)
        stamps = counts[job_id]
        span = stamps[-1] - stamps[0]
        print(
            f"consumer log throughput: {len(stamps):,} lines in {span:.2f} s = "
            f"{len(stamps) / span:,.0f} lines/s (goal >= 50,000)"
        )
    finally:
        pair.close()


if __name__ == "__main__":
    main()
