"""A provider that stops takes its jobs with it: nothing a consumer started on this machine
outlives the daemon (real daemons, the process executor, a service job that never ends)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.daemons import Daemon, daemons, wait_for
from tests.tunnel_helpers import free_port, http_get, pair, service_url, submit_service

__all__ = ["daemons", "service_url"]

PROCESS_JOBS = '[jobs]\nexecutors = ["process"]\ncheckpoint_interval_s = 0\n'


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("how", ["sigterm", "sigint"])
def test_a_stopped_provider_leaves_no_job_process_behind(
    daemons: Callable[..., Daemon], service_url: str, tmp_path: Path, how: str
) -> None:
    provider, consumer = pair(daemons, PROCESS_JOBS)
    port = free_port()
    job_id = submit_service(consumer, service_url, tmp_path, port)
    pid_file = next((provider.home.state_dir / "jobs").rglob("process.pid"))
    assert job_id in str(pid_file)
    pgid = int(pid_file.read_text())  # the job's own process group (start_new_session)
    assert _alive(pgid)
    assert http_get(port)[0] == 200  # serving, on the provider's loopback
    assert provider.proc is not None
    provider.proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
    assert provider.proc.wait(30) is not None
    wait_for(lambda: not _alive(pgid), f"job group {pgid} outlived its provider", timeout=10)
    with pytest.raises(OSError):
        http_get(port, timeout=2)
