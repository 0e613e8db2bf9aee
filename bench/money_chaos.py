"""Paid jobs under bad weather (issue 20 §1): a provider behind a slow, lossy link while the
provider, the consumer, the ledger and the oracle are restarted at random; what came out.

    .venv/bin/python bench/money_chaos.py [--jobs 20] [--chaos-s 25] [--seed 1]
        [--link delay=0.05-0.3,stall=15:2-15,drop=45] [--services-link delay=0.05-0.5]

Needs root (the provider runs in its own network namespace, reached only through the relay of
tests/latency_relay.py; its ledger, oracle and scripts' server through it too, with
``--services-link``). Two submitters send ``--jobs`` paid jobs as a script would (a submit
that fails because a party is down, or every slot is taken, is sent again); meanwhile every
``--chaos-s`` on average one party is restarted: the provider or the consumer daemon (SIGKILL,
then started again on the same home), the ledger (stopped, started again on its database and
port) or the oracle (its server closed, then back on its key and store). Chaos stops when the
last job is submitted; then everything is given ``--settle-s`` to settle.

It prints, for the jobs the consumer knows of: how many completed; how many were paid
correctly to the base unit (the consumer's book paid_out and the provider's claimed, both
with the receipt's charge, paid + refunded = locked, and the chain's NTX moved by exactly the
sum); how many ended otherwise with their lock refunded; how many are stranded (a job not
ended, or a lock neither paid nor refunded: the goal is 0); and the time from submit to
settled (median and max).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import run_cli
from tests.daemon_harness import Daemon, spawner
from tests.daemons.test_payments_e2e import Market
from tests.slow_link import paid_pair_behind_link

QUICK = "import time\nfor i in range(3):\n    print(f'step {i}', flush=True)\n    time.sleep(0.5)\n"
FINAL = ("paid_out", "refunded", "claimed")


@dataclass
class ChaosMarket(Market):
    """The market, and what restarting its ledger needs."""

    ledger_db: Path = Path()
    # The lock checker's way to the ledger: the same cell after a restart of the ledger.
    current: dict[str, Any] = field(default_factory=dict)

    def restart_ledger(self) -> None:
        from oracle_client.ledger import start_server

        port = int(self.ledger.url.split(":")[2].split("/")[0])
        self.ledger.stop()
        time.sleep(0.5)
        self.ledger = self.current["ledger"] = start_server(self.ledger_db, port=port)


@contextlib.contextmanager
def market_in(root: Path) -> Iterator[ChaosMarket]:
    """The ledger and the oracle of tests/daemons/test_payments_e2e.py's fixture, here."""
    from pycardano import BlockFrostChainContext, Network

    from oracle_client.escrow.contract import escrow_address
    from oracle_client.ledger import start_server
    from oracle_client.oracle_server.keys import load_or_create_key
    from oracle_client.oracle_server.locks import ChainLockChecker
    from oracle_client.oracle_server.server import OracleServer
    from oracle_client.oracle_server.service import Oracle
    from oracle_client.oracle_server.store import Store

    ledger = start_server(root / "ledger.db")
    current: dict[str, Any] = {"ledger": ledger}
    unit = bytes.fromhex(ledger.ntx_unit)
    checker = ChainLockChecker(
        lambda: BlockFrostChainContext("local", base_url=current["ledger"].url),
        escrow_address(Network.TESTNET),
        (unit[:28], unit[28:]),
    )
    store = Store(root / "oracle.db")
    oracle = Oracle(load_or_create_key(root / "oracle.key"), store, checker, "testnet")
    server = OracleServer(oracle, poll_interval=0.05).start()
    started: list[Daemon] = []
    spawn = spawner(root, started)
    market = ChaosMarket(ledger, server.url, server, spawn, oracle, root / "ledger.db", current)
    try:
        yield market
    finally:
        for daemon in started:
            with contextlib.suppress(Exception):
                daemon.stop(kill=True)
        with contextlib.suppress(Exception):
            market.oracle_server.close()
        store.close()
        current["ledger"].stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--chaos-s", type=float, default=25.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--link", default="delay=0.05-0.3,stall=15:2-15,drop=45")
    parser.add_argument("--services-link", default="delay=0.05-0.5")
    parser.add_argument("--settle-s", type=float, default=600.0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="nunet-money-chaos-"))
    (root / "www").mkdir()
    (root / "www" / "quick.py").write_text(QUICK)
    from bench._common import serve_directory

    scripts = serve_directory(root / "www")
    started = time.monotonic()
    with (
        market_in(root) as market,
        paid_pair_behind_link(
            market,
            scripts,
            args.link,
            slots=args.jobs,
            services_link=args.services_link,
            env={"NUNET_NETWORK_HEARTBEAT_INTERVAL_S": "5"},
            consumer_funds=(max(4, args.jobs // 4), 40, 5),
            provider_ada=10 * args.jobs,
            consumer_port=_free_port(),
        ) as pair,
    ):
        return run(args, rng, market, pair, started)


def run(
    args: argparse.Namespace, rng: random.Random, market: ChaosMarket, pair: Any, t0: float
) -> int:
    consumer, provider = pair.consumer, pair.provider
    before_consumer = market.ntx(pair.consumer_address)
    before_provider = market.ntx(pair.provider_address)
    url = f"{pair.scripts}/quick.py"
    submitted_at: dict[str, float] = {}
    lock = threading.Lock()
    done = threading.Event()
    events: list[str] = []

    def submitter(count: int) -> None:
        for _ in range(count):
            give_up = time.monotonic() + 300
            while time.monotonic() < give_up:
                result = run_cli(
                    "job", "submit", "--url", url, "--framework", "scikit-learn",
                    "--expected-minutes", "1", "--json", home=consumer.home,
                )  # fmt: skip
                if result.returncode == 0:
                    job = json.loads(result.stdout)
                    with lock:
                        submitted_at[job["job_id"]] = time.monotonic()
                    break
                time.sleep(1.0)

    def chaos() -> None:
        while not done.wait(rng.expovariate(1 / args.chaos_s)):
            victim = rng.choice(("provider", "consumer", "ledger", "oracle"))
            events.append(f"{time.monotonic() - t0:6.1f} s  restart {victim}")
            try:
                if victim in ("provider", "consumer"):
                    daemon = provider if victim == "provider" else consumer
                    daemon.stop(kill=True)
                    time.sleep(rng.uniform(0.5, 3.0))
                    daemon.start(timeout=60)
                elif victim == "ledger":
                    market.restart_ledger()
                else:
                    market.oracle_down()
                    time.sleep(rng.uniform(0.5, 3.0))
                    market.oracle_up()
            except Exception as exc:  # a failed restart is a figure too, never the end
                events.append(f"        restart of {victim} failed: {exc}")

    chaos_thread = threading.Thread(target=chaos, daemon=True)
    chaos_thread.start()
    per = [args.jobs // 2, args.jobs - args.jobs // 2]
    threads = [threading.Thread(target=submitter, args=(n,)) for n in per]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    chaos_thread.join()
    submitted_s = time.monotonic() - t0

    settled_at: dict[str, float] = {}
    deadline = time.monotonic() + args.settle_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            mine = {e["job_id"]: e for e in _escrows(consumer)}
            theirs = {e["job_id"]: e for e in _escrows(provider)}
            for job_id, escrow in mine.items():
                if job_id in settled_at or escrow["state"] not in FINAL:
                    continue
                if theirs.get(job_id, {}).get("state", "claimed") in FINAL:
                    settled_at[job_id] = time.monotonic()
            jobs = consumer.cli("job", "list")["jobs"]
            if all(j["state"] in TERMINAL for j in jobs) and set(mine) <= set(settled_at):
                break
        time.sleep(1.0)

    jobs = {j["job_id"]: j for j in consumer.cli("job", "list")["jobs"]}
    provider_jobs = {j["job_id"]: j for j in provider.cli("job", "list")["jobs"]}
    mine = {e["job_id"]: e for e in _escrows(consumer)}
    theirs = {e["job_id"]: e for e in _escrows(provider)}
    completed = [j for j in jobs.values() if j["state"] == "completed"]
    paid_right, refunded, stranded, charged = 0, 0, [], 0
    for job_id, job in jobs.items():
        record = mine.get(job_id)
        if job["state"] not in TERMINAL:
            stranded.append(f"{job_id}: job {job['state']}")
            continue
        if record is None:
            continue  # never locked (refused before the lock)
        other = theirs.get(job_id, {})
        if record["state"] == "paid_out":
            ok = (
                other.get("state") == "claimed"
                and record["paid_units"] == other.get("paid_units") == record["metered_units"]
                and record["paid_units"] + record["refunded_units"] == record["amount"]
                and provider_jobs.get(job_id, {}).get("state") == job["state"]
            )
            paid_right += ok
            charged += record["paid_units"]
            if not ok:
                stranded.append(f"{job_id}: paid but the books disagree: {record} / {other}")
        elif record["state"] == "refunded":
            refunded += 1
        else:
            stranded.append(f"{job_id}: lock {record['state']} ({record.get('error', '')[:120]})")
    chain_ok = (
        market.ntx(pair.consumer_address) == before_consumer - charged
        and market.ntx(pair.provider_address) == before_provider + charged
    )
    times = [settled_at[j] - submitted_at[j] for j in submitted_at if j in settled_at]
    print("\n".join(events))
    print(f"link: {args.link}; services: {args.services_link}; restarts: {len(events)}")
    print(
        f"jobs submitted (accepted): {len(submitted_at)} of {args.jobs} asked, "
        f"in {submitted_s:.0f} s"
    )
    print(f"jobs the consumer knows of: {len(jobs)}")
    print(f"completed: {len(completed)}")
    print(f"paid correctly to the base unit: {paid_right} (chain agrees: {chain_ok})")
    print(f"ended otherwise, lock refunded: {refunded}")
    print(f"stranded: {len(stranded)} (goal 0)")
    for line in stranded:
        print(f"  {line}")
    if times:
        print(
            f"submit to settled: median {statistics.median(times):.0f} s, max {max(times):.0f} s "
            f"(n={len(times)})"
        )
    return 0 if not stranded and chain_ok else 1


TERMINAL = ("completed", "failed", "oom", "timeout", "cancelled", "interrupted", "refused")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _escrows(daemon: Daemon) -> list[dict[str, Any]]:
    return list(daemon.cli("reward", "list")["escrows"])


if __name__ == "__main__":
    sys.exit(main())
