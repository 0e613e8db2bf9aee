"""A book that matches the chain (issue 20 §6): "the lock is gone" is not "our tx landed".

Real daemons, the real ledger and oracle. The provider kept a claim that never reached the
chain while the consumer took its lock back at the deadline; the provider's book used to say
`claimed` with the whole charge paid. It now names the tx that really spent the lock and
what that tx paid each side, read from the chain.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.daemon_harness import daemons, wait_for
from tests.daemons.test_payments_e2e import (
    PROCESS_JOBS_NO_CHECKPOINTS,
    Market,
    _address,
    _escrow,
    _paid_pair,
    _submit,
    market,
    scripts,
)

__all__ = ["daemons", "market", "scripts"]


@pytest.mark.timeout(300)
def test_a_claim_that_never_landed_is_not_booked_as_paid_when_the_consumer_refunded(
    market: Market, scripts: str
) -> None:
    """Two daemons, a paid job, a consumer refund at the deadline and a provider whose book
    kept a claim of its own: up to a minute on a busy machine."""
    provider, consumer = _paid_pair(market, provider_jobs=PROCESS_JOBS_NO_CHECKPOINTS)
    job_id = _submit(consumer, f"{scripts}/slow.py")["job_id"]
    wait_for(lambda: provider.cli("job", "show", job_id)["state"] == "running", "never ran", 60)
    # The provider goes away and nobody can decide: at the deadline the consumer takes the
    # lock back on its own.
    provider.stop(kill=True)
    market.oracle_down()
    deadline_s = _escrow(consumer, job_id)["deadline_ms"] / 1000
    market.ledger.clock.advance(deadline_s - market.ledger.clock.now() + 5)
    refund = consumer.cli("reward", "refund", job_id)
    assert refund["state"] == "refunded" and refund["claim_tx"]

    # Meanwhile the provider's book kept a claim of its own that never reached the chain
    # (its submit failed): after its restart it finds the lock gone.
    db = sqlite3.connect(provider.home.state_dir / "nunet.db")
    row = json.loads(
        db.execute("SELECT info FROM escrows WHERE job_id = ?", (job_id,)).fetchone()[0]
    )
    never_landed = "ab" * 32
    row["info"].update(state="claiming", claim_tx=never_landed, settle_tx=never_landed)
    row["info"].update(reward_type="distribute", paid_units=row["info"]["amount"] // 2)
    row["info"]["refunded_units"] = row["info"]["amount"] - row["info"]["paid_units"]
    db.execute(
        "UPDATE escrows SET state = 'claiming', info = ? WHERE job_id = ?",
        (json.dumps(row), job_id),
    )
    db.commit()
    db.close()
    market.oracle_up()
    provider.start()
    booked = wait_for(
        lambda: (e := _escrow(provider, job_id)).get("state") not in ("claiming", None) and e,
        "the provider never settled its book",
        60,
    )
    # What the chain says: the consumer's refund spent the lock and paid the provider nothing.
    assert booked["state"] == "refunded", booked
    assert booked["settle_tx"] == refund["claim_tx"]
    assert (booked["paid_units"], booked["refunded_units"]) == (0, booked["amount"])
    assert never_landed in booked["error"] and refund["claim_tx"] in booked["error"]
    assert market.ntx(_address(provider)) == 0
    assert provider.cli("reward", "list")["earned_units"] == 0


@pytest.mark.timeout(300)
def test_a_decided_split_the_provider_never_sends_is_sent_by_the_consumer(
    market: Market, scripts: str
) -> None:
    """The provider goes away after the job ended and both signed the receipt, before the
    oracle decided; once it decides, the consumer waits its grace, then submits the split
    itself: its own share comes back and the provider's is paid on chain all the same."""
    provider, consumer = _paid_pair(market, consumer_payments="split_grace_s = 2\n")
    before = market.ntx(_address(consumer))
    job_id = _submit(consumer, f"{scripts}/checkpointed.py")["job_id"]  # runs for 8 s
    market.oracle_down()  # nobody can decide while the job ends
    wait_for(
        lambda: _escrow(consumer, job_id).get("state") == "receipt",
        "the consumer never countersigned",
        90,
    )
    wait_for(
        lambda: _escrow(provider, job_id).get("state") == "receipt",
        "the provider never had the countersigned receipt",
        30,
    )
    provider.stop(kill=True)  # it never sends the split
    market.oracle_up()
    paid = wait_for(
        lambda: (e := _escrow(consumer, job_id)).get("state") == "paid_out" and e,
        "the consumer never sent the split itself",
        60,
    )
    charge = paid["paid_units"]
    assert 0 < charge < paid["amount"] and paid["refunded_units"] == paid["amount"] - charge
    assert paid["settle_tx"] and paid["settle_tx"] == paid["claim_tx"]  # ours
    assert market.ntx(_address(consumer)) == before - charge
    assert market.ntx(_address(provider)) == charge
    # Back, the provider's book finds the lock spent and says what it was paid, from chain.
    provider.start()
    claimed = wait_for(
        lambda: (e := _escrow(provider, job_id)).get("state") == "claimed" and e,
        "the provider's book never saw the split",
        60,
    )
    assert claimed["settle_tx"] == paid["settle_tx"] and claimed["paid_units"] == charge
