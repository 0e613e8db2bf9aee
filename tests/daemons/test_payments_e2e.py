"""Paid jobs end to end: real daemons on 127.0.0.1, the real local ledger (Blockfrost subset,
escrow script run by uplc on every spend) and the reference oracle over HTTP.

The consumer locks the quoted NTX before the provider starts, the provider checks the lock on
the chain, both sign the receipt, and the oracle's signature splits the lock in one tx: the
metered machine time to the provider, the rest back to the consumer (issue 12); all of it
back for a job that failed by the provider's fault.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_ADDRESS, run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import PROCESS_JOBS, kill_after_epochs, scripts
from tests.daemons.test_notify import command_hook_toml, notices

__all__ = ["daemons", "scripts"]

PASSPHRASE = {"NUNET_KEYRING_PASSPHRASE": "payments e2e passphrase"}
PROCESS_JOBS_NO_CHECKPOINTS = PROCESS_JOBS.replace(
    "checkpoint_interval_s = 1", "checkpoint_interval_s = 0"
)
DOWNTIME_S = 6
PRICES = "prices = { low = 6.0, moderate = 12.0, high = 30.0 }\n"  # 1 min of low: 0.1 NTX


@dataclass
class Market:
    ledger: Any
    oracle_url: str
    oracle_server: Any
    spawn: Callable[..., Daemon]
    oracle: Any = None

    def oracle_down(self) -> None:
        self.oracle_server.close()

    def oracle_up(self) -> None:
        """The same oracle (key, store) back on the same port, as after a restart."""
        from oracle_client.oracle_server.server import OracleServer

        port = int(self.oracle_url.rsplit(":", 1)[1].strip("/"))
        self.oracle_server = OracleServer(self.oracle, port=port, poll_interval=0.05).start()

    def toml(self, ledger_url: str = "") -> str:
        """``ledger_url``: another way to the same ledger (a flaky link in front of it)."""
        return (
            f'[payments]\nbackend = "local"\nledger_url = "{ledger_url or self.ledger.url}"\n'
            f'oracle_url = "{self.oracle_url}"\n'
            # The tests move the chain's clock past deadlines: a loop that looks every 2 s
            # (15 s by default) sees it without a test waiting out the rest.
            "settle_interval_s = 2\n"
        )

    def ntx(self, address: str) -> int:
        from pycardano import AssetName, ScriptHash

        unit = bytes.fromhex(self.ledger.ntx_unit)
        total = 0
        for utxo in self.context().utxos(address):
            assets = utxo.output.amount.multi_asset.get(ScriptHash(unit[:28]), {})
            total += int(assets.get(AssetName(unit[28:]), 0))
        return total

    def context(self) -> Any:
        from pycardano import BlockFrostChainContext

        return BlockFrostChainContext("local", base_url=self.ledger.url)


@pytest.fixture
def market(tmp_path: Path, daemons: Callable[..., Daemon]) -> Iterator[Market]:
    from pycardano import Network

    from oracle_client.escrow.contract import escrow_address
    from oracle_client.ledger import start_server
    from oracle_client.oracle_server.keys import load_or_create_key
    from oracle_client.oracle_server.locks import ChainLockChecker
    from oracle_client.oracle_server.server import OracleServer
    from oracle_client.oracle_server.service import Oracle
    from oracle_client.oracle_server.store import Store

    ledger = start_server(tmp_path / "ledger.db")
    store = Store(tmp_path / "oracle.db")
    server = None
    try:
        from pycardano import BlockFrostChainContext

        unit = bytes.fromhex(ledger.ntx_unit)
        checker = ChainLockChecker(
            lambda: BlockFrostChainContext("local", base_url=ledger.url),
            escrow_address(Network.TESTNET),
            (unit[:28], unit[28:]),
        )
        oracle = Oracle(load_or_create_key(tmp_path / "oracle.key"), store, checker, "testnet")
        server = OracleServer(oracle, poll_interval=0.05).start()
        market = Market(ledger, server.url, server, daemons, oracle)
        yield market
    finally:
        if server is not None:
            market.oracle_server.close()
        store.close()
        ledger.stop()


def _paid_pair(
    market: Market,
    consumer_ntx: float = 5,
    provider_jobs: str = PROCESS_JOBS,
    *,
    provider_ledger_url: str = "",
    consumer_env: dict[str, str] | None = None,
    provider_env: dict[str, str] | None = None,
    consumer_payments: str = "",
    notices_dir: Path | None = None,
) -> tuple[Daemon, Daemon]:
    """``consumer_payments``: more lines of the consumer's ``[payments]`` section;
    ``notices_dir``: a folder where each daemon's ``[notify]`` command writes its notices
    (``consumer.ndjson``, ``provider.ndjson``)."""

    def hook(role: str) -> str:
        return command_hook_toml(notices_dir / f"{role}.ndjson") if notices_dir else ""

    consumer = market.spawn(
        "consumer",
        41,
        extra_toml=market.toml() + consumer_payments + hook("consumer"),
        env={**PASSPHRASE, **(consumer_env or {})},
    )
    provider = market.spawn(
        "provider",
        40,
        bootstrap=consumer.addrs()[0],
        extra_toml=market.toml(provider_ledger_url) + provider_jobs + PRICES + hook("provider"),
        env={**PASSPHRASE, **(provider_env or {})},
    )
    for daemon, ada, ntx in ((consumer, 20, consumer_ntx), (provider, 10, 0)):
        address = daemon.cli("wallet", "new")["address"]
        market.ledger.faucet(address, ada=ada, ntx=ntx)
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    provider_id = provider.peer_id
    wait_for(
        lambda: any(p["peer_id"] == provider_id for p in consumer.cli("peer", "list")["peers"]),
        "the consumer never saw the provider",
    )
    return provider, consumer


def _submit(consumer: Daemon, url: str) -> dict[str, Any]:
    return consumer.cli(
        "job", "submit", "--url", url, "--framework", "scikit-learn", "--expected-minutes", "1"
    )


def _escrow(daemon: Daemon, job_id: str) -> dict[str, Any]:
    listed = daemon.cli("reward", "list")["escrows"]
    return next((e for e in listed if e["job_id"] == job_id), {})


def _address(daemon: Daemon) -> str:
    return str(daemon.cli("wallet", "show")["address"])


def test_completed_job_pays_the_provider_once(market: Market, scripts: str, tmp_path: Path) -> None:
    provider, consumer = _paid_pair(market, notices_dir=tmp_path)
    before = market.ntx(_address(consumer))
    job = _submit(consumer, f"{scripts}/iris.py")
    job_id = job["job_id"]
    locked = _escrow(consumer, job_id)
    assert locked["state"] in ("locked", "receipt", "paid_out") and locked["amount"] == 100_000
    # The consumer's NTX left its wallet before the provider ran anything.
    assert market.ntx(_address(consumer)) == before - 100_000
    assert _escrow(provider, job_id)["lock_tx"] == locked["lock_tx"]

    wait_for(
        lambda: _escrow(provider, job_id).get("state") == "claimed",
        "the provider never claimed",
        90,
    )
    shown = provider.cli("job", "show", job_id)
    receipt = json.loads(shown["receipt"])
    assert receipt["consumer_signature"] and receipt["provider_signature"]
    assert receipt["outcome"] == "completed" and receipt["fault"] == "none"
    wait_for(
        lambda: _escrow(consumer, job_id).get("state") == "paid_out",
        "the consumer never saw the payment",
        40,
    )
    # Metered (issue 12): the receipt's charge went to the provider, the rest of the lock
    # back to the consumer, in one tx; both books and the chain agree to the base unit.
    claimed, paid_out = _escrow(provider, job_id), _escrow(consumer, job_id)
    charge = receipt["charge"]
    assert 0 < charge < locked["amount"]
    for record in (claimed, paid_out):
        assert record["metered_units"] == charge
        assert (record["paid_units"], record["refunded_units"]) == (
            charge,
            locked["amount"] - charge,
        )
    assert market.ntx(_address(provider)) == charge
    assert market.ntx(_address(consumer)) == before - charge
    # Claiming again is answered from the book: no second transaction, nothing paid twice.
    again = provider.cli("reward", "claim", job_id)
    assert again["state"] == "claimed" and again["claim_tx"] == claimed["claim_tx"]
    assert again["settle_tx"] == claimed["claim_tx"]
    assert market.ntx(_address(provider)) == charge
    totals = provider.cli("reward", "list")
    assert totals["earned_units"] == charge
    assert consumer.cli("reward", "list")["spent_units"] == charge
    # Network status: this node's figures at once, the channel's from the next heartbeats.
    assert provider.cli("network", "status")["claimed_units"] == charge
    wait_for(
        lambda: consumer.cli("network", "status")["totals"]["paid_units"] == charge,
        "the channel's NTX paid never showed the claim",
        20,
    )
    _every_figure_is_the_charge(provider, consumer, job_id, charge, tmp_path)
    # The provider's record with the consumer (issue 27 §2) counts this job as the chain
    # settled it: one completed, paid out by the tx the ledger holds, a settle time measured.
    record = consumer.listed(provider.peer_id)["reputation"]
    assert (record["jobs"], record["completed"], record["provider_faults"]) == (1, 1, 0)
    assert record["settle_s"] is not None and paid_out["settle_tx"] == claimed["claim_tx"]


def _every_figure_is_the_charge(
    provider: Daemon, consumer: Daemon, job_id: str, charge: int, notices_at: Path
) -> None:
    """Issue 20 §9: each place one job's metered figure appears, on both sides, says the
    receipt's charge to the base unit. The metering's own figure (price x the sampled wall
    time, without the minimum charge or the cap) used to say another: 0.010101 NTX in the
    network status and the job's notice for a job whose receipt charged 0.010125 NTX."""
    from nunet_tui.viewmodels.money import amount

    said = amount(charge, "metered")
    for daemon, role in ((provider, "provider"), (consumer, "consumer")):
        shown = daemon.cli("job", "show", job_id)
        assert shown["money"]["metered_units"] == charge, role
        assert shown["metering"]["cost_units"] == charge, role
        assert said in run_cli("job", "show", job_id, home=daemon.home).stdout, role
        assert _escrow(daemon, job_id)["metered_units"] == charge, role
        status = daemon.cli("network", "status")
        ran = "metered_run_units" if role == "provider" else "metered_bought_units"
        assert status[ran] == charge, (role, status)
        assert said in run_cli("network", "status", home=daemon.home).stdout, role
        ended = wait_for(
            lambda role=role: [
                n for n in notices(notices_at / f"{role}.ndjson") if n["event"] == "job_ended"
            ],
            f"the {role} never told the job's end",
        )
        assert [n["job"]["metered_units"] for n in ended] == [charge], role
    paid = wait_for(
        lambda: [n for n in notices(notices_at / "provider.ndjson") if n["event"] == "reward_paid"],
        "the provider never told the reward",
    )
    assert [(n["escrow"]["metered_units"], n["escrow"]["paid_units"]) for n in paid] == [
        (charge, charge)
    ]


def test_a_job_that_fails_by_its_own_code_still_pays_the_provider(
    market: Market, scripts: str
) -> None:
    provider, consumer = _paid_pair(market)
    job_id = _submit(consumer, f"{scripts}/failing.py")["job_id"]
    wait_for(
        lambda: _escrow(provider, job_id).get("state") == "claimed",
        "the provider was never paid for the machine time",
        90,
    )
    receipt = json.loads(provider.cli("job", "show", job_id)["receipt"])
    assert receipt["outcome"] == "failed" and receipt["fault"] == "consumer"
    assert 0 < receipt["charge"] == _escrow(provider, job_id)["paid_units"]
    assert market.ntx(_address(provider)) == receipt["charge"]


def test_provider_crash_refunds_the_consumer_and_cannot_be_claimed(
    market: Market, scripts: str
) -> None:
    # No checkpoints: a provider that restarts cannot resume the job, its fault.
    provider, consumer = _paid_pair(market, provider_jobs=PROCESS_JOBS_NO_CHECKPOINTS)
    before = market.ntx(_address(consumer))
    job_id = _submit(consumer, f"{scripts}/slow.py")["job_id"]
    wait_for(lambda: provider.cli("job", "show", job_id)["state"] == "running", "never ran", 60)
    provider.stop(kill=True)
    provider.start()
    wait_for(
        lambda: _escrow(consumer, job_id).get("state") == "refunded",
        "the consumer was never refunded",
        90,
    )
    assert consumer.cli("job", "show", job_id)["state"] == "interrupted"
    assert market.ntx(_address(consumer)) == before
    # Held against the provider in its record with the consumer (issue 27 §2).
    record = consumer.listed(provider.peer_id)["reputation"]
    assert (record["completed"], record["provider_faults"]) == (0, 1)
    assert abs(record["score"] - 1 / 3) < 1e-9
    refused = run_cli("reward", "claim", job_id, "--json", home=provider.home)
    assert refused.returncode != 0 and "nothing to claim" in refused.stderr
    assert market.ntx(_address(provider)) == 0
    # Asking for the refund again changes nothing: the lock was spent once.
    again = consumer.cli("reward", "refund", job_id)
    assert again["state"] == "refunded"
    assert market.ntx(_address(consumer)) == before


def test_a_resumed_job_bills_each_run_never_the_downtime(market: Market, scripts: str) -> None:
    """Issue 20 §7: a provider killed mid-run resumes from its checkpoint after 6 s down;
    the receipt bills two runs, the first up to the checkpoint resumed from, the second to
    the end: not the downtime, not the epochs done again. Its one replica used to span the
    first start to the end (a job of 14.2 s metered wall time was billed 52 s)."""
    provider, consumer = _paid_pair(market)
    job_id = _submit(consumer, f"{scripts}/checkpointed.py")["job_id"]
    kill_after_epochs(provider, consumer, job_id, epochs=4, down_s=DOWNTIME_S)
    wait_for(lambda: _escrow(provider, job_id).get("state") == "claimed", "never paid for", 120)
    shown = provider.cli("job", "show", job_id)
    receipt = json.loads(shown["receipt"])
    first, second = receipt["subtasks"][0]["replicas"]  # countersigned by the consumer
    assert second["started_at"] - first["ended_at"] >= DOWNTIME_S * 1000
    whole_ms = int((shown["finished_at"] - shown["started_at"]) * 1000)
    billed_ms = sum(r["ended_at"] - r["started_at"] for r in (first, second))
    assert billed_ms <= whole_ms - DOWNTIME_S * 1000
    # The consumer's record of the runs is the provider's (its Updates carry them), and the
    # time checkpoints held each run frozen is left out of what it bills.
    assert consumer.cli("job", "show", job_id)["runs"] == shown["runs"]
    for run, replica in zip(shown["runs"], (first, second), strict=True):
        assert replica.get("paused_ms", 0) == int(run["frozen_s"] * 1000)
    assert _escrow(consumer, job_id)["metered_units"] == receipt["charge"]
    shown_text = run_cli("job", "show", job_id, home=consumer.home).stdout
    assert "  runs      2 (" in shown_text and "between them not billed" in shown_text


def test_insufficient_funds_and_oracle_down_are_clear_and_move_nothing(
    market: Market, scripts: str
) -> None:
    provider, consumer = _paid_pair(market, consumer_ntx=0.05)
    poor = run_cli(
        "job",
        "submit",
        "--url",
        f"{scripts}/iris.py",
        "--framework",
        "scikit-learn",
        "--expected-minutes",
        "1",
        home=consumer.home,
    )
    assert poor.returncode != 0
    assert "could not lock 0.1 NTX" in poor.stderr and "has 0.05 NTX" in poor.stderr
    # A script the provider cannot fetch is found out at the quote, before any lock is tried
    # (with 0.05 NTX, a lock would have failed for the funds instead).
    missing = run_cli(
        "job",
        "submit",
        "--url",
        f"{scripts}/missing.py",
        "--framework",
        "scikit-learn",
        "--expected-minutes",
        "1",
        home=consumer.home,
    )
    assert missing.returncode != 0
    assert "cannot fetch the job's script" in missing.stderr and "404" in missing.stderr
    market.oracle_down()
    down = run_cli(
        "job",
        "submit",
        "--url",
        f"{scripts}/iris.py",
        "--framework",
        "scikit-learn",
        "--expected-minutes",
        "1",
        home=consumer.home,
    )
    assert down.returncode != 0 and "unreachable" in down.stderr
    assert market.ntx(_address(consumer)) == 50_000
    assert provider.cli("job", "list")["jobs"] == []


def test_a_restart_in_the_middle_of_a_claim_neither_loses_nor_repeats_it(
    market: Market, scripts: str
) -> None:
    import sqlite3

    provider, consumer = _paid_pair(market)
    job_id = _submit(consumer, f"{scripts}/checkpointed.py")["job_id"]  # runs for 8 s
    market.oracle_down()  # the job ends while nobody can decide: the claim waits
    waiting = wait_for(
        lambda: (e := _escrow(provider, job_id)).get("state") == "receipt" and e["error"] and e,
        "the receipt was never countersigned, or the oracle never missed",
        90,
    )
    assert "unreachable" in waiting["error"] or "unavailable" in waiting["error"]
    provider.stop(kill=True)
    market.oracle_up()
    provider.start()
    wait_for(lambda: _escrow(provider, job_id).get("state") == "claimed", "never claimed", 60)
    paid = _escrow(provider, job_id)["paid_units"]
    assert paid and market.ntx(_address(provider)) == paid

    # A crash between submitting the claim and writing it down: the book says "claiming"
    # again. After the restart the chain shows the lock spent: done, nothing sent twice.
    claimed = _escrow(provider, job_id)
    provider.stop(kill=True)
    db = sqlite3.connect(provider.home.state_dir / "nunet.db")
    row = json.loads(
        db.execute("SELECT info FROM escrows WHERE job_id = ?", (job_id,)).fetchone()[0]
    )
    row["info"]["state"] = "claiming"
    db.execute(
        "UPDATE escrows SET state = 'claiming', info = ? WHERE job_id = ?",
        (json.dumps(row), job_id),
    )
    db.commit()
    db.close()
    provider.start()
    wait_for(lambda: _escrow(provider, job_id).get("state") == "claimed", "lost the claim", 60)
    assert _escrow(provider, job_id)["claim_tx"] == claimed["claim_tx"]
    assert market.ntx(_address(provider)) == paid


def test_after_the_deadline_the_consumer_takes_the_lock_back_without_the_oracle(
    market: Market, scripts: str
) -> None:
    provider, consumer = _paid_pair(market)
    job_id = _submit(consumer, f"{scripts}/slow.py")["job_id"]
    wait_for(lambda: provider.cli("job", "show", job_id)["state"] == "running", "never ran", 60)
    # The provider vanishes for good and the oracle is down: nobody can decide.
    provider.stop(kill=True)
    market.oracle_down()
    early = run_cli("reward", "refund", job_id, "--json", home=consumer.home)
    assert early.returncode != 0 and "can be refunded without the oracle" in early.stderr
    deadline_s = _escrow(consumer, job_id)["deadline_ms"] / 1000
    market.ledger.clock.advance(deadline_s - market.ledger.clock.now() + 5)
    refunded = consumer.cli("reward", "refund", job_id)
    assert refunded["state"] == "refunded" and refunded["claim_tx"]
    assert market.ntx(_address(consumer)) == 5_000_000


# --- metered settlement (issue 12) ---------------------------------------------------------

# A job that runs 6 s and its expected (= maximum) time, 12 s, at the low price of 6 NTX/h:
# the lock is 20,000 base units and about half of it is paid.
HALF = """
import time
for i in range(12):
    print(f"tick {i}", flush=True)
    time.sleep(0.5)
"""
# Machine time is measured by the provider from the job's start to its end, no more than the
# consumer watched plus a second (escrow.COUNTER_SLACK_MS), and the share paid of a 6 s run
# in a 12 s lock by the interpreter's start and the executor's bookkeeping: 0.45 to 0.75 on
# a loaded machine.
HALF_SHARE = (0.45, 0.75)


def _settled_split(
    market: Market, provider: Daemon, consumer: Daemon, job_id: str, before: int
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Wait for the split on both sides; check both books against the receipt and the chain."""
    from oracle_client import billing

    wait_for(lambda: _escrow(provider, job_id).get("state") == "claimed", "never settled", 90)
    wait_for(lambda: _escrow(consumer, job_id).get("state") == "paid_out", "never seen", 40)
    ours, theirs = _escrow(provider, job_id), _escrow(consumer, job_id)
    receipt = json.loads(provider.cli("job", "show", job_id)["receipt"])
    assert receipt["consumer_signature"] and receipt["provider_signature"]
    lock = ours["amount"]
    assert lock == theirs["amount"] == receipt["amount"]
    subtasks = _subtasks(receipt["subtasks"])
    machine_ms = billing.machine_time_ms(subtasks)
    charge = billing.charge(
        receipt["price_units_hour"], machine_ms, min_charge=receipt["min_charge"], cap=lock
    )
    assert receipt["charge"] == charge
    for book in (ours, theirs):
        assert book["metered_units"] == charge
        assert (book["paid_units"], book["refunded_units"]) == (charge, lock - charge)
    # One tx: the provider's; the consumer sent none, its NTX came back in that one, and its
    # book names that tx (read from the chain: what spent the lock).
    assert ours["settle_tx"] and theirs["settle_tx"] == ours["settle_tx"]
    assert not theirs["claim_tx"]
    assert market.ntx(_address(provider)) == charge
    assert market.ntx(_address(consumer)) == before - charge
    return ours, theirs, receipt


def _subtasks(raw: Any) -> Any:
    import msgspec

    from oracle_client.billing import Subtasks

    return msgspec.convert(raw, Subtasks)


def test_a_job_that_runs_half_its_maximum_time_pays_about_half(
    market: Market, scripts: str, tmp_path: Path
) -> None:
    (tmp_path / "www" / "half.py").write_text(HALF)
    provider, consumer = _paid_pair(market)
    before = market.ntx(_address(consumer))
    job = consumer.cli(
        "job", "submit", "--url", f"{scripts}/half.py", "--framework", "scikit-learn",
        "--expected-minutes", "0.2",
    )  # fmt: skip
    job_id = job["job_id"]
    ours, _, receipt = _settled_split(market, provider, consumer, job_id, before)
    share = ours["paid_units"] / ours["amount"]
    assert HALF_SHARE[0] <= share <= HALF_SHARE[1], (share, receipt)
    # The provider's receipt spans the job's own run as its record says.
    shown = provider.cli("job", "show", job_id)
    ran_ms = (shown["finished_at"] - shown["started_at"]) * 1000
    replica = receipt["subtasks"][0]["replicas"][0]
    assert abs((replica["ended_at"] - replica["started_at"]) - ran_ms) <= 1_000


def test_a_job_cancelled_after_it_started_pays_up_to_the_cancel(
    market: Market, scripts: str
) -> None:
    import time

    provider, consumer = _paid_pair(market)
    before = market.ntx(_address(consumer))
    job_id = _submit(consumer, f"{scripts}/slow.py")["job_id"]  # a minute of ticks
    started = wait_for(
        lambda: provider.cli("job", "show", job_id).get("started_at"), "never started", 60
    )
    wait_for(lambda: time.time() - started >= 3, "the clock stood still", 10)
    cancelled_at = time.time()
    consumer.cli("job", "cancel", job_id)
    wait_for(lambda: _job_state(consumer, job_id) == "cancelled", "never cancelled", 60)
    ours, _, receipt = _settled_split(market, provider, consumer, job_id, before)
    assert receipt["outcome"] == "cancelled" and receipt["fault"] == "consumer"
    assert 0 < ours["paid_units"] < ours["amount"]
    replica = receipt["subtasks"][0]["replicas"][0]
    billed_s = (replica["ended_at"] - replica["started_at"]) / 1000
    # Up to the cancel (it reached the provider a moment later), never the whole minute.
    assert cancelled_at - started - 1 <= billed_s <= cancelled_at - started + 5, billed_s


def _job_state(daemon: Daemon, job_id: str) -> str:
    return str(daemon.cli("job", "show", job_id)["state"])
