"""A hostile provider cannot bill more than the consumer saw (issue 12, section 2).

Real daemons on 127.0.0.1, the real local ledger and the reference oracle, as
tests/daemons/test_payments_e2e.py starts them. The provider is a real daemon whose receipt is
tampered as it signs it (tests/adversarial/overbilling_hook: ten more minutes of machine
time, ten times the quoted price, or a lock larger than the chain holds), each receipt
self-consistent so only the consumer's comparison with its own view stands in the way.

The consumer refuses to countersign and says why in one line on its escrow; the oracle,
holding only the provider's word, decides nothing (the provider is never paid); and once the
escrow's deadline passes on the chain's clock, the consumer's settle loop takes the whole
lock back with nobody asking.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.daemon_harness import wait_for
from tests.daemons.test_payments_e2e import (
    Market,
    _address,
    _escrow,
    _paid_pair,
    _submit,
    market,
    scripts,
)

__all__ = ["market", "scripts"]

HOOK = Path(__file__).resolve().parent / "overbilling_hook"
LOCK_UNITS = 100_000  # 1 min expected of the low tier at 6 NTX/h (test_payments_e2e.PRICES)
CONSUMER_UNITS = 5_000_000
# Why the consumer refuses, as its escrow says it.
WHY = {
    "time": "bills 6",  # 600 s more than it saw: "bills 60x.x s of machine time"
    "price": "price_units_hour = 60000000; this node's record says 6000000",
    "lock": "amount = 1100000; this node's record says 100000",
    # Its Updates carry the early start too: only this node's own clock refuses it.
    "early_start": "this node watched the job run",
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cheat", ["time", "price", "lock", "early_start"])
def test_a_provider_that_overbills_is_never_paid_and_the_lock_comes_back(
    market: Market, scripts: str, cheat: str
) -> None:
    provider, consumer = _paid_pair(
        market,
        provider_env={"PYTHONPATH": str(HOOK), "NUNET_TEST_OVERBILL": cheat},
        # The shortest deadline the consumer allows: twice the expected minute plus 60 s, so
        # its settle loop looks at the chain's clock as soon as the test moves it.
        consumer_payments="deadline_margin_s = 60\n",
    )
    job_id = _submit(consumer, f"{scripts}/iris.py")["job_id"]
    assert _escrow(consumer, job_id)["amount"] == LOCK_UNITS

    # The provider signed its inflated receipt and sent it; the consumer refused it.
    wait_for(
        lambda: "not countersigning" in _escrow(consumer, job_id).get("error", ""),
        "the consumer never said why it did not countersign",
        90,
    )
    refused = _escrow(consumer, job_id)
    assert refused["state"] == "locked" and "\n" not in refused["error"]
    assert refused["error"].startswith("not countersigning the provider's receipt: ")
    assert WHY[cheat] in refused["error"]
    # The provider's own copy carries the inflated charge, signed by the provider alone.
    wait_for(lambda: _escrow(provider, job_id).get("metered_units"), "no provider receipt", 30)
    assert _escrow(provider, job_id)["metered_units"] > 0

    # The oracle holds only the provider's word: it pays nothing.
    claim = run_cli("reward", "claim", job_id, "--json", home=provider.home)
    assert '"claimed"' not in claim.stdout, claim.stdout
    assert market.oracle is not None
    assert market.oracle.store.decision(job_id) is None
    assert market.ntx(_address(provider)) == 0

    # Time passes on the chain; nobody asks: the consumer's loop refunds the whole lock.
    deadline_s = refused["deadline_ms"] / 1000
    market.ledger.clock.advance(deadline_s - market.ledger.clock.now() + 5)
    wait_for(
        lambda: _escrow(consumer, job_id).get("state") == "refunded",
        "the consumer's settle loop never took the lock back after the deadline",
        60,
    )
    assert market.ntx(_address(consumer)) == CONSUMER_UNITS
    assert market.ntx(_address(provider)) == 0
    assert market.oracle.store.decision(job_id) is None
