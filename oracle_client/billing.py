"""Machine-time billing (issue 12): what a job used and what that costs, in NTX base units.

UtilityNet's formula: a job's machine time is the sum of its subtasks' machine time, a
subtask's the sum over its replicas, a replica's its end minus its start. The charge is the
spec's price per machine-hour times that time, floored to the base unit (a provider is never
paid a base unit that was not used), at least the spec's minimum charge, at most the lock.

Engine and oracle both import this module, so both compute the same figure from the same
signed fields; only integers, so every implementation agrees to the base unit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

import msgspec
from msgspec import Meta

from oracle_client.fields import PosixMs

MS_PER_HOUR = 3_600_000
# Bounded so a peer cannot make a receipt (or the oracle's work on one) unbounded; far above
# what the clusters work plans (a handful of subtasks, a few replicas each).
MAX_SUBTASKS = 256
MAX_REPLICAS = 64


class Replica(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """One run of a subtask on one machine, POSIX milliseconds; ``paused_ms`` of it the job
    was held frozen (a checkpoint), which is not machine time. (Left out when 0, so every
    receipt from before it encodes, and is signed, as it was.)"""

    started_at: PosixMs
    ended_at: PosixMs
    paused_ms: Annotated[int, Meta(ge=0)] = 0

    def __post_init__(self) -> None:
        if self.ended_at < self.started_at:
            raise ValueError(
                f"a replica ends ({self.ended_at}) before it starts ({self.started_at})"
            )
        if self.paused_ms > self.ended_at - self.started_at:
            raise ValueError(f"a replica paused {self.paused_ms} ms, longer than it lasted")

    @property
    def machine_ms(self) -> int:
        return self.ended_at - self.started_at - self.paused_ms


class Subtask(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    replicas: Annotated[tuple[Replica, ...], Meta(max_length=MAX_REPLICAS)]

    @property
    def machine_ms(self) -> int:
        return sum(replica.machine_ms for replica in self.replicas)


Subtasks = Annotated[tuple[Subtask, ...], Meta(max_length=MAX_SUBTASKS)]


def machine_time_ms(subtasks: Iterable[Subtask]) -> int:
    return sum(subtask.machine_ms for subtask in subtasks)


def single_run(started_at: int, ended_at: int) -> tuple[Subtask, ...]:
    """The subtasks of a job that ran once: one subtask with one replica."""
    return runs(((started_at, ended_at, 0),))


def runs(spans: Iterable[tuple[int, int, int]]) -> tuple[Subtask, ...]:
    """The subtasks of today's jobs: one subtask, each run of it (the first, and each one
    resumed from a checkpoint) one replica: (start, end, paused)."""
    replicas = tuple(
        Replica(started_at=start, ended_at=end, paused_ms=paused) for start, end, paused in spans
    )
    return (Subtask(replicas=replicas),) if replicas else ()


def grouped(groups: Iterable[Iterable[tuple[int, int, int]]]) -> tuple[Subtask, ...]:
    """The subtasks of a job with steps (issue 25 §1): one per step, each replica that ran
    one replica of it, (start, end, paused); a replica that never started is in none."""
    subtasks = (
        tuple(Replica(started_at=s, ended_at=e, paused_ms=p) for s, e, p in group)
        for group in groups
    )
    return tuple(Subtask(replicas=replicas) for replicas in subtasks if replicas)


def shortened(subtasks: tuple[Subtask, ...], machine_ms: int) -> tuple[Subtask, ...]:
    """``subtasks`` billing at most ``machine_ms``: the latest ends are brought forward
    (the last replica of the last subtask first), every start kept. What a consumer offers
    to sign when a receipt bills more machine time than it watched (issue 20 §7)."""
    excess = machine_time_ms(subtasks) - max(0, machine_ms)
    if excess <= 0:
        return subtasks
    cut: list[Subtask] = []
    for subtask in reversed(subtasks):
        replicas: list[Replica] = []
        for replica in reversed(subtask.replicas):
            take = min(excess, replica.machine_ms)
            excess -= take
            replicas.append(
                Replica(
                    started_at=replica.started_at,
                    ended_at=replica.ended_at - take,
                    paused_ms=replica.paused_ms,
                )
            )
        cut.append(Subtask(replicas=tuple(reversed(replicas))))
    return tuple(reversed(cut))


def metered(price_units_hour: int, machine_ms: int) -> int:
    """Floor of price x time, in base units: the one product every figure is built on (the
    quote's estimate and lock, the charge)."""
    return price_units_hour * machine_ms // MS_PER_HOUR


def charge(
    price_units_hour: int,
    machine_ms: int,
    *,
    min_charge: int = 0,
    cap: int,
    started: bool = True,
) -> int:
    """Base units owed for ``machine_ms`` of machine time at ``price_units_hour``.

    Floor of price x time, raised to ``min_charge``, lowered to ``cap`` (the lock); 0 for a
    job that never started (nothing ran, so no minimum charge either).
    """
    for name, value in (
        ("price_units_hour", price_units_hour),
        ("machine_ms", machine_ms),
        ("min_charge", min_charge),
        ("cap", cap),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if not started:
        return 0
    return min(cap, max(min_charge, metered(price_units_hour, machine_ms)))
