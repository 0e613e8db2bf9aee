"""The provider side's live log: a running job's lines reach the node's event sink as
``JobLogEvent``s (the job view follows them instead of polling), batched per job so that a
chatty job cannot flood the UI or a control client's event queue."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from engine import api
from engine.jobs.log_events import MAX_EVENT_LINES, LogEvents
from engine.jobs.provider import ProviderJobs
from engine.resources.machine import MachineFacts
from tests.fakes.context import make_context, onboard
from tests.fakes.network import FakeNetwork
from tests.unit.test_unit_provider_jobs import CONSUMER, spec


def _lines(first: int, count: int) -> list[api.JobLogLine]:
    return [
        api.JobLogLine(seq=seq, stream="stdout", text=f"line {seq}", at=0.0)
        for seq in range(first, first + count)
    ]


def test_lines_added_within_an_interval_go_out_in_one_event_each_once_in_order() -> None:
    sent: list[api.Event] = []

    async def main() -> None:
        events = LogEvents(sent.append, "0123456789ab", interval=0.2)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(events.run)
            events.add(_lines(0, 1))
            await trio.sleep(0.01)  # the first line goes at once
            assert len(sent) == 1
            for n in range(100):  # a chatty job: 100 batches within one interval
                events.add(_lines(1 + n * 10, 10))
                await trio.sleep(0.001)
            assert len(sent) == 1  # held back until the interval has passed
            await trio.sleep(0.2)
            assert len(sent) == 2
            events.add([])  # nothing new: nothing sent
            await trio.sleep(0.5)
            assert len(sent) == 2
            events.add(_lines(1001, 5))
            events.close()  # the rest goes out, and run ends
        assert len(sent) == 3

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert all(isinstance(e, api.JobLogEvent) and e.job_id == "0123456789ab" for e in sent)
    seqs = [line.seq for e in sent for line in e.lines]  # type: ignore[attr-defined]
    assert seqs == list(range(1006))


def test_a_flood_is_cut_into_events_of_a_bounded_size() -> None:
    sent: list[api.Event] = []
    events = LogEvents(sent.append, "0123456789ab")
    events.add(_lines(0, MAX_EVENT_LINES * 2 + 3))
    events.flush()
    sizes = [len(e.lines) for e in sent]  # type: ignore[attr-defined]
    assert sizes == [MAX_EVENT_LINES, MAX_EVENT_LINES, 3]


def test_a_provider_emits_its_running_jobs_lines_as_log_events(tmp_path: Path) -> None:
    """A real process executor: every line the job prints (and the provider's own closing
    notes) reaches the event sink once, in order, the same lines its log file holds."""
    from engine.config import JobSettings
    from engine.jobs.executors.process import ProcessExecutor

    ctx, emitted = make_context(
        tmp_path, jobs=JobSettings(executors=["process"], checkpoint_interval_s=0)
    )
    onboard(ctx)
    executor = ProcessExecutor()
    provider = ProviderJobs(
        ctx, {"process": executor}, network=FakeNetwork, machine=MachineFacts(ctx)
    )
    job = api.JobInfo(
        job_id="0000000000aa",
        role="provider",
        state="accepted",
        provider=ctx.identity.peer_id,
        consumer=CONSUMER,
        spec=spec(),
        executor="process",
        price_units_hour=1_000_000,
    )
    script = b"for i in range(3000):\n    print('step', i, flush=i % 100 == 0)\n"

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(executor.serve)
            ctx.store.save_job(job)
            await provider._run(job, None, script)
            nursery.cancel_scope.cancel()

    trio.run(main)
    log_events = [e for e in emitted if isinstance(e, api.JobLogEvent)]
    assert log_events and all(e.job_id == job.job_id for e in log_events)
    sent = [line for e in log_events for line in e.lines]
    assert sent == provider.job_log(job.job_id).read(limit=10_000)
    printed = [line.text for line in sent if line.stream == "stdout"]
    assert printed == [f"step {i}" for i in range(3000)]
