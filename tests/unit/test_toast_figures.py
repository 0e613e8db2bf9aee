"""A toast's NTX figures are the job view's figures (issue 22 §3): every amount in a notice
comes from integer base units through the one formatter (oracle_client/ntx.py), never a
float printed with ``:g`` or ``.3f`` (``1.23457 NTX`` for a lock of 1,234,567 base units,
a few millionths off the ``1.234567 NTX locked`` the job view shows)."""

from __future__ import annotations

import re
from typing import Any

from engine import api
from engine.domain.admission import Needs, judge, quote_units
from engine.domain.spec import JobSpec
from engine.jobs import protocol as p
from engine.jobs.consumer_base import quoted_units
from engine.notices import NoticeFilter
from nunet_tui.screens.job_detail import _facts
from oracle_client.ntx import format_ntx

PRICE = 1_234_567  # base units per machine-hour: a lock for 60 min of exactly that
AMOUNT = re.compile(r"\d[\d,]*(?:\.\d+)? NTX(?:/h)?")
SPEC = api.ResourceSpec(name="odd", cpu_cores=1, ram_mb=1024, price_units_hour=PRICE)


def _spec(**fields: Any) -> JobSpec:
    values: dict[str, Any] = {
        "framework": "pytorch",
        "script_url": "https://h/x.py",
        "expected_minutes": 30,
        "max_minutes": 60,
        "budget_ntx": 1.2,
    }
    values.update(fields)
    return JobSpec(**values)


def _refused(reason: str, spec: JobSpec) -> api.JobInfo:
    estimate, lock = quote_units(SPEC, spec)
    return api.JobInfo(
        job_id="0123456789ab",
        role="consumer",
        state="refused",
        provider="12D3KooWprovider",
        consumer="12D3KooWconsumer",
        spec=spec,
        reason=reason,
        resource_spec=SPEC.name,
        price_units_hour=PRICE,
        estimate_units=estimate,
        lock_units=lock,
        created_at=1_000.0,
        finished_at=1_001.0,
        updated_at=1_001.0,
    )


def _amounts(text: str) -> set[str]:
    return set(AMOUNT.findall(text))


def _job_view_text(job: api.JobInfo) -> str:
    return "\n".join(f"{key} {value}" for key, value in _facts(job))


def test_a_refused_jobs_toast_says_the_lock_the_job_view_shows() -> None:
    spec = _spec()
    assert quote_units(SPEC, spec)[1] == PRICE  # 1.234567 NTX locked
    # The consumer's own check of a quote above the budget: the job ends refused with it.
    quote = p.Quote(
        job_id="0123456789ab",
        provider="12D3KooWprovider",
        price_ntx_hour=PRICE / 1e6,
        total_ntx=PRICE / 1e6,
        expires_at=0.0,
        executor="docker",
        spec_name=SPEC.name,
        price_units_hour=PRICE,
        estimate_units=quote_units(SPEC, spec)[0],
        lock_units=PRICE,
    )
    why = quoted_units(quote, spec)[2]
    # ...and the provider's (its admission), which reaches the consumer as a refusal.
    resources = api.PeerResources(
        cpu_mhz=8000, memory_mb=16384, executors=("docker",), frameworks=("pytorch",),
        specs=(SPEC,),
    )  # fmt: skip
    refusal = judge(Needs.of(spec), resources).reason
    for reason in (why, refusal):
        job = _refused(reason, spec)
        notice = NoticeFilter(since=0).observe(api.JobChanged(at=1_001.0, job=job))
        assert notice is not None
        shown = _job_view_text(job)
        assert format_ntx(PRICE, "locked") in shown
        assert "1.234567 NTX" in notice.text, notice.text
        for figure in _amounts(notice.text):
            assert figure in shown or figure == "1.2 NTX", (figure, notice.text)
