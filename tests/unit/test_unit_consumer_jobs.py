"""``ConsumerJobs`` on its own: a real context and fakes of its ports. Submitting matches the
peers the network port lists, offers to them in turn over streams it opens, locks a paid
job's NTX through the escrow port before confirming, and keeps the job it confirmed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from engine import api
from engine.domain.ratelimit import PeerRateLimiter
from engine.domain.spec import JobSpec
from engine.errors import EngineError
from engine.jobs import protocol as p
from engine.jobs.consumer import ConsumerJobs
from tests.fakes.context import identity, make_context
from tests.fakes.escrows import FakeEscrows
from tests.fakes.network import FakeNetwork, FakePeerLink, FakeProviderPeer, provider_info


def spec(**fields: Any) -> JobSpec:
    values: dict[str, Any] = {"framework": "scikit-learn", "script_url": "https://h/x.py"}
    values.update(fields)
    return JobSpec(**values)


def submit(consumer: ConsumerJobs, link: FakePeerLink, **fields: Any) -> api.JobInfo:
    async def main() -> api.JobInfo | EngineError:
        async with trio.open_nursery() as nursery:
            link.nursery = nursery
            try:
                return await consumer.submit(api.SubmitJob(spec=spec(**fields)))
            except EngineError as exc:  # raised outside, not inside the nursery's group
                return exc

    answer = trio.run(main)
    if isinstance(answer, EngineError):
        raise answer
    return answer


def world(
    tmp_path: Path, *providers: tuple[FakeProviderPeer, float], escrows: FakeEscrows | None = None
) -> tuple[ConsumerJobs, FakePeerLink, list[api.Event]]:
    ctx, events = make_context(tmp_path, seed=9, payments=escrows is not None)
    link = FakePeerLink(me=ctx.identity.peer_id)
    for peer, price in providers:
        link.add(provider_info(peer.peer_id, prices={"low": price}), peer.handle)
    consumer = ConsumerJobs(
        ctx,
        network=lambda: FakeNetwork(link),
        escrows=(lambda: escrows) if escrows is not None else None,
    )
    return consumer, link, events


def test_submit_offers_to_the_cheapest_match_first_and_keeps_the_peer_that_accepts(
    tmp_path: Path,
) -> None:
    busy = FakeProviderPeer(identity(1), refuse="busy: another consumer was first")
    willing = FakeProviderPeer(identity(2), total_ntx=0.25)
    consumer, link, events = world(tmp_path, (busy, 0.5), (willing, 1.5))
    job = submit(consumer, link)
    assert [peer for peer, _ in link.opened] == [busy.peer_id, willing.peer_id, willing.peer_id]
    assert [type(m) for m in busy.received] == [p.Offer]
    assert [type(m) for m in willing.received] == [p.Offer, p.Confirm]
    confirm = willing.received[1]
    assert isinstance(confirm, p.Confirm) and confirm.total_ntx == 0.25
    assert confirm.escrow_tx == "" and confirm.escrow_terms == ""  # unpaid: nothing locked
    assert job.provider == willing.peer_id and job.state == "accepted"
    assert job.lock_units == 250_000 and job.executor == "process"
    stored = consumer.ctx.store.get_job(job.job_id)
    assert stored is not None and (stored.state, stored.provider) == ("accepted", willing.peer_id)
    assert [e.job.state for e in events if isinstance(e, api.JobChanged)] == [
        "pending",
        "confirming",  # stored before the Confirm goes out
        "accepted",
    ]
    # Every signed message is kept as evidence, in both directions, the refusal too.
    kept = [(way, kind) for way, kind, _ in consumer.ctx.store.job_messages(job.job_id)]
    assert kept == [
        ("out", "offer"),
        ("in", "refusal"),
        ("out", "offer"),
        ("in", "quote"),
        ("out", "confirm"),
        ("in", "accepted"),
    ]


def test_submit_needs_the_network_up_and_keeps_nothing_without_it(tmp_path: Path) -> None:
    ctx, events = make_context(tmp_path)
    consumer = ConsumerJobs(ctx, network=FakeNetwork)  # a network that is not up
    with pytest.raises(EngineError) as info:
        trio.run(consumer.submit, api.SubmitJob(spec=spec()))
    assert info.value.code == "offline"
    assert ctx.store.list_jobs() == [] and events == []


def test_a_paid_job_is_locked_through_the_escrow_port_before_it_is_confirmed(
    tmp_path: Path,
) -> None:
    provider = FakeProviderPeer(identity(3), total_ntx=0.5, payment_address="addr_test1qp")
    escrows = FakeEscrows(lock_answer=("the-signed-terms", "ef" * 32))
    consumer, link, _ = world(tmp_path, (provider, 1.0), escrows=escrows)
    job = submit(consumer, link)
    assert escrows.called("lock") == [(job.job_id, provider.peer_id, "addr_test1qp", 500_000)]
    confirm = provider.received[-1]
    assert isinstance(confirm, p.Confirm)
    assert (confirm.escrow_tx, confirm.escrow_terms) == ("ef" * 32, "the-signed-terms")
    assert job.state == "accepted"


def test_a_failed_lock_ends_the_job_refused_and_confirms_nothing(tmp_path: Path) -> None:
    provider = FakeProviderPeer(identity(4), total_ntx=0.5, payment_address="addr_test1qp")
    escrows = FakeEscrows(lock_error="could not lock 0.5 NTX: not enough funds")
    consumer, link, _ = world(tmp_path, (provider, 1.0), escrows=escrows)
    with pytest.raises(EngineError) as info:
        submit(consumer, link)
    assert info.value.code == "payment"
    assert [type(m) for m in provider.received] == [p.Offer]  # no Confirm went out
    (job,) = consumer.ctx.store.list_jobs()
    assert job.state == "refused" and job.reason == "could not lock 0.5 NTX: not enough funds"


def test_a_script_submitting_many_jobs_waits_its_turn_instead_of_being_refused(
    tmp_path: Path,
) -> None:
    # The provider's own rule (provider.py): offers past its per-consumer rate are refused.
    provider = FakeProviderPeer(
        identity(3), offer_limit=PeerRateLimiter(p.OFFERS_PER_S, p.OFFER_BURST)
    )
    consumer, link, _ = world(tmp_path, (provider, 0.5))
    count = int(p.OFFER_BURST) + 4  # past the burst: the last ones wait for the rate

    async def main() -> list[api.JobInfo]:
        async with trio.open_nursery() as nursery:
            link.nursery = nursery
            return [await consumer.submit(api.SubmitJob(spec=spec())) for _ in range(count)]

    jobs = trio.run(main)
    assert [job.state for job in jobs] == ["accepted"] * count
    assert [type(m) for m in provider.received] == [p.Offer, p.Confirm] * count


def test_a_provider_silent_after_the_quote_keeps_the_job_and_no_other_provider_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20 §1: the Confirm is asked again (the same job id) while the submit has time;
    without a final answer the job stays "confirming" with that provider: the next candidate
    is never offered the job, since the first may still accept it."""
    import engine.jobs.consumer as consumer_module
    import engine.jobs.consumer_base as consumer_base

    monkeypatch.setattr(p, "CONFIRM_ANSWER_S", 0.3)
    monkeypatch.setattr(consumer_module, "SUBMIT_S", 2.0)
    monkeypatch.setattr(consumer_base, "CONFIRM_RETRY_S", (0.1,))
    silent = FakeProviderPeer(identity(4), silent=True)
    willing = FakeProviderPeer(identity(5), total_ntx=0.25)
    consumer, link, _ = world(tmp_path, (silent, 0.5), (willing, 1.5))
    job = submit(consumer, link)
    assert job.state == "confirming" and job.provider == silent.peer_id
    assert "no final answer from provider" in job.reason and "`job cancel`" in job.reason
    confirms = [m for m in silent.received if isinstance(m, p.Confirm)]
    assert len(confirms) >= 2 and {c.job_id for c in confirms} == {job.job_id}
    assert willing.received == []  # never offered: one submit, one provider
    [stored] = consumer.ctx.store.list_jobs()
    assert stored.state == "confirming"


def test_a_refused_confirm_refunds_its_lock_now_and_the_next_provider_runs_the_job(
    tmp_path: Path,
) -> None:
    """A final refusal frees the consumer to go on, and its lock is asked back at once (the
    escrow's never_ran), not at the deadline."""
    refuser = FakeProviderPeer(
        identity(6), refuse_confirm="lock not seen", payment_address="addr_test1qrefuser"
    )
    willing = FakeProviderPeer(identity(7), total_ntx=0.25, payment_address="addr_test1qw")
    escrows = FakeEscrows()
    consumer, link, _ = world(tmp_path, (refuser, 0.5), (willing, 1.5), escrows=escrows)
    job = submit(consumer, link)
    assert job.provider == willing.peer_id and job.state == "accepted"
    refused = [j for j in consumer.ctx.store.list_jobs() if j.provider == refuser.peer_id]
    assert [j.state for j in refused] == ["refused"]
    assert refused[0].reason == "lock not seen (its locked NTX are refunded now)"
    assert escrows.called("never_ran") == [refused[0].job_id]
    # Each Confirm carried its own lock (terms and tx), as the escrow port made them.
    confirm = willing.received[-1]
    assert isinstance(confirm, p.Confirm) and confirm.escrow_tx == escrows.lock_answer[1]


def test_job_cancel_of_a_job_still_confirming_releases_it_and_refunds_its_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`job cancel` does what it says: a job its provider never answered is released (the
    provider's final word: it will not run it), ends cancelled, and its lock is asked back
    at once; a second cancel says the job already ended."""
    import engine.jobs.consumer as consumer_module
    import engine.jobs.consumer_base as consumer_base

    monkeypatch.setattr(p, "CONFIRM_ANSWER_S", 0.3)
    monkeypatch.setattr(consumer_module, "SUBMIT_S", 1.0)
    monkeypatch.setattr(consumer_base, "CONFIRM_RETRY_S", (0.1,))
    peer = FakeProviderPeer(
        identity(8), payment_address="addr_test1qsilent", silent=True, releases=True
    )
    escrows = FakeEscrows()
    consumer, link, _ = world(tmp_path, (peer, 0.5), escrows=escrows)
    job = submit(consumer, link)
    assert job.state == "confirming"

    async def cancel() -> api.JobInfo | EngineError:
        async with trio.open_nursery() as nursery:
            link.nursery = nursery
            try:
                return await consumer.cancel(api.CancelJob(job_id=job.job_id))
            except EngineError as exc:
                return exc

    ended = trio.run(cancel)
    assert isinstance(ended, api.JobInfo), ended
    assert ended.state == "cancelled"
    assert ended.reason.startswith("cancelled before the provider accepted it")
    assert escrows.called("never_ran") == [job.job_id]
    assert any(isinstance(m, p.Release) for m in peer.received)
    again = trio.run(cancel)
    assert isinstance(again, EngineError) and again.code == "ended"
    assert "already ended (cancelled)" in again.message


class HeaderThenSilence(FakeProviderPeer):
    """Sends the results' header, then nothing: the stream stays open."""

    async def handle(self, stream: Any) -> None:
        got = await p.receive(stream, p.remote_peer(stream))
        assert got is not None
        self.received.append(got[0])
        await p.send(
            stream, self.identity, p.ResultsHeader(job_id=got[0].job_id, sha256="ab" * 32, size=10)
        )
        await trio.sleep(5)


def test_a_results_transfer_that_stalls_ends_at_its_deadline_saying_what_it_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.jobs.consumer_results as consumer_results

    monkeypatch.setattr(consumer_results, "RESULT_CHUNK_S", 0.3)
    peer = HeaderThenSilence(identity(10))
    consumer, link, _ = world(tmp_path, (peer, 0.5))
    job = api.JobInfo(
        job_id="a1b2c3d4e5f6",
        role="consumer",
        state="completed",
        provider=peer.peer_id,
        consumer=consumer.ctx.identity.peer_id,
        spec=spec(),
        results_sha256="ab" * 32,
        results_size=10,
    )
    consumer.ctx.store.save_job(job)

    async def fetch() -> BaseException | None:
        async with trio.open_nursery() as nursery:
            link.nursery = nursery
            try:
                await consumer._fetch_results(job)
            except trio.TooSlowError as exc:
                nursery.cancel_scope.cancel()
                return exc
        return None

    started = time.monotonic()
    failed = trio.run(fetch)
    assert isinstance(failed, trio.TooSlowError)
    assert str(failed) == "no reply: waited 0.3 s for the next bytes of the results"
    assert time.monotonic() - started < 3


def test_a_start_and_an_end_are_timed_on_our_clock_only_when_seen_as_they_happen(
    tmp_path: Path,
) -> None:
    """Issue 20 §7: what a receipt may bill is bounded by this node's own clock, so only the
    changes a follow shows as they happen are timed (the first Update of a follow is the state
    as it is: a job already running has no start seen here)."""
    consumer, _, _ = world(tmp_path)
    job = api.JobInfo(
        job_id="b1b2b3b4b5b6",
        role="consumer",
        state="accepted",
        provider=identity(11).peer_id,
        consumer=consumer.ctx.identity.peer_id,
        spec=spec(),
    )
    consumer.ctx.store.save_job(job)
    log = consumer.job_log(job.job_id)
    running = p.Update(job_id=job.job_id, state="running", started_at=time.time() - 600)
    ended = p.Update(job_id=job.job_id, state="completed", started_at=time.time() - 600)

    first = consumer._apply(job, running, log, live=False)
    assert first.seen_started_at is None  # joined late: not seen starting
    assert consumer._apply(first, ended, log, live=True).seen_finished_at is None

    before = time.time()
    watched = consumer._apply(job, running, log, live=True)
    assert watched.seen_started_at is not None and watched.seen_started_at >= before
    done = consumer._apply(watched, ended, log, live=True)
    assert done.seen_finished_at is not None and done.seen_finished_at >= watched.seen_started_at
    assert done.started_at is not None and done.started_at < before - 500  # theirs, kept apart


def test_resubmit_runs_an_ended_jobs_spec_as_a_new_job_with_a_notebooks_own_token(
    tmp_path: Path,
) -> None:
    """Issue 22: the stored spec again, under a new id; a notebook's token (its provider saw
    it) is made anew; a job still running is refused."""
    from engine.api.notebooks import TOKEN_ENV

    provider = FakeProviderPeer(identity(2), total_ntx=0.25)
    consumer, link, _ = world(tmp_path, (provider, 1.0))
    first = submit(consumer, link, env={TOKEN_ENV: "ab" * 24, "EPOCHS": "3"})

    def resubmit(job_id: str) -> api.JobInfo | EngineError:
        async def main() -> api.JobInfo | EngineError:
            async with trio.open_nursery() as nursery:
                link.nursery = nursery
                try:
                    return await consumer.resubmit(api.ResubmitJob(job_id=job_id))
                except EngineError as exc:
                    return exc

        return trio.run(main)

    running = resubmit(first.job_id)
    assert isinstance(running, EngineError) and running.code == "not_finished"
    assert f"job {first.job_id} is still accepted" in running.message
    consumer.ctx.store.save_job(msgspec.structs.replace(first, state="failed"))
    again = resubmit(first.job_id)
    assert isinstance(again, api.JobInfo) and again.job_id != first.job_id
    assert again.spec.env["EPOCHS"] == "3"
    assert again.spec.env[TOKEN_ENV] not in ("", first.spec.env[TOKEN_ENV])
    assert msgspec.structs.replace(again.spec, env=first.spec.env) == first.spec
    missing = resubmit("0123456789ab")
    assert isinstance(missing, EngineError) and missing.code == "not_found"
