"""Finished jobs' workspaces are removed after the provider's retention time, against real
provider and consumer daemons (process executor), the retention set short (1.8 s).

Before the fix a finished job's workspace and checkpoints stayed on the provider for ever,
whatever they held (up to the cap on files per job each): a provider that ran jobs for
months ran out of disk or inodes. Now its sweep removes them; a running job's workspace is
never touched, and the finished job's results archive and log stay, so its results can still
be fetched and its log read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.adversarial.test_fetch import Consumer, _script
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import _pair
from tests.http_files import serve_files

__all__ = ["daemons"]

KEEP = {"NUNET_JOBS_WORKSPACE_KEEP_HOURS": "0.0005"}  # 1.8 s; swept every second
LONG = "import time\nprint('long job up', flush=True)\ntime.sleep(600)\n"
SHORT = """\
import os
os.makedirs("outputs", exist_ok=True)
os.makedirs("scratch", exist_ok=True)
for number in range(500):
    open(f"scratch/f{number}", "w").close()
with open("outputs/result.txt", "w") as handle:
    handle.write("the result")
print("short job done")
"""


def _folder(provider: Daemon, job_id: str) -> Path:
    return provider.home.state_dir / "jobs" / job_id


@pytest.mark.timeout(240)
def test_finished_workspaces_go_after_the_retention_and_running_ones_stay(
    daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    provider, consumer = _pair(daemons, slots=2, env=KEEP)
    client = Consumer(consumer, provider)
    try:
        with serve_files(tmp_path / "www", {"long.py": LONG, "short.py": SHORT}) as base:
            long_id = client.submit(_script(f"{base}/long.py"))
            assert isinstance(long_id, str), long_id
            wait_for(
                lambda: provider.cli("job", "show", long_id)["state"] == "running",
                "the long job never ran",
                60,
            )
            ended = client.run(_script(f"{base}/short.py"))
        assert isinstance(ended, tuple), ended
        short, logs = ended
        assert short.state == "completed" and "short job done" in logs, ended
        short_folder = _folder(provider, short.job_id)
        wait_for(
            lambda: not (short_folder / "workspace").exists(),
            "the finished job's workspace was never removed",
            60,
        )
        assert not (short_folder / "checkpoints").exists()
        # The sweep that removed it ran while the long job ran: its workspace is untouched.
        assert provider.cli("job", "show", long_id)["state"] == "running"
        assert (_folder(provider, long_id) / "workspace" / "long.py").exists()
        # The finished job's results and log stay on the provider: still fetchable, readable.
        shown = provider.cli("job", "show", short.job_id)
        assert shown["results_dir"] and Path(shown["results_dir"]).exists()
        assert (short_folder / "log.jsonl").exists()
        out = consumer.cli("job", "results", short.job_id, "-o", str(tmp_path / "out"))
        assert (Path(out["directory"]) / "outputs" / "result.txt").read_text() == "the result"
        log = provider.home.log_file.read_text(errors="replace")
        assert "removed the workspaces of 1 finished jobs" in log
        assert "(jobs.workspace_keep_hours)" in log
        consumer.cli("job", "cancel", long_id)
    finally:
        client.close()
