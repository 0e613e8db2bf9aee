""" "Refund now" in the job view (issue 22 §1): a job whose provider vanished has its lock
asked back on this node's word; until the oracle can decide, the view says when and why
and F is not offered; once it can, F is in the footer and asks at once.

A real embedded engine answers everything but the job, its escrow and the refund (scripted
with ``FakeEngineClient``); the app's clock is the test's."""

from __future__ import annotations

import msgspec
import pytest

from engine.api import (
    EscrowInfo,
    EscrowList,
    GetJob,
    GetJobLogs,
    JobInfo,
    JobLogs,
    RewardList,
    RewardRefund,
)
from engine.domain.spec import JobSpec
from engine.facade import Engine
from nunet_tui.app import NunetApp
from nunet_tui.screens.job_detail import JobDetailScreen
from tests.pilot import anyio_backend, on_screen, text_of, until
from tests.tui.test_tui_billing import PROVIDER, T0, consumer_client, locked_escrow

__all__ = ["anyio_backend"]

pytestmark = pytest.mark.anyio
ORACLE_SAYS = (
    "job 7f3a90c1d2e3: its provider said it was running the job 60 s ago; it counts as "
    "vanished only after 100 s of silence"
)


def vanished_job() -> JobInfo:
    return JobInfo(
        job_id="7f3a90c1d2e3",
        role="consumer",
        state="interrupted",
        provider=PROVIDER,
        consumer="12D3KooWme",
        spec=JobSpec(script_url="https://example.org/train.py", framework="pytorch"),
        reason="provider unreachable for 9 s: the job ended interrupted; its escrow's refund "
        "is asked for",
        price_units_hour=2_400_000,
        lock_units=2_400_000,
        created_at=T0 - 120,
        started_at=T0 - 100,
        finished_at=T0 - 5,
        updated_at=T0 - 5,
    )


def pending() -> EscrowInfo:
    return msgspec.structs.replace(
        locked_escrow(),
        state="receipt",
        outcome="interrupted",
        refund_alone="provider_vanished",
        error=ORACLE_SAYS,
        decidable_at=T0 + 40,
    )


def enabled(screen: JobDetailScreen) -> set[str]:
    return {
        b.binding.action
        for b in screen.active_bindings.values()
        if b.enabled and b.binding.show and b.node is screen
    }


async def test_refund_now_is_offered_once_the_oracle_can_decide(engine_client: Engine) -> None:
    job = vanished_job()
    refunded = msgspec.structs.replace(
        pending(), state="refunded", error="", paid_units=0, refunded_units=2_400_000
    )
    client = consumer_client(
        engine_client,
        {
            GetJob: job,
            GetJobLogs: JobLogs(job_id=job.job_id),
            RewardList: EscrowList(escrows=(pending(),)),
            RewardRefund: refunded,
        },
    )
    now = [T0]
    app = NunetApp(client=client, clock=lambda: now[0])  # type: ignore[arg-type]
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
        app.push_screen(JobDetailScreen(job.job_id))
        detail: JobDetailScreen = await on_screen(pilot, JobDetailScreen)
        await until(pilot, lambda: detail.escrow is not None)
        facts = text_of(detail, "#job-facts")
        assert "its provider vanished mid-job; the oracle can decide in about 40 s" in facts
        assert "counts as vanished only after 100 s" in facts
        assert "● refund asked" in facts  # not "decided": the oracle has not, yet
        assert "refund_now" not in enabled(detail)
        await pilot.press("F")  # not offered: nothing is asked
        await pilot.pause()
        assert not [c for c in client.calls if isinstance(c, RewardRefund)]

        now[0] = T0 + 41  # the oracle's grace is over: the view offers it (its 1 s tick)
        await until(pilot, lambda: "F refunds it now" in text_of(detail, "#job-facts"))
        assert "refund_now" in enabled(detail)
        await pilot.press("F")
        await until(pilot, lambda: detail.escrow is not None and detail.escrow.state == "refunded")
        assert [c.job_id for c in client.calls if isinstance(c, RewardRefund)] == [job.job_id]
        await until(
            pilot, lambda: any("2.4 NTX refunded" in str(n.message) for n in app._notifications)
        )
        assert "refund_now" not in enabled(detail)
