"""Live usage end to end (issue 22 §3): a consumer daemon following a real job that burns CPU
and holds memory on a real provider daemon (process executor) gets the provider's signed
samples: `job show --json` has the latest, GetJobUsage the history, on both sides."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import api
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import PROCESS_JOBS, _pair, _submit
from tests.http_files import serve_files

__all__ = ["daemons"]

BURN = """
import time
block = bytearray(120 << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
print("allocated", flush=True)
end = time.time() + 120
while time.time() < end:
    sum(range(10000))
"""


@pytest.fixture
def burn_url(tmp_path: Path) -> Iterator[str]:
    with serve_files(tmp_path / "www", {"burn.py": BURN}) as base:
        yield f"{base}/burn.py"


def _busy(usage: dict[str, Any] | None) -> bool:
    return usage is not None and usage["cpu_cores"] >= 0.2 and usage["ram_mb"] >= 80


def test_the_consumer_sees_the_provider_s_live_samples(
    daemons: Callable[..., Daemon], burn_url: str
) -> None:
    provider, consumer = _pair(daemons, jobs_toml=PROCESS_JOBS + "usage_interval_s = 1\n")
    job_id = _submit(consumer, burn_url, name="burn")["job_id"]
    wait_for(
        lambda: _busy(consumer.cli("job", "show", job_id).get("usage")),
        "the consumer never got a busy sample",
        60,
    )
    shown = consumer.cli("job", "show", job_id)["usage"]
    assert shown["ram_limit_mb"] > 0 and shown["gpus"] == 0 and shown["gpu_percent"] is None
    history: api.JobUsage = consumer.call(api.GetJobUsage(job_id=job_id))
    assert history.samples and api.to_builtins(history.samples[-1]) == shown
    assert [s.at for s in history.samples] == sorted({s.at for s in history.samples})
    # The provider's own view of the job it runs: the same figures, from its ring.
    assert _busy(provider.cli("job", "show", job_id).get("usage"))
    theirs: api.JobUsage = provider.call(api.GetJobUsage(job_id=job_id))
    assert theirs.interval_s == 1.0 and theirs.samples
    consumer.cli("job", "cancel", job_id)
