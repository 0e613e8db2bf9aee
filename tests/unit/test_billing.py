"""oracle_client.billing: machine time over subtasks and replicas, and the charge for it."""

from __future__ import annotations

import msgspec
import pytest

from oracle_client import billing
from oracle_client.billing import Replica, Subtask, charge, machine_time_ms

T0 = 1_800_000_000_000


def _replica(start_s: float, end_s: float) -> Replica:
    return Replica(started_at=T0 + int(start_s * 1000), ended_at=T0 + int(end_s * 1000))


def test_machine_time_sums_every_replica_of_every_subtask() -> None:
    subtasks = (
        Subtask(replicas=(_replica(0, 10), _replica(0, 12), _replica(5, 6))),  # 23 s
        Subtask(replicas=(_replica(100, 160),)),  # 60 s
        Subtask(replicas=()),  # planned, never run
    )
    assert machine_time_ms(subtasks) == 83_000
    assert machine_time_ms(()) == 0


def test_single_run_is_one_subtask_with_one_replica() -> None:
    (subtask,) = billing.single_run(T0, T0 + 1234)
    assert subtask.replicas == (Replica(started_at=T0, ended_at=T0 + 1234),)
    assert machine_time_ms(billing.single_run(T0, T0 + 1234)) == 1234


def test_charge_floors_to_the_base_unit() -> None:
    # 3.6 NTX/h is one base unit per millisecond: exact
    assert charge(3_600_000, 1_500, cap=10**9) == 1_500
    # 1 NTX/h for 1 s: 277.77... base units -> 277, never 278
    assert charge(1_000_000, 1_000, cap=10**9) == 277
    # one millisecond of a cheap spec rounds down to nothing
    assert charge(1_000, 1, cap=10**9) == 0


def test_charge_over_several_subtasks_and_replicas() -> None:
    subtasks = (
        Subtask(replicas=(_replica(0, 1800), _replica(0, 1800))),  # 1 h in all
        Subtask(replicas=(_replica(0, 900),)),  # 0.25 h
    )
    ms = machine_time_ms(subtasks)
    assert ms == 4_500_000
    assert charge(2_400_000, ms, cap=10**9) == 3_000_000  # 2.4 NTX/h x 1.25 h


def test_minimum_charge_and_cap() -> None:
    assert charge(1_000_000, 1_000, min_charge=5_000, cap=10**9) == 5_000
    assert charge(1_000_000, 10 * 3_600_000, min_charge=5_000, cap=2_000_000) == 2_000_000
    # the cap wins over a minimum charge above it: never more than the lock
    assert charge(1_000_000, 0, min_charge=5_000, cap=3_000) == 3_000
    assert charge(1_000_000, 3_600_000, cap=1_000_000) == 1_000_000  # exactly the cap


def test_zero_time_and_never_started() -> None:
    assert charge(1_000_000, 0, cap=10**9) == 0
    assert charge(1_000_000, 0, min_charge=7, cap=10**9) == 7  # started: the minimum applies
    assert charge(1_000_000, 3_600_000, min_charge=7, cap=10**9, started=False) == 0
    assert charge(0, 3_600_000, cap=10**9) == 0  # a free spec


@pytest.mark.parametrize(
    "kwargs",
    [
        {"price_units_hour": -1, "machine_ms": 1, "cap": 1},
        {"price_units_hour": 1, "machine_ms": -1, "cap": 1},
        {"price_units_hour": 1, "machine_ms": 1, "cap": -1},
        {"price_units_hour": 1.5, "machine_ms": 1, "cap": 1},
        {"price_units_hour": True, "machine_ms": 1, "cap": 1},
    ],
)
def test_charge_refuses_what_is_not_a_non_negative_integer(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        charge(**kwargs)  # type: ignore[arg-type]


def test_replica_that_ends_before_it_starts_does_not_decode() -> None:
    with pytest.raises(msgspec.ValidationError, match="before it starts"):
        msgspec.json.decode(
            b'{"started_at": 1800000001000, "ended_at": 1800000000000}', type=Replica
        )


def test_replica_counts_are_bounded() -> None:
    too_many = {"replicas": [{"started_at": T0, "ended_at": T0}] * (billing.MAX_REPLICAS + 1)}
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(too_many, Subtask)


def test_shortened_brings_the_latest_ends_forward_and_keeps_every_start() -> None:
    subtasks = (Subtask(replicas=(_replica(0, 10), _replica(20, 24))),)  # 14 s
    assert billing.shortened(subtasks, 20_000) == subtasks  # already within
    assert billing.shortened(subtasks, 12_000) == (
        Subtask(replicas=(_replica(0, 10), _replica(20, 22))),
    )
    # More than the last run: it shrinks to nothing and the one before it gives the rest.
    assert billing.shortened(subtasks, 7_000) == (
        Subtask(replicas=(_replica(0, 7), _replica(20, 20))),
    )
    assert machine_time_ms(billing.shortened(subtasks, 0)) == 0
