"""Paying for what was used, on the consumer's screens: the submit form picks a spec, a
maximum time and a budget and shows the estimate and the lock live; the cancel dialog of a
running paid job says what is paid for the time so far and what is refunded.

A real embedded engine answers everything but the provider list and the job (scripted with
``FakeEngineClient``: a provider's signed advert with specs and a pool, a running paid job).
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import Input, OptionList

from engine.api import (
    EscrowInfo,
    EscrowList,
    GetJob,
    GetJobLogs,
    JobInfo,
    JobLogs,
    ListPeers,
    Peer,
    PeerList,
    PeerResources,
    Pool,
    ResourceSpec,
    RewardList,
    SetMode,
)
from engine.domain.spec import JobSpec
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.screens.job_detail import JobDetailScreen
from nunet_tui.screens.submit import SubmitScreen
from tests.pilot import FakeEngineClient, anyio_backend, on_screen, text_of, until

__all__ = ["anyio_backend"]

pytestmark = pytest.mark.anyio
PROVIDER = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW"
STRANGER = "12D3KooWRWcUSHYQhJjq4z1S8u5iEHoYwqHW6dFCzr1ww59zqu3x"
T0 = 1_750_000_000.0


def provider() -> Peer:
    specs = (
        ResourceSpec(name="cpu small", cpu_cores=2, ram_mb=4096, price_units_hour=400_000),
        ResourceSpec(
            name="cpu lab", cpu_cores=2, ram_mb=4096, price_units_hour=300_000, pool="lab"
        ),
    )
    return Peer(
        peer_id=PROVIDER,
        latency_ms=12.0,
        channel="nunet-test",
        resources=PeerResources(
            cpu_mhz=8000,
            memory_mb=16384,
            disk_mb=100_000,
            price_units={"low": 500_000, "moderate": 1_000_000, "high": 2_000_000},
            executors=("process",),
            frameworks=("pytorch", "tensorflow", "scikit-learn"),
            specs=specs,
            pools=(Pool(name="lab", members=(STRANGER,), groups=("students",)),),
        ),
        last_seen=T0,
    )


def consumer_client(engine: Engine, replies: dict[type, Any] | None = None) -> FakeEngineClient:
    engine.call_blocking(SetMode(mode="consumer"))
    return FakeEngineClient(
        {ListPeers: PeerList(channel="nunet-test", peers=(provider(),)), **(replies or {})},
        delegate=engine,
    )


def who(screen: Any) -> str:
    options = screen.query_one("#who-list", OptionList)
    return "\n".join(
        str(options.get_option_at_index(i).prompt) for i in range(options.option_count)
    )


async def test_the_form_shows_the_spec_estimate_and_lock_as_you_type(
    engine_client: Engine,
) -> None:
    app = NunetApp(client=consumer_client(engine_client))  # type: ignore[arg-type]
    async with app.run_test(size=(140, 45)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        await pilot.press("s")
        form: SubmitScreen = await on_screen(pilot, SubmitScreen)
        await until(pilot, lambda: PROVIDER[-4:] in who(form))

        def put(field: str, text: str) -> None:
            form.query_one(f"#{field}", Input).value = text

        put("script_url", "https://example.org/train.py")
        put("expected_minutes", "30")
        put("max_minutes", "60")
        await pilot.pause()
        # The tier maps to the cheapest spec this consumer may use: the pool's cheaper one
        # is someone else's, and the list says whose.
        estimate = text_of(form, "#estimate-text")
        assert "Spec cpu small on 12D3KooW…XWbW · 0.4 NTX/h" in estimate
        assert "0.2 NTX estimate (30 min) · 0.4 NTX locked (max 60 min)" in estimate
        assert "cpu lab: reserved for group" in who(form)
        assert "0.2 NTX estimate (cpu small, 0.4 NTX/h)" in who(form)

        # A budget below the lock: the provider is out, and says by how much.
        put("budget_ntx", "0.3")
        await pilot.pause()
        assert who(form).startswith("✗") and "price above budget" in who(form)
        # A 7th decimal is refused where it is typed.
        put("budget_ntx", "1.0000001")
        await pilot.pause()
        assert "more than 6 decimals" in text_of(form, "#budget_ntx-problems")
        put("budget_ntx", "1")
        put("resource_spec", "cpu lab")  # named: still reserved for the pool's members
        await pilot.pause()
        assert who(form).startswith("✗")


def running_job() -> JobInfo:
    return JobInfo(
        job_id="7f3a90c1d2e3",
        role="consumer",
        state="running",
        provider=PROVIDER,
        consumer="12D3KooWme",
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
        updated_at=T0 + 15 * 60,
        started_at=T0,
    )


def locked_escrow() -> EscrowInfo:
    return EscrowInfo(
        job_id="7f3a90c1d2e3",
        role="consumer",
        state="locked",
        amount=2_400_000,
        deadline_ms=int((T0 + 7200) * 1000),
        consumer_pkh="aa" * 28,
        provider_pkh="bb" * 28,
        oracle_key="cc" * 32,
        lock_tx="11" * 32,
    )


async def test_cancel_says_what_is_paid_and_refunded_before_you_confirm(
    engine_client: Engine,
) -> None:
    job = running_job()
    client = consumer_client(
        engine_client,
        {
            GetJob: job,
            GetJobLogs: JobLogs(job_id=job.job_id),
            RewardList: EscrowList(escrows=(locked_escrow(),)),
        },
    )
    # 15 minutes after it started, at 2.4 NTX per machine-hour.
    app = NunetApp(client=client, clock=lambda: T0 + 15 * 60)  # type: ignore[arg-type]
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        app.push_screen(JobDetailScreen(job.job_id))
        detail: JobDetailScreen = await on_screen(pilot, JobDetailScreen)
        await until(pilot, lambda: detail.escrow is not None)
        facts = text_of(detail, "#job-facts")
        assert "1.2 NTX estimate · 2.4 NTX locked · 0.6 NTX metered" in facts
        await pilot.press("x")
        confirm = await on_screen(pilot, ConfirmScreen)
        text = text_of(confirm, "#detail")
        assert "For the 15 min 00 s it ran at 2.4 NTX/h · spec cpu small" in text
        assert "0.6 NTX paid to the provider, 1.8 NTX refunded to you (of 2.4 NTX locked" in text
        await pilot.press("n")  # not cancelled: nothing was sent
        await on_screen(pilot, JobDetailScreen)
        assert not [c for c in client.calls if type(c).__name__ == "CancelJob"]
