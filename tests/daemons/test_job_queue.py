"""The consumer's queue (issue 27 §1) with real daemons: with the only provider busy, a
submit waits in the queue (saying for what), survives a consumer restart, and runs once the
provider frees its slot; a queued job can be cancelled; --no-queue fails at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.conftest import TEST_ADDRESS, run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.daemons.test_jobs_e2e import PROCESS_JOBS, SLOW, _state
from tests.http_files import serve_files

QUICK = 'print("quick job ran", flush=True)\n'


def _submit(consumer: Daemon, url: str, *extra: str) -> dict[str, object]:
    args = ("job", "submit", "--url", url, "--framework", "scikit-learn")
    return dict(consumer.cli(*args, "--expected-minutes", "1", *extra))


def test_a_job_waits_for_a_busy_provider_across_a_restart(
    daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    # The consumer restarts (on a new port): both reach each other through a bootstrap node.
    boot = daemons("boot", 34)
    consumer = daemons("consumer", 35, bootstrap=boot.addrs()[0])
    provider = daemons(
        "provider", 36, bootstrap=boot.addrs()[0], extra_toml=PROCESS_JOBS + "slots = 1\n"
    )
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    wait_for(lambda: consumer.listed(provider.peer_id), "the consumer never saw the provider")
    with serve_files(tmp_path / "www", {"slow.py": SLOW, "quick.py": QUICK}) as base:
        busy = str(_submit(consumer, f"{base}/slow.py")["job_id"])
        wait_for(lambda: _state(consumer, busy) == "running", "the first job never ran", 60)
        # No slot free: refused at once with --no-queue ...
        refused = run_cli(
            "job", "submit", "--url", f"{base}/quick.py", "--framework", "scikit-learn",
            "--no-queue", home=consumer.home,
        )  # fmt: skip
        assert refused.returncode == 1 and "no matching peer" in refused.stderr
        # ... and queued without it, saying what it waits for.
        queued = _submit(consumer, f"{base}/quick.py")
        job_id = str(queued["job_id"])
        assert queued["state"] == "queued", queued
        assert "1st in line" in str(queued["reason"]), queued["reason"]
        other = str(_submit(consumer, f"{base}/quick.py")["job_id"])
        assert "2nd in line" in str(consumer.cli("job", "show", other)["reason"])
        assert consumer.cli("job", "cancel", other)["state"] == "cancelled"
        # Kept across a restart of the consumer: still queued, and nothing was locked.
        consumer.stop()
        consumer.start()
        assert _state(consumer, job_id) == "queued"
        wait_for(
            lambda: run_cli("job", "cancel", busy, home=consumer.home).returncode == 0,
            "the busy job was never cancelled after the restart",
            60,
        )
        wait_for(
            lambda: _state(consumer, job_id) == "completed",
            "the queued job never ran once the provider was free",
            90,
        )
    logs = run_cli("job", "logs", job_id, home=consumer.home).stdout
    assert "quick job ran" in logs
    assert consumer.cli("job", "show", job_id)["provider"] == provider.peer_id


__all__ = ["daemons"]  # the fixture, imported for pytest


def test_a_providers_record_with_us_is_listed_and_can_be_required(
    daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    """Issue 27 §2: after a job it completed, `peer list` shows the provider's record with
    this node; --min-score passes over a provider whose record is short of it."""
    consumer = daemons("consumer", 37)
    provider = daemons(
        "provider", 38, bootstrap=consumer.addrs()[0], extra_toml=PROCESS_JOBS + "slots = 1\n"
    )
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    wait_for(lambda: consumer.listed(provider.peer_id), "the consumer never saw the provider")
    assert consumer.listed(provider.peer_id)["reputation"] is None  # no history with us
    with serve_files(tmp_path / "www", {"quick.py": QUICK}) as base:
        done = str(_submit(consumer, f"{base}/quick.py")["job_id"])
        wait_for(lambda: _state(consumer, done) == "completed", "the job never completed", 60)
        record = consumer.listed(provider.peer_id)["reputation"]
        assert record["completed"] == 1 and record["provider_faults"] == 0
        assert abs(record["score"] - 2 / 3) < 1e-9
        listed = run_cli("peer", "list", home=consumer.home).stdout
        assert "record with us: 0.67 (1 completed of 1 jobs)" in listed
        picky = run_cli(
            "job", "submit", "--url", f"{base}/quick.py", "--framework", "scikit-learn",
            "--min-score", "0.9", "--no-queue", home=consumer.home,
        )  # fmt: skip
        assert picky.returncode == 1
        assert "its score 0.67 (1 completed of 1 jobs) is under --min-score 0.9" in picky.stderr
        fine = _submit(consumer, f"{base}/quick.py", "--min-score", "0.6")
        assert fine["provider"] == provider.peer_id
