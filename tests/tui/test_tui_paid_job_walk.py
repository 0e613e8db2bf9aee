"""One finished paid job, walked through every screen and CLI output that shows its money:
the same figures everywhere, each saying what it is.

The job ran 15 minutes of its 60-minute maximum under the provider's ``cpu small`` spec at
2.4 NTX per machine-hour: 1.2 NTX estimate (30 min expected), 2.4 NTX locked, 0.6 NTX
metered, and the one settlement paid 0.6 NTX to the provider and refunded 1.8 NTX. The
records are scripted (``FakeEngineClient``) as the engine keeps them (engine/payments: the
escrow's metered_units, paid_units, refunded_units and settle_tx); everything else is a real
embedded engine.
"""

from __future__ import annotations

import argparse
import json

import pytest
from textual.widgets import DataTable, OptionList

from engine.api import (
    Balance,
    EscrowInfo,
    EscrowList,
    GetJob,
    GetJobLogs,
    JobInfo,
    JobList,
    JobLogs,
    ListJobs,
    Recharge,
    RechargeList,
    RewardList,
    SetMode,
    WalletBalance,
    WalletRecharges,
)
from engine.domain.spec import JobSpec
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.cli import account_output, job_output, reward_output
from nunet_tui.screens.account import AccountScreen
from nunet_tui.screens.job_detail import JobDetailScreen
from nunet_tui.screens.jobs import JobsScreen
from nunet_tui.screens.rewards import RewardsScreen
from tests.pilot import FakeEngineClient, anyio_backend, on_screen, rows, text_of, until

__all__ = ["anyio_backend"]

pytestmark = pytest.mark.anyio
T0 = 1_750_000_000.0
NOW = T0 + 3600
JOB = "b742d0b1c66f"
PROVIDER = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW"
CONSUMER = "12D3KooWRWcUSHYQhJjq4z1S8u5iEHoYwqHW6dFCzr1ww59zqu3x"
LOCK_TX = "6fee1b3d" + "0" * 52 + "b7b6"
SETTLE_TX = "91ac" + "1" * 56 + "9f00"
FAUCET_TX = "0fa0" + "2" * 56 + "ce70"
# The figures, as each screen writes them.
ESTIMATE, LOCKED, METERED, PAID, REFUNDED = "1.2", "2.4", "0.6", "0.6", "1.8"


def job(role: str) -> JobInfo:
    return JobInfo(
        job_id=JOB,
        role=role,  # type: ignore[arg-type]
        state="completed",
        provider=PROVIDER,
        consumer=CONSUMER,
        spec=JobSpec(
            script_url="https://example.org/train.py",
            framework="pytorch",
            name="cifar-10",
            expected_minutes=30,
            max_minutes=60,
        ),
        resource_spec="cpu small",
        price_units_hour=2_400_000,
        min_charge_units=10_000,
        estimate_units=1_200_000,
        lock_units=2_400_000,
        executor="process",
        created_at=T0 - 60,
        updated_at=T0 + 900,
        started_at=T0,
        finished_at=T0 + 900,
        receipt="{}",
    )


def escrow(role: str) -> EscrowInfo:
    return EscrowInfo(
        job_id=JOB,
        role=role,  # type: ignore[arg-type]
        state="paid_out" if role == "consumer" else "claimed",
        amount=2_400_000,
        deadline_ms=int((T0 + 7200) * 1000),
        consumer_pkh="aa" * 28,
        provider_pkh="bb" * 28,
        oracle_key="cc" * 32,
        lock_tx=LOCK_TX,
        claim_tx=SETTLE_TX,
        reward_type="distribute",
        outcome="completed",
        created_at=T0 - 60,
        updated_at=T0 + 960,
        metered_units=600_000,
        paid_units=600_000,
        refunded_units=1_800_000,
        settle_tx=SETTLE_TX,
    )


BALANCE = Balance(
    address="addr_test1qfake",
    network="testnet",
    backend="local",
    lovelace=10_000_000,
    ntx_units=98_400_000,
    ntx_unit="ab" * 28,
)


# The wallet's history on the chain: one faucet drop of 99 NTX before the job (its lock and
# the split coming back are escrows, never recharges: tests/daemons/test_account_recharges.py).
RECHARGES = RechargeList(
    address="addr_test1qfake",
    backend="local",
    recharges=(Recharge(tx_hash=FAUCET_TX, at=T0 - 600, amount_units=99_000_000),),
    recharged_units=99_000_000,
    scanned=3,
)


def client_for(engine: Engine, role: str) -> FakeEngineClient:
    engine.call_blocking(SetMode(mode=role))  # type: ignore[arg-type]
    return FakeEngineClient(
        {
            ListJobs: JobList(jobs=(job(role),)),
            GetJob: job(role),
            GetJobLogs: JobLogs(job_id=JOB, done=True),
            RewardList: EscrowList(escrows=(escrow(role),)),
            WalletBalance: BALANCE,
            WalletRecharges: RECHARGES,
        },
        delegate=engine,
    )


async def test_the_consumer_sees_the_same_figures_on_every_screen_and_in_the_cli(
    engine_client: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    client = client_for(engine_client, "consumer")
    app = NunetApp(client=client, clock=lambda: NOW)  # type: ignore[arg-type]
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        # The dashboard's recent jobs and the Jobs list: what its machine time cost.
        await until(pilot, lambda: f"{METERED} NTX metered" in text_of(app.screen, "#recent-jobs"))
        await pilot.press("j")
        jobs: JobsScreen = await on_screen(pilot, JobsScreen)
        table = jobs.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 1)
        assert f"{PAID} paid" in rows(table)[0]  # settled: what was paid

        # The job's detail: every figure, each named.
        await pilot.press("enter")
        detail: JobDetailScreen = await on_screen(pilot, JobDetailScreen)
        await until(pilot, lambda: detail.escrow is not None)
        facts = text_of(detail, "#job-facts")
        assert (
            f"{ESTIMATE} NTX estimate · {LOCKED} NTX locked · {METERED} NTX metered · "
            f"{PAID} NTX paid · {REFUNDED} NTX refunded · machine time 15 min 00 s"
        ) in facts
        assert "2.4 NTX/h · spec cpu small" in facts and "settle 91ac1111…9f00" in facts
        await pilot.press("escape", "escape")

        # Rewards (consumer view): what went out and what came back.
        await pilot.press("R")
        rewards: RewardsScreen = await on_screen(pilot, RewardsScreen)
        await until(pilot, lambda: rewards.loaded)
        assert f"{PAID} NTX paid   {REFUNDED} NTX refunded" in text_of(rewards, "#totals")
        done = rows(rewards.query_one("#done-table", DataTable))[0]
        assert f"\u2212{PAID}" in done and REFUNDED in done and "91ac1111…9f00" in done
        await pilot.press("escape")

        # The account: the balance, the recharges it implies, the job's consumption.
        await pilot.press("a")
        account: AccountScreen = await on_screen(pilot, AccountScreen)
        await until(pilot, lambda: account.account is not None)
        summary = text_of(account, "#account-summary")
        assert "98.4 NTX balance   99 NTX recharged in all · 1 transfer" in summary
        assert "+99 NTX recharge · 0fa02222…ce70 · 1 h ago · from the faucet" in summary
        assert f"{PAID} NTX paid   {REFUNDED} NTX refunded   0 NTX locked still" in summary
        row = rows(account.query_one("#jobs-table", DataTable))[0]
        for cell in ("cpu small", "15 min 00 s", LOCKED, METERED, PAID, REFUNDED):
            assert cell in row
        detail_text = text_of(account, "#detail")
        assert SETTLE_TX in detail_text and LOCK_TX in detail_text

    # The CLI: account (text and --json), job show, reward list.
    text = account_output.to_text(account_output.read_account(client))  # type: ignore[arg-type]
    assert f"{LOCKED} NTX locked · {METERED} NTX metered · {PAID} NTX paid · " in text
    assert f"{REFUNDED} NTX refunded" in text and "machine time 15 min 00 s" in text
    data = account_output.read_account(client).to_json()  # type: ignore[arg-type]
    (row_json,) = data["consumption"]  # type: ignore[misc]
    assert (
        row_json["locked_units"],
        row_json["metered_units"],
        row_json["paid_units"],
        row_json["refunded_units"],
        row_json["settle_tx"],
        row_json["spec"],
    ) == (2_400_000, 600_000, 600_000, 1_800_000, SETTLE_TX, "cpu small")
    assert data["recharged_units"] == 99_000_000 and data["recharges_read"] is True
    assert data["recharges"] == [
        {
            "tx_hash": FAUCET_TX,
            "at": T0 - 600,
            "amount_units": 99_000_000,
            "kind": "recharge",
            "from_addresses": [],
        }
    ]
    json.dumps(data)  # what --json prints
    assert f"{FAUCET_TX}  99 NTX recharge  from the faucet (no inputs)" in text
    # job show, text and --json: the escrow's figures, the same records account reads.
    capsys.readouterr()
    job_output._show(argparse.Namespace(job_id=JOB, json=False), client)  # type: ignore[arg-type]
    shown = capsys.readouterr().out
    assert (
        f"{ESTIMATE} NTX estimate · {LOCKED} NTX locked · {METERED} NTX metered · "
        f"{PAID} NTX paid · {REFUNDED} NTX refunded · machine time 15 min 00 s"
    ) in shown
    assert f"escrow    paid_out · lock tx {LOCK_TX} · settle tx {SETTLE_TX}" in shown
    job_output._show(argparse.Namespace(job_id=JOB, json=True), client)  # type: ignore[arg-type]
    shown_json = json.loads(capsys.readouterr().out)
    assert shown_json["job_id"] == JOB and shown_json["state"] == "completed"  # the JobInfo
    assert shown_json["money"] == {
        "estimate_units": 1_200_000,
        "locked_units": row_json["locked_units"],
        "metered_units": row_json["metered_units"],
        "paid_units": row_json["paid_units"],
        "refunded_units": row_json["refunded_units"],
        "machine_ms": row_json["machine_ms"],
        "escrow_state": "paid_out",
        "lock_tx": row_json["lock_tx"],
        "settle_tx": row_json["settle_tx"],
    }
    capsys.readouterr()
    reward_output._list(argparse.Namespace(), client)  # type: ignore[arg-type]
    listed = capsys.readouterr().out
    assert f"{LOCKED} NTX locked, {PAID} NTX paid, {REFUNDED} NTX refunded" in listed


async def test_the_provider_sees_the_same_figures_per_job_and_per_spec_per_day(
    engine_client: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    client = client_for(engine_client, "provider")
    app = NunetApp(client=client, clock=lambda: NOW)  # type: ignore[arg-type]
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ProviderDashboard")
        # The dashboard's recent jobs: what the job earned this machine.
        recent = app.screen.query_one("#recent-list", OptionList)

        def earned_row() -> str:
            return str(recent.get_option_at_index(0).prompt) if recent.option_count else ""

        await until(pilot, lambda: JOB[:6] in earned_row())
        assert earned_row().rstrip().endswith(METERED)
        panel = app.screen.query_one("#recent-runs")
        assert f"today cpu small {METERED} NTX metered" in str(panel.border_subtitle)
        await pilot.press("dollar_sign")
        rewards: RewardsScreen = await on_screen(pilot, RewardsScreen)
        await until(pilot, lambda: rewards.loaded and rewards.jobs)
        assert f"{PAID} NTX paid to you" in text_of(rewards, "#totals")
        assert f"cpu small  1 job · 15 min 00 s · {PAID} NTX paid" in text_of(rewards, "#per-spec")
        assert f"+{PAID}" in rows(rewards.query_one("#done-table", DataTable))[0]

    capsys.readouterr()
    reward_output._list(argparse.Namespace(), client)  # type: ignore[arg-type]
    listed = capsys.readouterr().out
    assert f"{PAID} NTX paid" in listed
    assert f"2025-06-15  cpu small  1 job(s)  15 min 00 s  {PAID} NTX paid" in listed
    data = account_output.read_account(client).to_json()  # type: ignore[arg-type]
    assert data["per_spec_day"] == [
        {
            "day": "2025-06-15",
            "spec": "cpu small",
            "jobs": 1,
            "machine_ms": 900_000,
            "paid_units": 600_000,
        }
    ]
