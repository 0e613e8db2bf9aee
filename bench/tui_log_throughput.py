"""Consumer-side log throughput: how many lines a second the job detail screen absorbs while
staying responsive.

The real app runs headless on a real embedded engine with a stored running job; its detail
screen is open. A feeder thread delivers ``JobLogEvent``s exactly as the engine's event
callback does (``app._deliver_event`` → ``post_message``), at a target rate and batch size.
A 10 ms Textual interval timer measures the UI's worst stall (how late it fires).

Goal: >= 50,000 lines/s absorbed with no UI stall over 100 ms.

    .venv/bin/python bench/tui_log_throughput.py [SECONDS]
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import fresh_home

from engine.api import JobInfo, JobLogEvent, JobLogLine, SetMode
from engine.config import Paths
from engine.domain.spec import JobSpec
from engine.facade import Engine
from engine.store import Store
from nunet_tui.app import NunetApp
from nunet_tui.messages import OpenJob
from nunet_tui.screens.job_detail import JobDetailScreen
from nunet_tui.widgets.job_log import JobLogView

JOB_ID = "bench0000001"
TICK_S = 0.01
# (lines per second, lines per event): big batches as a busy provider sends them, and small
# ones (many more events a second) as a worst case for the message path.
CASES = ((60_000, 200), (60_000, 20), (120_000, 1000))


def store_job(paths: Paths) -> None:
    paths.ensure()
    store = Store(paths.database)
    now = time.time()
    store.save_job(
        JobInfo(
            job_id=JOB_ID,
            role="consumer",
            state="running",
            provider="12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW",
            consumer="me",
            spec=JobSpec(name="firehose", script_url="http://127.0.0.1/x.py", framework="pytorch"),
            created_at=now,
            started_at=now,
            updated_at=now,
        )
    )
    store.close()


def make_events(count: int, batch: int, start_seq: int) -> list[JobLogEvent]:
    """The events to deliver, built beforehand: the producer's cost is not the UI's."""
    events = []
    for first in range(start_seq, start_seq + count, batch):
        lines = tuple(
            JobLogLine(
                seq=seq,
                stream="stdout",
                text=f"[epoch {seq // 5000:>3}] step {seq:>9} loss {1 / (1 + seq % 977):.5f} "
                f"acc 0.{seq % 10_000:04d}",
                at=0.0,
            )
            for seq in range(first, first + batch)
        )
        events.append(JobLogEvent(at=0.0, job_id=JOB_ID, lines=lines))
    return events


def feed(app: NunetApp, events: list[JobLogEvent], rate: int) -> int:
    """Deliver ``events`` at ``rate`` lines a second, as the engine's callback does."""
    began = time.perf_counter()
    sent = 0
    for event in events:
        due = began + sent / rate
        if (wait := due - time.perf_counter()) > 0:
            time.sleep(wait)
        app._deliver_event(event)
        sent += len(event.lines)
    return sent


async def run_case(app: NunetApp, pilot: object, rate: int, batch: int, seconds: float) -> str:
    screen = app.screen
    assert isinstance(screen, JobDetailScreen)
    view = screen.query_one(JobLogView)
    before = view.total
    worst = 0.0
    last = time.perf_counter()

    def tick() -> None:
        nonlocal worst, last
        now = time.perf_counter()
        worst = max(worst, now - last - TICK_S)
        last = now

    timer = app.set_interval(TICK_S, tick)
    loop = asyncio.get_running_loop()
    events = await loop.run_in_executor(
        None, make_events, int(rate * seconds), batch, screen.log_panel.last_seq + 1
    )
    gc.collect()
    worst = 0.0
    last = time.perf_counter()
    began = time.perf_counter()
    sent = await loop.run_in_executor(None, feed, app, events, rate)
    while view.total - before < sent and time.perf_counter() - began < seconds + 30:
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - began
    timer.stop()
    absorbed = view.total - before
    per_s = absorbed / elapsed
    ok = per_s >= 50_000 and worst <= 0.1 and absorbed == sent
    return (
        f"{rate:>7,} lines/s offered in events of {batch:>4}: {per_s:>9,.0f} lines/s absorbed "
        f"({absorbed:,} of {sent:,} in {elapsed:.2f} s), worst UI stall {worst * 1000:.0f} ms, "
        f"{len(view.lines):,} kept; goal >= 50,000 lines/s and <= 100 ms: "
        f"{'met' if ok else 'MISSED'}"
    )


async def main(seconds: float) -> None:
    home = Paths.for_home(fresh_home())
    store_job(home)
    engine = Engine(home, network=False).start()
    try:
        engine.call_blocking(SetMode(mode="consumer"))
        app = NunetApp(client=engine)
        async with app.run_test(size=(120, 40)) as pilot:
            while type(app.screen).__name__ != "ConsumerDashboard":
                await pilot.pause(0.05)
            app.post_message(OpenJob(JOB_ID))
            while not isinstance(app.screen, JobDetailScreen):
                await pilot.pause(0.05)
            screen = app.screen
            while not screen.log_panel.loaded:
                await pilot.pause(0.05)
            for rate, batch in CASES:
                print(await run_case(app, pilot, rate, batch, seconds), flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0))
