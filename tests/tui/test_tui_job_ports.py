"""The job detail's ports (widgets/job_ports.py) against real daemons: a service job on a
provider with the process executor, the TUI attached to the consumer's daemon; ``t`` forwards
the declared port, the facts show its local URL, and HTTP through it reaches the service."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.api import JobInfo, SetMode, TunnelForward
from engine.control_client import ControlClient
from engine.domain.spec import JobSpec
from nunet_tui.app import NunetApp
from nunet_tui.screens.job_detail import JobDetailScreen
from nunet_tui.widgets import job_ports
from nunet_tui.widgets.key_table import KeyTable
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons
from tests.pilot import anyio_backend, until
from tests.tunnel_helpers import free_port, http_get, pair, service_url, submit_service

__all__ = ["anyio_backend", "daemons", "service_url"]

pytestmark = pytest.mark.anyio
PROCESS_JOBS = '[jobs]\nexecutors = ["process"]\ncheckpoint_interval_s = 0\n'


def _job(**extra: Any) -> JobInfo:
    base: dict[str, Any] = {
        "job_id": "a1b2c3d4e5f6",
        "role": "consumer",
        "state": "running",
        "provider": "p",
        "consumer": "c",
        "spec": JobSpec(framework="pytorch", ports=(8888, 7860)),
    }
    return JobInfo(**{**base, **extra})


def test_the_ports_row_names_each_port_and_its_url() -> None:
    forward = TunnelForward(
        forward_id="f",
        job_id="a1b2c3d4e5f6",
        local_port=41000,
        remote_port=8888,
        url="http://127.0.0.1:41000/",
    )
    row = job_ports.ports_row(_job(), [forward])
    assert row is not None
    assert str(row[1]) == "8888 → http://127.0.0.1:41000/ · 7860 · t to forward · e for a shell"
    assert job_ports.ports_row(_job(spec=JobSpec(framework="pytorch")), []) is None
    assert not job_ports.can_forward(_job(state="completed"))
    assert not job_ports.can_shell(_job(role="provider"))


async def test_t_forwards_the_ports_of_a_running_service(
    daemons: Callable[..., Daemon], service_url: str, tmp_path: Path
) -> None:
    _, consumer = pair(daemons, PROCESS_JOBS)
    port = free_port()
    job_id = submit_service(consumer, service_url, tmp_path, port)
    client = ControlClient(consumer.home.control_socket)
    client.call_blocking(SetMode(mode="consumer"))
    try:
        app = NunetApp(client=client)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: type(app.screen).__name__ == "ConsumerDashboard")
            await app.push_screen(JobDetailScreen(job_id))
            detail = app.screen
            assert isinstance(detail, JobDetailScreen)
            await until(pilot, lambda: detail.job is not None and detail.job.state == "running")
            assert detail.check_action("shell", ()) and detail.check_action("forward_ports", ())
            await pilot.press("t")
            await until(pilot, lambda: bool(detail.forwards))
            forward = detail.forwards[0]
            assert forward.remote_port == port
            facts = detail.query_one("#job-facts", KeyTable)
            assert forward.url in facts_text(facts)
            status, body = await asyncio.to_thread(http_get, forward.local_port)
            assert status == 200 and b"from a job" in body
    finally:
        client.close()
        run_cli("job", "cancel", job_id, home=consumer.home)


def facts_text(table: KeyTable) -> str:
    return " ".join(str(value) for _, value in table._rows)
