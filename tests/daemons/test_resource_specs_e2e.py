"""Two specs, two prices (issue 12), with real daemons on 127.0.0.1: the same job run under a
provider's cheap and dear specs is quoted, locked and metered at each spec's own price, and
both peers keep the same figures. (Unpaid: the on-chain end is
tests/daemons/test_payments_e2e.py.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine import api
from engine.domain import charges
from oracle_client import billing
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, scripts

__all__ = ["daemons", "scripts"]


def _run(consumer: Daemon, job_file: Path, url: str, spec: str) -> dict[str, Any]:
    job_file.write_text(
        f'framework = "scikit-learn"\nscript_url = "{url}"\nexpected_minutes = 1\n'
        f'max_minutes = 3\nresource_spec = "{spec}"\n',
        "utf-8",
    )
    job = consumer.cli("job", "submit", "-f", str(job_file))
    assert job["state"] == "accepted", job
    wait_for(lambda: _state(consumer, job["job_id"]) == "completed", f"{spec} job failed", 90)
    shown: dict[str, Any] = consumer.cli("job", "show", job["job_id"])
    return shown


@pytest.mark.timeout(300)  # two daemons and real jobs, on a machine that may be busy
def test_two_specs_quote_and_bill_at_their_own_prices(
    daemons: Callable[..., Daemon], scripts: str, tmp_path: Path
) -> None:
    provider, consumer = _pair(daemons)
    for name, price in (("cheap", "1"), ("dear", "4")):
        provider.cli(
            "resource", "spec", "add", name, "--cpu", "1", "--ram", "2048", "--price", price
        )
    wait_for(
        lambda: any(
            p["peer_id"] == provider.peer_id and len((p["resources"] or {}).get("specs", [])) == 2
            for p in consumer.cli("peer", "list")["peers"]
        ),
        "the consumer never saw both specs",
    )
    url = f"{scripts}/iris.py"
    cheap = _run(consumer, tmp_path / "cheap.toml", url, "cheap")
    dear = _run(consumer, tmp_path / "dear.toml", url, "dear")
    # Estimate: price x 1 min (expected); lock: price x 3 min (max_minutes), floored units.
    assert (cheap["price_units_hour"], cheap["estimate_units"], cheap["lock_units"]) == (
        1_000_000,
        16_666,
        50_000,
    )
    assert (dear["price_units_hour"], dear["estimate_units"], dear["lock_units"]) == (
        4_000_000,
        66_666,
        200_000,
    )
    for job in (cheap, dear):
        theirs = provider.cli("job", "show", job["job_id"])
        for field in ("resource_spec", "price_units_hour", "estimate_units", "lock_units"):
            assert theirs[field] == job[field], field
        # Billed its spec's price for its machine time, start to end: the charge its receipt
        # would sign, the same on both sides and in the metering record (issue 20 §9).
        # Its runs, less the time checkpoints held them frozen (issue 20 §7).
        record = {f.name: job[f.name] for f in msgspec.structs.fields(api.JobInfo) if f.name in job}
        machine_ms = charges.machine_ms(msgspec.convert(record, api.JobInfo)) or 0
        charge = billing.charge(
            job["price_units_hour"],
            machine_ms,
            min_charge=job["min_charge_units"],
            cap=job["lock_units"],
        )
        assert job["money"]["metered_units"] == theirs["money"]["metered_units"] == charge
        assert job["metering"]["cost_units"] == theirs["metering"]["cost_units"] == charge
    walls = [j["money"]["machine_ms"] / 1000 for j in (cheap, dear)]
    per_second = [
        j["money"]["metered_units"] / 1e6 / w for j, w in zip((cheap, dear), walls, strict=True)
    ]
    # Each cost is floored to the base unit (1e-6 NTX): on jobs of a second or so that is
    # 0.1 % of it, so the allowance is those two floors, per second (rel=1e-3 was flaky).
    floors = 1e-6 / walls[1] + 4 * 1e-6 / walls[0]
    assert per_second[1] == pytest.approx(4 * per_second[0], abs=floors)
