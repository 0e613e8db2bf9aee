"""A hostile provider's receipt, inside a real daemon: Python imports this module at start-up
when tests/adversarial/test_overbilling.py puts its folder on the daemon's PYTHONPATH.

``NUNET_TEST_OVERBILL`` says how the provider cheats when it signs its receipt: ``time``
(ten more minutes of machine time), ``price`` (ten times the quoted price) or ``lock`` (a
lock of 1 NTX more than the chain holds). The receipt stays self-consistent (its charge is
what its own fields make), so only the consumer's comparison with what it saw can refuse it.
``early_start``: the consistent liar (issue 20 §7): the job's start as the provider records
it, tells it in every Update and signs it in the receipt is ``EARLY_START_S`` earlier than
it was (``NUNET_TEST_EARLY_START_S``, 600 s by default); only the consumer's own clock
can tell.
"""

from __future__ import annotations

import os
from typing import Any

MODE = os.environ.get("NUNET_TEST_OVERBILL", "")
EXTRA_MS = 600_000
EXTRA_LOCK_UNITS = 1_000_000
EARLY_START_S = float(os.environ.get("NUNET_TEST_EARLY_START_S", "600"))


def _install() -> None:
    import msgspec

    from oracle_client import billing
    from oracle_client.escrow import receipt as rc

    honest_sign = rc.sign

    def hostile_sign(receipt: Any, private_key: bytes) -> Any:
        if receipt.consumer_signature or receipt.provider_signature or not receipt.subtasks:
            return honest_sign(receipt, private_key)
        changes: dict[str, Any] = {}
        if MODE == "time":
            run = receipt.subtasks[0].replicas[0]
            changes["subtasks"] = billing.single_run(run.started_at - EXTRA_MS, run.ended_at)
        elif MODE == "price":
            changes["price_units_hour"] = receipt.price_units_hour * 10
        elif MODE == "lock":
            changes["amount"] = receipt.amount + EXTRA_LOCK_UNITS
        subtasks = changes.get("subtasks", receipt.subtasks)
        changes["charge"] = billing.charge(
            changes.get("price_units_hour", receipt.price_units_hour),
            billing.machine_time_ms(subtasks),
            min_charge=receipt.min_charge,
            cap=changes.get("amount", receipt.amount),
            started=receipt.started,
        )
        return honest_sign(msgspec.structs.replace(receipt, **changes), private_key)

    rc.sign = hostile_sign


def _install_early_start() -> None:
    import msgspec

    from engine.jobs import provider

    honest_save = provider.ProviderJobs._save
    shifted: set[str] = set()

    def lying_save(self: Any, job: Any) -> Any:
        if job.state == "running" and job.started_at is not None and job.job_id not in shifted:
            shifted.add(job.job_id)
            # The start as it records it, its first run's (what the receipt bills) with it.
            runs = tuple(job.runs)
            if runs:
                first = msgspec.structs.replace(
                    runs[0], started_at=runs[0].started_at - EARLY_START_S
                )
                runs = (first, *runs[1:])
            job = msgspec.structs.replace(job, started_at=job.started_at - EARLY_START_S, runs=runs)
        return honest_save(self, job)

    provider.ProviderJobs._save = lying_save  # type: ignore[method-assign]


if MODE in ("time", "price", "lock"):
    _install()
elif MODE == "early_start":
    _install_early_start()
