"""Paid jobs to a provider behind a slow, lossy link (issue 20 §1): one submit, one provider,
one run, one payment, whatever the link does to the exchange.

The provider runs in its own network namespace and reaches the consumer only through a relay
of ours (tests/slow_link.py) that stalls 2-15 s at random and cuts connections; the ledger,
the oracle and the scripts' server are reached through the same relay without delay
(bench/money_chaos.py delays those too, and restarts every party).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_payments_e2e import Market, _escrow, market, scripts
from tests.slow_link import paid_pair_behind_link

__all__ = ["daemons", "market", "scripts"]

# The provider's side of the link: every chunk 20-200 ms late, a stall of 2-15 s every 20 s on
# average in each direction (what crosses meanwhile arrives at its end), each connection cut
# after a minute on average. (py-libp2p's handshakes give up within 10 s: a link 2-15 s late
# all the time never connects at all; that is issue 24's.)
LINK = os.environ.get("NUNET_SLOW_LINK", "delay=0.02-0.2,stall=20:2-15,drop=60")
# Heartbeats every 5 s: a peer counts as gone after 15 s of silence, as it would on a real
# network (the suite's 1 s would drop it at every stall).
SLOW_HEARTBEAT = {"NUNET_NETWORK_HEARTBEAT_INTERVAL_S": "5"}
JOBS = 20
# NUNET_SLOW_LINK_DEBUG=1: the provider logs at debug level (libp2p's dials included).
DEBUG = {"NUNET_LOG_LEVEL": "debug"} if os.environ.get("NUNET_SLOW_LINK_DEBUG") else {}
SUBMITTERS = 2


def _settled(daemon: Daemon) -> bool:
    """Every escrow of ``daemon`` decided and spent (none locked, none on its way)."""
    final = ("paid_out", "refunded", "claimed")
    return all(e["state"] in final for e in daemon.cli("reward", "list")["escrows"])


QUICK = """
import time
for i in range(3):
    print(f"step {i}", flush=True)
    time.sleep(0.5)
"""


@pytest.mark.timeout(900)
def test_twenty_paid_jobs_over_a_slow_lossy_link_each_run_and_paid_once(
    market: Market, scripts: str, tmp_path: Path
) -> None:
    """Twenty paid submits to one provider whose link holds frames seconds at a time and cuts
    connections: every job runs once, at that provider, and is paid once to the base unit
    (the chain, both books and the receipt agree); no lock is left behind, no job is in two
    states. Slow by nature (the link's own delays and cuts): 40-80 s."""
    (tmp_path / "www" / "quick.py").write_text(QUICK)
    with paid_pair_behind_link(
        market, scripts, LINK, slots=JOBS, env={**SLOW_HEARTBEAT}, provider_env=DEBUG
    ) as pair:
        consumer, provider = pair.consumer, pair.provider
        consumer_address, provider_id = pair.consumer_address, provider.peer_id
        before = market.ntx(consumer_address)
        url = f"{pair.scripts}/quick.py"
        submitted: list[dict[str, Any]] = []
        failures: list[str] = []

        def submitter(count: int) -> None:
            for _ in range(count):
                # As a script would: a provider whose slots or CPU are all taken now
                # is asked again a moment later ("no matching peer": nothing locked).
                give_up = time.monotonic() + 240
                while True:
                    result = run_cli(
                        "job", "submit", "--url", url, "--framework", "scikit-learn",
                        "--expected-minutes", "1", "--no-queue", "--json", home=consumer.home,
                    )  # fmt: skip
                    if result.returncode == 0:
                        submitted.append(json.loads(result.stdout))
                        break
                    if "no matching peer" not in result.stderr or time.monotonic() > give_up:
                        failures.append(result.stderr.strip())
                        break
                    time.sleep(1.0)

        threads = [
            threading.Thread(target=submitter, args=(JOBS // SUBMITTERS,))
            for _ in range(SUBMITTERS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
        assert not failures, failures
        job_ids = [job["job_id"] for job in submitted]
        assert len(job_ids) == JOBS
        assert {job["provider"] for job in submitted} == {provider_id}
        wait_for(
            lambda: _settled(consumer) and _settled(provider),
            "not every escrow was settled: a lock stranded",
            420,
        )
        # One run each, at this provider, completed, and paid once.
        consumer_jobs = {j["job_id"]: j for j in consumer.cli("job", "list")["jobs"]}
        provider_jobs = {j["job_id"]: j for j in provider.cli("job", "list")["jobs"]}
        assert set(provider_jobs) == set(job_ids)
        # Any other job of the consumer's was refused before it ran (its lock refunded).
        others = set(consumer_jobs) - set(job_ids)
        assert {consumer_jobs[job_id]["state"] for job_id in others} <= {"refused"}
        for job_id in others:
            assert _escrow(consumer, job_id).get("state") in (None, "refunded")
        print(f"{len(others)} submit(s) refused and refunded on the way")
        charged = 0
        for job_id in job_ids:
            assert consumer_jobs[job_id]["state"] == provider_jobs[job_id]["state"]
            assert consumer_jobs[job_id]["state"] == "completed"
            paid, claimed = _escrow(consumer, job_id), _escrow(provider, job_id)
            assert paid["state"] == "paid_out" and claimed["state"] == "claimed"
            assert paid["paid_units"] == claimed["paid_units"] == paid["metered_units"]
            assert paid["paid_units"] + paid["refunded_units"] == paid["amount"]
            charged += paid["paid_units"]
        assert market.ntx(consumer_address) == before - charged
        assert market.ntx(pair.provider_address) == charged
