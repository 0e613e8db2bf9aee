"""``ProviderJobs`` on its own: a real context (store, identity) and fakes of its ports
(network, escrow). The offer is judged, quoted and held as the job protocol says; the
escrow and the network are reached only through their ports."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from engine import api
from engine.domain import wire
from engine.domain.matching import NoMatch
from engine.domain.spec import GitSource, JobSpec, offer_spec
from engine.jobs import protocol as p
from engine.jobs.consumer import ConsumerJobs
from engine.jobs.provider import ProviderJobs
from engine.resources.machine import MachineFacts
from tests.fakes.context import identity, make_context, onboard
from tests.fakes.escrows import FakeEscrows
from tests.fakes.executor import FakeIdleExecutor
from tests.fakes.network import FakeNetwork, FakePeerLink, provider_info, stream_pair

CONSUMER = identity(9).peer_id


def spec(**fields: Any) -> JobSpec:
    values: dict[str, Any] = {"framework": "scikit-learn", "script_url": "https://h/x.py"}
    values.update(fields)
    return JobSpec(**values)


def build(
    tmp_path: Path, *, onboarded: bool = True, escrows: FakeEscrows | None = None
) -> tuple[ProviderJobs, FakeNetwork, list[api.Event]]:
    ctx, events = make_context(tmp_path, payments=escrows is not None)
    if onboarded:
        onboard(ctx)
    network = FakeNetwork()
    jobs = ProviderJobs(
        ctx,
        {"process": FakeIdleExecutor()},  # type: ignore[dict-item]  # nothing starts here
        network=lambda: network,
        escrows=(lambda: escrows) if escrows is not None else None,
        machine=MachineFacts(ctx),
    )
    return jobs, network, events


def offer(job_id: str = "0123456789ab", **fields: Any) -> p.Offer:
    return p.Offer(job_id=job_id, spec=spec(**fields), consumer=CONSUMER)


def test_a_provider_that_is_not_onboarded_refuses_an_offer_over_the_wire(
    tmp_path: Path,
) -> None:
    """A real consumer offers through the fake network; the provider's stream handler answers
    with a refusal, which the consumer reports, and neither side keeps a job."""
    provider, _, provider_events = build(tmp_path / "provider", onboarded=False)
    consumer_ctx, _ = make_context(tmp_path / "consumer", seed=9)
    link = FakePeerLink(me=consumer_ctx.identity.peer_id)
    link.add(provider_info(provider.ctx.identity.peer_id), provider.handle)
    consumer = ConsumerJobs(consumer_ctx, network=lambda: FakeNetwork(link))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            link.nursery = nursery
            command = api.SubmitJob(spec=spec())
            with pytest.raises(NoMatch) as info:
                await consumer.submit(command)
            assert "not accepting jobs (not onboarded or paused)" in str(info.value)

    trio.run(main)
    assert link.opened == [(provider.ctx.identity.peer_id, p.JOB_PROTOCOL)]
    assert provider.ctx.store.list_jobs() == [] and provider_events == []
    assert len(provider._quotes) == 0


def test_an_onboarded_provider_quotes_a_signed_offer_with_its_wallet_and_holds_it(
    tmp_path: Path,
) -> None:
    escrows = FakeEscrows(address="addr_test1qprovider")
    provider, _, _ = build(tmp_path, escrows=escrows)
    quote = provider._offer(offer(), CONSUMER, b"offer-bytes")
    assert isinstance(quote, p.Quote), quote
    assert quote.provider == provider.ctx.identity.peer_id
    assert quote.payment_address == "addr_test1qprovider"  # asked of the escrow port
    assert quote.total_ntx == pytest.approx(1.0 * 10 / 60, abs=1e-6)  # low tier, 10 min
    assert quote.expires_at > time.time()
    held = provider._quotes.get("0123456789ab")
    assert held is not None and held.consumer == CONSUMER and held.offer_raw == b"offer-bytes"
    # What is held is the quote as signed: the consumer can check it came from this peer.
    signed, _ = p.decode(held.quote_raw, provider.ctx.identity.peer_id)
    assert signed == quote
    assert provider.ctx.store.list_jobs() == []  # nothing stored before a Confirm


def test_a_paid_offer_is_refused_when_the_provider_has_no_wallet(tmp_path: Path) -> None:
    provider, _, _ = build(tmp_path, escrows=FakeEscrows(address=""))
    answer = provider._offer(offer(), CONSUMER, b"")
    assert answer == p.Refusal(
        job_id="0123456789ab", reason="this provider has no wallet to be paid into yet"
    )
    assert len(provider._quotes) == 0


def test_a_paid_confirm_is_refused_with_the_escrow_ports_reason_and_runs_nothing(
    tmp_path: Path,
) -> None:
    reason = "no matching escrow lock on the chain (tx abababababababab...)"
    escrows = FakeEscrows(verify_reason=reason)
    provider, network, events = build(tmp_path, escrows=escrows)
    quote = provider._offer(offer(), CONSUMER, b"")
    assert isinstance(quote, p.Quote)
    confirm = p.Confirm(
        job_id=quote.job_id, total_ntx=quote.total_ntx, escrow_tx="cd" * 32, escrow_terms="{}"
    )
    answer, created = trio.run(provider._confirm, confirm, CONSUMER, b"confirm")
    assert answer == p.Refusal(job_id=quote.job_id, reason=reason) and not created
    assert escrows.called("verify_lock") == [
        (quote.job_id, CONSUMER, quote.lock_units, "{}", "cd" * 32)
    ]
    assert provider.ctx.store.list_jobs() == [] and events == [] and network.beats == 0


def test_a_countersignature_goes_to_the_escrow_port_and_only_with_payments(
    tmp_path: Path,
) -> None:
    unpaid, _, _ = build(tmp_path / "unpaid")
    message = p.Countersign(job_id="0123456789ab", receipt="{}")
    assert unpaid._countersigned(message, CONSUMER) == p.Refusal(
        job_id="0123456789ab", reason="this provider takes no payments"
    )
    escrows = FakeEscrows(countersign_reason="this job belongs to another consumer")
    paid, _, _ = build(tmp_path / "paid", escrows=escrows)
    assert paid._countersigned(message, CONSUMER) == p.Refusal(
        job_id="0123456789ab", reason="this job belongs to another consumer"
    )
    assert escrows.called("accept_countersigned") == [("0123456789ab", CONSUMER, "{}")]
    escrows.countersign_reason = ""
    assert paid._countersigned(message, CONSUMER) == p.Accepted(job_id="0123456789ab")


def test_a_job_changing_state_is_announced_and_beats_through_the_network_port(
    tmp_path: Path,
) -> None:
    provider, network, events = build(tmp_path)
    job = api.JobInfo(
        job_id="0123456789ab",
        role="provider",
        state="accepted",
        provider=provider.ctx.identity.peer_id,
        consumer=CONSUMER,
        spec=spec(),
    )
    saved = provider._save(job)
    assert network.beats == 1  # free slots changed: a heartbeat at once
    provider._save(msgspec.structs.replace(saved, checkpoint=1))
    assert network.beats == 1  # the same state: no extra beat
    provider._save(msgspec.structs.replace(saved, state="running"))
    assert network.beats == 2
    assert [e.job.state for e in events if isinstance(e, api.JobChanged)] == [
        "accepted",
        "accepted",
        "running",
    ]
    assert provider.committed().jobs == 1  # what the heartbeat subtracts from free figures


def test_finished_jobs_leave_no_executor_state_and_their_logs_are_read_from_disk(
    tmp_path: Path,
) -> None:
    """A real process executor: after each job ends, neither the executor nor the provider
    holds its run (the log buffer went with it), and only the last few logs stay open; an
    early job's log is read back from its file."""
    from engine.config import JobSettings
    from engine.jobs.executors.process import ProcessExecutor

    ctx, _ = make_context(
        tmp_path, jobs=JobSettings(executors=["process"], checkpoint_interval_s=0)
    )
    onboard(ctx)
    executor = ProcessExecutor()
    provider = ProviderJobs(
        ctx, {"process": executor}, network=FakeNetwork, machine=MachineFacts(ctx)
    )
    keep = provider._logs.keep
    jobs = [
        api.JobInfo(
            job_id=f"{n:012x}",
            role="provider",
            state="accepted",
            provider=ctx.identity.peer_id,
            consumer=CONSUMER,
            spec=spec(),
            executor="process",
            price_units_hour=1_000_000,
        )
        for n in range(keep + 3)
    ]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(executor.serve)
            for n, job in enumerate(jobs):
                ctx.store.save_job(job)
                script = f"for i in range(50):\n    print('job {n} line', i)\n"
                await provider._run(job, None, script.encode())
                assert provider._runs == {} and executor._runs == {}, n
            nursery.cancel_scope.cancel()

    trio.run(main)
    for job in jobs:
        ended = ctx.store.get_job(job.job_id)
        assert ended is not None and ended.state == "completed" and ended.log_lines >= 50
    assert len(provider._logs) == keep  # the newest few; the others were closed
    first = provider.job_log(jobs[0].job_id).read(limit=1000)  # opened again from its file
    printed = [line.text for line in first if line.stream == "stdout"]
    assert printed == [f"job 0 line {i}" for i in range(50)]


@pytest.mark.parametrize(
    ("spec_fields", "named"),
    [
        ({"framework": "scikit-learn", "gpus": 4}, "unknown field `gpus`"),
        ({"framework": 7}, "Expected `str`, got `int` - at `$.framework`"),
        ({"script_url": "https://h/x.py"}, "missing required field `framework`"),
    ],
)
def test_an_offer_of_a_spec_that_does_not_decode_is_refused_saying_why(
    tmp_path: Path, spec_fields: dict[str, Any], named: str
) -> None:
    """The Offer's spec is typed on the wire: one that is not a JobSpec (a field it lacks, a
    wrong type, a missing one) gets a signed Refusal naming the field, not a reset stream,
    and the provider holds no quote and keeps no job."""
    provider, _, _ = build(tmp_path)
    consumer = identity(9)
    raw = {"t": "offer", "v": 1, "job_id": "0123456789ab", "spec": spec_fields}
    sealed = wire.seal_payload(
        consumer, p.KIND, msgspec.msgpack.encode({**raw, "consumer": consumer.peer_id})
    )
    ours, theirs = stream_pair(consumer.peer_id, provider.ctx.identity.peer_id)

    async def main() -> p.AnyJobMessage | None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(provider.handle, theirs)
            await wire.write_frame(ours, sealed, p.MAX_REQUEST_BYTES)
            received = await p.receive(ours, provider.ctx.identity.peer_id)
            await ours.close()
        return None if received is None else received[0]

    answer = trio.run(main)
    assert isinstance(answer, p.Refusal) and answer.job_id == "0123456789ab"
    assert answer.reason.startswith("bad job spec: ") and named in answer.reason
    assert len(provider._quotes) == 0 and provider.ctx.store.list_jobs() == []


def test_a_typed_offer_is_the_same_bytes_on_the_wire_as_the_dict_one_was() -> None:
    """Offer.spec was a dict of offer_spec's form; typed, it encodes to the very same bytes
    (older providers read it as before) and decodes back to the JobSpec it was."""

    class DictOffer(p.JobMessage, tag="offer", frozen=True):  # Offer before the spec was typed
        spec: dict[str, Any]
        consumer: str

    sender = identity(9)
    samples = [
        spec(),
        spec(name="iris", deps=("numpy>=1",), env={"A": "1"}, budget_ntx=2.5, tier="moderate"),
        JobSpec(
            framework="pytorch",
            git=GitSource(url="https://h/r.git", entry="train.py", ref="v1"),
            kind="service",
            ports=(8888,),
            shell=True,
            device="gpu",
            gpu_vendor="nvidia",
        ),
    ]
    for sample in samples:
        typed = p.Offer(job_id="0123456789ab", spec=sample, consumer=sender.peer_id)
        before = DictOffer(job_id="0123456789ab", spec=offer_spec(sample), consumer=sender.peer_id)
        assert p.encode(sender, typed) == wire.seal_payload(
            sender, p.KIND, msgspec.msgpack.encode(before)
        )
        decoded, _ = p.decode(p.encode(sender, typed), sender.peer_id)
        assert decoded == typed


class SlowEscrows(FakeEscrows):
    """An escrow port whose lock check takes until the test lets it finish (a slow chain)."""

    def __init__(self) -> None:
        super().__init__()
        self.go = trio.Event()
        self.checking = trio.Event()

    async def verify_lock(
        self, job_id: str, consumer_peer: str, total_ntx: float, terms: str, lock_tx: str
    ) -> str:
        self.calls.append(("verify_lock", job_id))
        self.checking.set()
        await self.go.wait()
        return self.verify_reason


def _confirm_of(quote: p.Quote) -> p.Confirm:
    return p.Confirm(
        job_id=quote.job_id, total_ntx=quote.total_ntx, escrow_tx="cd" * 32, escrow_terms="{}"
    )


def test_a_repeated_confirm_joins_the_first_and_a_release_meanwhile_makes_both_refusals(
    tmp_path: Path,
) -> None:
    """Issue 20 §1: a Confirm repeated while the lock is checked is not checked twice and gets
    the first one's answer; a Release that comes meanwhile makes that answer a refusal (the
    consumer gave up: the job never runs), and every later repeat is refused the same way."""
    escrows = SlowEscrows()
    provider, _, events = build(tmp_path, escrows=escrows)
    quote = provider._offer(offer(), CONSUMER, b"")
    assert isinstance(quote, p.Quote)
    answers: list[Any] = []

    async def confirm() -> None:
        answers.append(await provider._confirm(_confirm_of(quote), CONSUMER, b"confirm"))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            provider._nursery = nursery
            nursery.start_soon(confirm)
            await escrows.checking.wait()
            nursery.start_soon(confirm)  # the consumer's repeat, same job id
            await trio.sleep(0.05)
            released = provider._released(p.Release(job_id=quote.job_id), CONSUMER)
            assert isinstance(released, p.Refusal) and "released" in released.reason
            escrows.go.set()
        nursery.cancel_scope.cancel()

    trio.run(main)
    assert len(escrows.called("verify_lock")) == 1
    assert [type(answer) for answer, _ in answers] == [p.Refusal, p.Refusal]
    assert not any(created for _, created in answers)
    assert provider.ctx.store.list_jobs() == [] and events == []
    # Later repeats: the same final answer, never an accept (the quote is spent).
    again, created = trio.run(provider._confirm, _confirm_of(quote), CONSUMER, b"confirm")
    assert again == answers[0][0] and not created
    assert provider._quotes.get(quote.job_id) is None


def test_a_release_after_the_accept_answers_accepted_and_a_stranger_learns_nothing(
    tmp_path: Path,
) -> None:
    provider, _, _ = build(tmp_path)
    quote = provider._offer(offer(), CONSUMER, b"")
    assert isinstance(quote, p.Quote)

    started: list[Any] = []
    provider._nursery = SimpleNamespace(start_soon=lambda *a: started.append(a))  # type: ignore[assignment]

    async def main() -> None:
        answer, created = await provider._confirm(_confirm_of(quote), CONSUMER, b"c")
        assert isinstance(answer, p.Accepted) and created
        release = p.Release(job_id=quote.job_id)
        assert provider._released(release, CONSUMER) == p.Accepted(job_id=quote.job_id)
        stranger = identity(3).peer_id
        assert provider._released(release, stranger) == p.refusal(
            quote.job_id, "no such job of yours"
        )

    trio.run(main)
    assert len(started) == 1  # the run, started once
    [job] = provider.ctx.store.list_jobs()
    assert job.job_id == quote.job_id


class SlowStopExecutor:
    """An executor fake whose cancel takes a minute (a container's grace time on a loaded
    Docker): records when it was asked and when it finished."""

    def __init__(self) -> None:
        self.cancels: list[float] = []
        self.stopped = trio.Event()

    async def cancel(self, run: Any, reason: str = "") -> None:
        self.cancels.append(trio.current_time())
        await trio.sleep(60)
        self.stopped.set()


def test_a_cancel_is_answered_at_once_while_a_slow_stop_goes_on(tmp_path: Path) -> None:
    """Issue 20 §8: the provider's answer to a Cancel does not wait for the job to stop (the
    consumer's wait for an answer is 10 s; a stop may take longer); a repeat while it stops
    starts no second stop."""
    provider, _, _ = build(tmp_path)
    executor = SlowStopExecutor()
    job = api.JobInfo(
        job_id="0123456789ab",
        role="provider",
        state="running",
        provider=provider.ctx.identity.peer_id,
        consumer=CONSUMER,
        spec=spec(),
        executor="process",
    )
    provider.ctx.store.save_job(job)
    provider._runs[job.job_id] = (executor, SimpleNamespace(job_id=job.job_id))  # type: ignore[assignment]
    answered: list[float] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            provider._nursery = nursery
            for _ in range(2):
                answer = await provider._cancel(p.Cancel(job_id=job.job_id), CONSUMER)
                assert answer == p.Accepted(job_id=job.job_id)
                answered.append(trio.current_time())
            await executor.stopped.wait()
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert answered[1] - executor.cancels[0] < 1  # answered before the stop's minute
    assert len(executor.cancels) == 1
