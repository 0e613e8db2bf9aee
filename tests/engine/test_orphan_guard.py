"""orphan_guard.py's group role: a process-executor job's group leader passes the job's
status and the provider's signals through unchanged, and ends the whole group when the
provider dies. (Its containers role: test_provider_shutdown.py, with a real Docker engine.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from engine.jobs.executors.base import ORPHAN_GUARD, provider_lifeline

# This test process is the provider: the leaders get its lifeline.
LIFELINE = provider_lifeline()
LEADER = [sys.executable, "-I", str(ORPHAN_GUARD), "group", str(os.getpid()), str(LIFELINE)]


def _lead(code: str, **kwargs: object) -> subprocess.Popen[bytes]:
    argv = [*LEADER, sys.executable, "-c"]
    return subprocess.Popen(  # type: ignore[call-overload]
        [*argv, code], start_new_session=True, pass_fds=(LIFELINE,), **kwargs
    )


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("pass", 0),
        ("raise SystemExit(3)", 3),
        ("import os, signal; os.kill(os.getpid(), signal.SIGXCPU)", -signal.SIGXCPU),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
    ],
    ids=["ok", "exit-3", "sigxcpu", "sigkill"],
)
def test_the_job_status_is_the_leaders(code: str, status: int) -> None:
    assert _lead(code).wait(20) == status


def test_the_providers_sigterm_reaches_the_job_which_may_finish_its_work(tmp_path: Path) -> None:
    done = tmp_path / "saved"
    code = (
        "import signal, sys, time, pathlib\n"
        "def save(*_):\n"
        f"    pathlib.Path({str(done)!r}).write_text('checkpoint'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, save)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    leader = _lead(code, stdout=subprocess.PIPE)
    assert leader.stdout is not None and leader.stdout.readline() == b"ready\n"
    os.killpg(leader.pid, signal.SIGTERM)  # as ProcessExecutor._stop_run does
    assert leader.wait(20) == 0
    assert done.read_text() == "checkpoint"


def test_a_command_that_cannot_run_exits_127() -> None:
    result = subprocess.run(
        [*LEADER, "/nonexistent/python"],
        capture_output=True,
        text=True,
        timeout=20,
        pass_fds=(LIFELINE,),
    )
    assert result.returncode == 127 and "cannot run /nonexistent/python" in result.stderr


def test_the_group_ends_when_the_provider_is_killed(tmp_path: Path) -> None:
    # A stand-in provider starts the leader (whose job starts a child) and is SIGKILLed.
    pids = tmp_path / "pids"
    job = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{c.pid}}\\n')\n"
        "time.sleep(60)\n"
    )
    provider_code = (
        "import os, subprocess, sys, time\n"
        "life, line = os.pipe()\n"
        f"argv = [sys.executable, '-I', {str(ORPHAN_GUARD)!r}, 'group', str(os.getpid()),"
        " str(life), sys.executable, '-c', sys.argv[1]]\n"
        "p = subprocess.Popen(argv, start_new_session=True, pass_fds=(life,))\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    provider = subprocess.Popen(
        [sys.executable, "-c", provider_code, job], stdout=subprocess.PIPE, text=True
    )
    assert provider.stdout is not None
    leader = int(provider.stdout.readline())
    deadline = time.monotonic() + 20
    while not (pids.exists() and pids.read_text().endswith("\n")):
        assert time.monotonic() < deadline, "the job never started its child"
        time.sleep(0.05)
    grandchild = int(pids.read_text())
    provider.kill()
    provider.wait(10)
    deadline = time.monotonic() + 10
    while alive := [pid for pid in (leader, grandchild) if _running(pid)]:
        assert time.monotonic() < deadline, f"still running: {alive}"
        time.sleep(0.05)


def test_the_job_outlives_the_thread_that_started_it(tmp_path: Path) -> None:
    """The regression of issue 20: PR_SET_PDEATHSIG fired when the *thread* that started the
    leader exited (trio's worker threads end after 10 idle seconds), and killed every
    process job then. The lifeline is the provider process's: a job started from a thread
    that has ended runs to its end, with its own status."""
    done, running = tmp_path / "done", tmp_path / "running"
    code = (
        f"import time, pathlib; pathlib.Path({str(running)!r}).write_text('yes'); "
        f"time.sleep(1.5); pathlib.Path({str(done)!r}).write_text('ok')"
    )
    started: list[subprocess.Popen[bytes]] = []

    def start_then_end() -> None:
        started.append(_lead(code))
        deadline = time.monotonic() + 20
        while not running.exists():  # the guard is set up: the job runs
            assert time.monotonic() < deadline
            time.sleep(0.02)

    starter = threading.Thread(target=start_then_end)
    starter.start()
    starter.join()  # the thread that started the leader is gone (the old guard: -SIGKILL)
    assert started[0].wait(20) == 0
    assert done.read_text() == "ok"


def test_a_guard_whose_provider_is_already_gone_ends_its_group() -> None:
    """A lifeline that is closed already (the provider died while the guard started)."""
    read_end, write_end = os.pipe()
    os.close(write_end)
    argv = [*LEADER[:-1], str(read_end), sys.executable, "-c", "import time; time.sleep(60)"]
    leader = subprocess.Popen(argv, start_new_session=True, pass_fds=(read_end,))
    os.close(read_end)
    assert leader.wait(20) == -signal.SIGKILL


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # gone, if not reaped yet
    except psutil.NoSuchProcess:
        return False
