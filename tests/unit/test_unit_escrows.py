"""``Escrows`` and the settle loop on their own: a real context (store, identity) and a fake
of the wallet port (``FakeWallet``: a wallet, and a chain backend that can be unreachable).
Receipts are signed and checked as both peers must; the book's sums are the rows' sums; the
settle loop retries an escrow whose chain backend is away, with backoff, until it settles."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from engine import api
from engine.domain.spec import JobSpec
from engine.errors import EngineError
from engine.payments import escrow as escrow_module
from engine.payments.escrow import Escrows
from engine.payments.escrow_receipts import billing_fields
from engine.payments.records import EscrowRecord
from oracle_client.escrow import receipt as rc
from tests.fakes.context import identity, make_context
from tests.fakes.wallet import FakeWallet

CONSUMER, PROVIDER = identity(9), identity(8)
JOB = "0123456789ab"


def wallet_info() -> api.WalletInfo:
    return api.WalletInfo(
        address="addr_test1qfake",
        network="preprod",
        channel="nunet-test",
        payment_key_hash="11" * 28,
        stake_key_hash="22" * 28,
        origin="new",
        created_at=0.0,
    )


def build(tmp_path: Path, seed: int, failures: int = 0) -> tuple[Escrows, FakeWallet, list[Any]]:
    ctx, events = make_context(tmp_path, seed=seed, payments=True)
    wallet = FakeWallet(wallet_info(), failures=failures)
    return Escrows(ctx, wallet=wallet), wallet, events


def record(role: str, state: str, amount: int = 500_000, **info: Any) -> EscrowRecord:
    return EscrowRecord(
        info=api.EscrowInfo(
            job_id=info.pop("job_id", JOB),
            role=role,  # type: ignore[arg-type]
            state=state,  # type: ignore[arg-type]
            amount=amount,
            deadline_ms=int((time.time() + 3600) * 1000),
            consumer_pkh="aa" * 28,
            provider_pkh="bb" * 28,
            oracle_key="cc" * 32,
            lock_tx="dd" * 32,
            **info,
        ),
        consumer_peer=CONSUMER.peer_id,
        provider_peer=PROVIDER.peer_id,
    )


NOW = time.time()


def job(role: str, state: str = "completed") -> api.JobInfo:
    return api.JobInfo(
        job_id=JOB,
        role=role,  # type: ignore[arg-type]
        state=state,  # type: ignore[arg-type]
        provider=PROVIDER.peer_id,
        consumer=CONSUMER.peer_id,
        spec=JobSpec(framework="scikit-learn"),
        started_at=NOW - 60,
        finished_at=NOW,
    )


def test_the_providers_receipt_is_signed_kept_and_countersigned_by_the_consumer(
    tmp_path: Path,
) -> None:
    provider, _, provider_events = build(tmp_path / "provider", seed=8)
    consumer, _, _ = build(tmp_path / "consumer", seed=9)
    provider.save(record("provider", "verified"))
    consumer.save(record("consumer", "locked"))
    assert consumer.awaiting_receipt(JOB)

    text = provider.provider_receipt(job("provider"))
    signed = msgspec.json.decode(text.encode(), type=rc.Receipt)
    rc.verify_signature(signed, "provider")
    assert (signed.outcome, signed.fault, signed.amount) == ("completed", "none", 500_000)
    assert provider.provider_receipt(job("provider")) == text  # kept: the same one again
    assert isinstance(provider_events[-1], api.EscrowChanged)

    both = trio.run(consumer.countersign, job("consumer"), text)
    rc.verify(msgspec.json.decode(both.encode(), type=rc.Receipt))  # both signatures hold
    kept = consumer.get(JOB)
    assert kept is not None and kept.info.state == "receipt" and kept.receipt == both
    assert not consumer.awaiting_receipt(JOB)

    assert provider.accept_countersigned(JOB, identity(5).peer_id, both) == (
        "this job belongs to another consumer"
    )
    assert provider.accept_countersigned(JOB, CONSUMER.peer_id, both) == ""
    settled = provider.get(JOB)
    assert settled is not None and settled.info.state == "receipt"


def test_the_consumer_refuses_a_receipt_that_says_what_it_did_not_see(tmp_path: Path) -> None:
    provider, _, _ = build(tmp_path / "provider", seed=8)
    consumer, _, _ = build(tmp_path / "consumer", seed=9)
    provider.save(record("provider", "verified"))
    consumer.save(record("consumer", "locked"))
    text = provider.provider_receipt(job("provider", state="completed"))
    with pytest.raises(EngineError) as info:  # the consumer saw the job fail
        trio.run(consumer.countersign, job("consumer", state="failed"), text)
    assert info.value.code == "payment"
    assert info.value.message == (
        "the provider's receipt says outcome = 'completed'; this node's record says 'failed'"
    )
    kept = consumer.get(JOB)
    assert kept is not None and kept.info.state == "locked" and not kept.receipt
    assert kept.info.error == f"not countersigning the provider's receipt: {info.value.message}"
    assert provider.provider_receipt(job("provider")) == text
    assert consumer.provider_receipt(job("consumer")) == ""  # not a provider's escrow


def test_the_books_sums_are_the_rows_sums(tmp_path: Path) -> None:
    escrows, _, _ = build(tmp_path, seed=8)
    escrows.save(record("provider", "claimed", 2_000_000, job_id="000000000001"))
    escrows.save(record("consumer", "paid_out", 500_000, job_id="000000000002"))
    escrows.save(record("consumer", "locked", 250_000, job_id="000000000003"))
    escrows.save(record("consumer", "refunded", 125_000, job_id="000000000004"))
    listing = escrows.listing()
    assert len(listing.escrows) == 4
    assert (listing.earned_units, listing.spent_units) == (2_000_000, 500_000)
    assert (listing.locked_units, listing.refunded_units) == (250_000, 125_000)
    assert escrows.payment_address() == "addr_test1qfake"  # the wallet port's


def test_the_settle_loop_retries_an_unreachable_chain_with_backoff_until_it_settles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer's escrow with both signatures: the loop asks the chain whether the lock is
    still there; the backend is away twice (each a retry after a growing backoff), then
    answers that the lock is gone: the provider claimed it, the escrow is paid out."""
    monkeypatch.setattr(escrow_module, "SETTLE_BACKOFF_S", 0.05)
    escrows, wallet, events = build(tmp_path, seed=9, failures=2)
    escrows.save(msgspec.structs.replace(record("consumer", "receipt"), receipt="{}"))

    async def main() -> float:
        began = trio.current_time()
        async with trio.open_nursery() as nursery:
            await nursery.start(escrows.serve)
            with trio.fail_after(20):
                while (escrows.get(JOB) or record("consumer", "x")).info.state != "paid_out":
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
        return trio.current_time() - began

    took = trio.run(main)
    assert wallet.chain_calls == 4  # two failures, the answer, then which tx spent the lock
    assert took >= 0.05 + 0.1  # backoff of 0.05 s, then 0.1 s
    settled = escrows.get(JOB)
    assert settled is not None and settled.info.state == "paid_out"
    assert settled.info.reward_type == "withdraw" and settled.info.error == ""
    assert wallet.chain.asked  # it looked for the lock at the escrow script's address
    assert isinstance(events[-1], api.EscrowChanged) and events[-1].escrow.state == "paid_out"


def test_the_settle_loop_asks_again_when_the_oracle_said_it_can_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vanished provider's refund, "pending" with the oracle's time left (issue 22): the loop
    asks again then, not a settle interval (15 s) later, and not before."""
    escrows, _, _ = build(tmp_path, seed=9)
    escrows.save(record("consumer", "receipt", refund_alone="provider_vanished"))
    asked: list[float] = []

    async def settle(job_id: str, *, automatic: bool = False) -> api.EscrowInfo:
        asked.append(time.time())
        current = escrows.get(job_id)
        assert current is not None
        return escrows.save(current, decidable_at=time.time() + 0.3).info

    monkeypatch.setattr(escrows, "settle", settle)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(escrows.serve)
            with trio.fail_after(10):  # well inside the settle interval
                while len(asked) < 2:
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert escrows.ctx.settings.payments.settle_interval_s >= 15
    assert asked[1] - asked[0] >= 0.3


def test_an_oracle_saying_a_day_does_not_hold_the_settle_loop_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An oracle's "pending" may say a day (retry_after_s's bound): the loop still asks again
    within its settle interval, so a lying or confused oracle only changes what the views
    say, never how soon the refund is asked for (docs/security.md)."""
    escrows, _, _ = build(tmp_path, seed=10)
    escrows.save(record("consumer", "receipt", refund_alone="provider_vanished"))
    monkeypatch.setattr(escrows.ctx.settings.payments, "settle_interval_s", 1.0)
    asked: list[float] = []

    async def settle(job_id: str, *, automatic: bool = False) -> api.EscrowInfo:
        asked.append(time.time())
        current = escrows.get(job_id)
        assert current is not None
        return escrows.save(current, decidable_at=time.time() + 86_400).info

    monkeypatch.setattr(escrows, "settle", settle)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(escrows.serve)
            with trio.fail_after(10):
                while len(asked) < 2:
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert asked[1] - asked[0] < 5


# --- metered receipts (issue 12) -------------------------------------------------------------

T0 = 1_800_000_000.0


def priced(
    role: str,
    state: str = "completed",
    *,
    price: int | None = 3_600_000,  # one base unit per millisecond
    ran_s: float | None = 60.0,
    min_charge: int = 0,
) -> api.JobInfo:
    return msgspec.structs.replace(
        job(role, state),
        price_units_hour=price,
        min_charge_units=min_charge,
        resource_spec="small",
        started_at=None if ran_s is None else T0,
        finished_at=T0 + (ran_s or 0.0),
    )


def test_the_receipt_charges_the_metered_machine_time_and_both_books_say_so(
    tmp_path: Path,
) -> None:
    provider, _, _ = build(tmp_path / "provider", seed=8)
    consumer, _, _ = build(tmp_path / "consumer", seed=9)
    provider.save(record("provider", "verified"))
    consumer.save(record("consumer", "locked"))
    text = provider.provider_receipt(priced("provider"))
    receipt = msgspec.json.decode(text.encode(), type=rc.Receipt)
    assert (receipt.spec, receipt.price_units_hour, receipt.machine_ms) == (
        "small",
        3_600_000,
        60_000,
    )
    assert receipt.charge == 60_000
    # What the consumer was told is a second longer: it signs a receipt that bills less.
    seen = msgspec.structs.replace(priced("consumer"), finished_at=T0 + 61.0)
    trio.run(consumer.countersign, seen, text)
    for book in (provider, consumer):
        kept = book.get(JOB)
        assert kept is not None and kept.info.metered_units == 60_000


@pytest.mark.parametrize(
    ("kwargs", "charge"),
    [
        ({"price": None}, 500_000),  # quoted before specs: the whole lock, as before
        ({"ran_s": None, "state": "cancelled"}, 0),  # never started
        ({"ran_s": 0.5, "min_charge": 7_000}, 7_000),  # the spec's minimum charge
        ({"ran_s": 3_600.0}, 500_000),  # capped at the lock
    ],
)
def test_billing_fields_for_each_kind_of_job(kwargs: dict[str, Any], charge: int) -> None:
    state = kwargs.pop("state", "completed")
    fields = billing_fields(priced("provider", state, **kwargs), 500_000)
    assert fields["charge"] == charge


@pytest.mark.parametrize(
    ("seen", "says"),
    [
        ({"price": 1_800_000}, "price_units_hour"),  # not the quote's price
        ({"min_charge": 1}, "min_charge"),
    ],
)
def test_the_consumer_refuses_a_bill_it_did_not_see(
    tmp_path: Path, seen: dict[str, Any], says: str
) -> None:
    provider, _, _ = build(tmp_path / "provider", seed=8)
    consumer, _, _ = build(tmp_path / "consumer", seed=9)
    provider.save(record("provider", "verified"))
    consumer.save(record("consumer", "locked"))
    text = provider.provider_receipt(priced("provider"))
    with pytest.raises(EngineError, match=says):
        trio.run(consumer.countersign, priced("consumer", **seen), text)
    kept = consumer.get(JOB)
    assert kept is not None and kept.info.state == "locked" and not kept.receipt


@pytest.mark.parametrize(
    ("watched_s", "agreed"),
    [
        (41.0, 42_000),  # 18 s less (+1 s): within 30 s and 2 %, the provider signs it
        (None, 60_000),  # not watched live: what its updates told (the receipt's 60 s)
        (10.0, None),  # 49 s less: beyond, refused; the lock comes back at the deadline
    ],
)
def test_the_consumer_offers_what_it_watched_and_the_provider_signs_within_its_tolerance(
    tmp_path: Path, watched_s: float | None, agreed: int | None
) -> None:
    """Issue 20 §7: a receipt billing more machine time than the consumer watched the job
    run (on its own clock, plus a second) is not signed: the consumer signs an offer of the
    same receipt shortened to what it watched, and the provider signs that when it is within
    its counter tolerance; the receipt both then keep bills the offer."""
    provider, _, _ = build(tmp_path / "provider", seed=8)
    consumer, _, _ = build(tmp_path / "consumer", seed=9)
    provider.save(record("provider", "verified"))
    consumer.save(record("consumer", "locked"))
    text = provider.provider_receipt(priced("provider"))  # 60 s
    seen = priced("consumer")
    if watched_s is not None:
        seen = msgspec.structs.replace(seen, seen_started_at=NOW, seen_finished_at=NOW + watched_s)
    offer = trio.run(consumer.countersign, seen, text)
    reason = provider.accept_countersigned(JOB, CONSUMER.peer_id, offer)
    if agreed is None:
        assert "more than 30 s and 2% below (payments.counter_tolerance_s)" in reason
        consumer.receipt_refused(JOB, reason)
        kept = consumer.get(JOB)
        assert kept is not None and kept.info.state == "locked" and not kept.receipt
        assert kept.info.error.startswith("the provider refused our receipt: the consumer offers")
        return
    assert reason == ""
    both = provider.kept_receipt(JOB)
    if both != offer:  # an offer: the consumer keeps what the provider signed
        assert consumer.offer_signed(seen, both) == ""
    signed = msgspec.json.decode(both.encode(), type=rc.Receipt)
    rc.verify(signed)
    assert signed.charge == agreed
    for book in (provider, consumer):
        kept = book.get(JOB)
        assert kept is not None and kept.info.state == "receipt" and kept.receipt == both
        assert kept.info.metered_units == agreed


def test_the_books_sums_follow_the_split(tmp_path: Path) -> None:
    escrows, _, _ = build(tmp_path, seed=8)
    split = {"paid_units": 300_000, "refunded_units": 200_000}
    escrows.save(record("provider", "claimed", 500_000, job_id="000000000001", **split))
    escrows.save(record("consumer", "paid_out", 500_000, job_id="000000000002", **split))
    escrows.save(record("consumer", "refunded", 125_000, job_id="000000000003"))
    listing = escrows.listing()
    assert listing.earned_units == 300_000
    assert (listing.spent_units, listing.refunded_units) == (300_000, 200_000 + 125_000)
