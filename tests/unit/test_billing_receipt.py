"""The receipt's billing fields (issue 12) and the oracle's split for every outcome."""

from __future__ import annotations

import msgspec
import pytest

from oracle_client.billing import single_run
from oracle_client.escrow.receipt import Fault, Outcome, Receipt, ReceiptError, validate
from oracle_client.models import ServiceQuote
from oracle_client.oracle_server.rules import UndecidableReceipt, decide, split
from tests.doubles.oracle import CONSUMER, PROVIDER, receipt_for

LOCK = 10_000_000
T0 = 1_800_000_000_000
PRICE = 3_600_000  # 3.6 NTX per machine-hour: one base unit per millisecond
QUOTE = ServiceQuote(
    job_id="job-bill",
    network="testnet",
    consumer_peer_id=CONSUMER.peer_id,
    consumer_pkh=CONSUMER.pkh,
    provider_peer_id=PROVIDER.peer_id,
    compute_provider_addr=PROVIDER.address(),
    provider_pkh=PROVIDER.pkh,
    estimated_price=LOCK,
    deadline=2_000_000_000_000,
    oracle_key="00" * 32,
    oracle_message="00",
    signature="00" * 64,
)


def metered(outcome: Outcome, fault: Fault, *, started: bool = True, ms: int = 4_000) -> Receipt:
    charge = min(LOCK, PRICE * ms // 3_600_000) if started else 0
    return receipt_for(
        QUOTE,
        outcome,
        fault,
        started=started,
        signers=(),
        spec="small",
        price_units_hour=PRICE,
        min_charge=0,
        subtasks=single_run(T0, T0 + ms),
        charge=charge,
    )


@pytest.mark.parametrize(
    ("outcome", "fault", "started", "expected"),
    [
        ("completed", "none", True, ("distribute", 4_000, LOCK - 4_000)),
        ("cancelled", "consumer", True, ("distribute", 4_000, LOCK - 4_000)),  # up to the cancel
        ("failed", "consumer", True, ("distribute", 4_000, LOCK - 4_000)),  # its own code
        ("oom", "consumer", True, ("distribute", 4_000, LOCK - 4_000)),
        ("timeout", "consumer", True, ("distribute", 4_000, LOCK - 4_000)),
        ("failed", "provider", True, ("refund", 0, LOCK)),  # the provider's fault
        ("interrupted", "provider", True, ("refund", 0, LOCK)),  # vanished
        ("cancelled", "consumer", False, ("refund", 0, LOCK)),  # never started
        ("failed", "none", False, ("refund", 0, LOCK)),
    ],
)
def test_split_for_every_outcome(
    outcome: Outcome, fault: Fault, started: bool, expected: tuple[str, int, int]
) -> None:
    receipt = metered(outcome, fault, started=started)
    kind = decide(receipt)
    assert (kind, *split(receipt, kind)) == expected


def test_a_run_past_the_lock_is_capped_at_the_lock() -> None:
    receipt = metered("completed", "none", ms=LOCK + 60_000)
    assert split(receipt, decide(receipt)) == (LOCK, 0)


def test_a_started_job_without_fault_or_completion_is_undecidable() -> None:
    with pytest.raises(UndecidableReceipt):
        decide(metered("cancelled", "none"))


def test_a_receipt_whose_charge_is_not_its_own_figures_does_not_validate() -> None:
    good = metered("completed", "none")
    assert good.machine_ms == 4_000 and good.charge == 4_000
    for charge in (3_999, 4_001, LOCK):
        with pytest.raises(ValueError, match="charge"):
            validate(msgspec.structs.replace(good, charge=charge))
    # The minimum charge applies to a job that started; never more than the lock.
    floor = msgspec.structs.replace(good, min_charge=5_000, charge=5_000)
    assert validate(floor).charge == 5_000
    with pytest.raises(ValueError, match="charge"):
        validate(msgspec.structs.replace(good, min_charge=LOCK + 1, charge=LOCK + 1))
    assert validate(msgspec.structs.replace(good, min_charge=LOCK + 1, charge=LOCK)).charge == LOCK


def test_billing_fields_are_signed() -> None:
    signed = receipt_for(
        QUOTE,
        price_units_hour=PRICE,
        min_charge=0,
        subtasks=single_run(T0, T0 + 4_000),
        charge=4_000,
    )
    from oracle_client.escrow.receipt import verify

    verify(signed)
    cheaper = msgspec.structs.replace(signed, price_units_hour=PRICE // 2, charge=2_000)
    with pytest.raises(ReceiptError, match="signature"):
        verify(cheaper)
