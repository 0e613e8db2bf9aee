"""Bad input from the user, through the real command line and daemon: one clear line naming
the field and what is allowed, exit code non-zero, no traceback, and saved state untouched.

Each case was a traceback or silently accepted before: a heartbeat of 0 (the daemon divided
by it), negative, NaN or infinite prices and intervals, a NaN budget (it removed the cap), a
10 MB job name, deeply nested TOML (RecursionError), ``--home`` on a file, a chat id too large
for SQLite, ``NUNET_*`` overrides of constrained numbers, and ``job results -o RELATIVE``
(resolved against the daemon's working directory).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.config import Paths
from tests.conftest import REPO, TEST_ADDRESS, make_home, run_cli
from tests.daemon_harness import Daemon, wait_for

TERMINAL = ("completed", "failed", "oom", "timeout", "cancelled", "interrupted", "refused")
DEEP_TOML = "x = " + "[" * 5000 + "]" * 5000 + "\n"
BAD_CONFIGS = [
    ("[network]\nheartbeat_interval_s = 0\n", {}, "network.heartbeat_interval_s = 0"),
    ("[network]\nheartbeat_interval_s = -1.5\n", {}, "network.heartbeat_interval_s = -1.5"),
    ("[jobs]\nprices = {low = -1.0}\n", {}, "jobs.prices"),
    ("[jobs]\nprices = {low = nan}\n", {}, "jobs.prices.low = nan"),
    ("[jobs]\nprices = {moderate = inf}\n", {}, "jobs.prices.moderate = inf"),
    ("[jobs]\ncheckpoint_interval_s = -60\n", {}, "jobs.checkpoint_interval_s = -60"),
    ("[jobs]\nslots = 99999999999999999999\n", {}, "jobs.slots"),
    ("[machine]\ncpu_cores = -2\n", {}, "machine.cpu_cores = -2"),
    (DEEP_TOML, {}, "nested too deeply"),
    ("", {"NUNET_PAYMENTS_DEADLINE_MARGIN_S": "5"}, "payments.deadline_margin_s = 5"),
    ("", {"NUNET_NETWORK_HEARTBEAT_INTERVAL_S": "nan"}, "NUNET_NETWORK_HEARTBEAT_INTERVAL_S"),
    ("", {"NUNET_JOBS_SLOTS": "many"}, "jobs.slots = 'many' (from NUNET_JOBS_SLOTS)"),
]


def _files(root: Path) -> dict[str, str]:
    """Every file under ``root`` by its sha256: what "state untouched" compares."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _one_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    line = result.stderr.strip()
    assert line and "\n" not in line, line
    for needle in needles:
        assert needle in line, line
    return line


def _cli_in(cwd: Path, *args: str, home: Paths) -> subprocess.CompletedProcess[str]:
    """The CLI run from ``cwd`` (run_cli always runs from the repository)."""
    argv = [sys.executable, "-m", "nunet_tui", "--home", str(home.home), *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


@pytest.fixture
def victim(daemons: Callable[..., Daemon]) -> Daemon:
    """A healthy daemon: after every bad input it must still answer."""
    return daemons("victim", 41)


def test_a_bad_setting_stops_the_daemon_in_one_line_and_touches_nothing(
    tmp_path: Path, victim: Daemon
) -> None:
    for number, (toml, env, needle) in enumerate(BAD_CONFIGS):
        home = make_home(tmp_path / f"broken-{number}", machine_toml=toml)
        before = _files(Path(str(home.home)))
        started = run_cli("daemon", home=home, env=env, timeout=60)
        line = _one_line(started, needle)
        assert " must be " in line or "nested" in line, line  # and says what is allowed
        command = run_cli("info", home=home, env=env)
        assert _one_line(command, needle) == line  # the same line, whoever reads settings
        assert _files(Path(str(home.home))) == before, toml
    assert victim.cli("peer", "self")["peer_id"]


def test_constrained_numbers_can_be_overridden_from_the_environment(victim: Daemon) -> None:
    """NUNET_PAYMENTS_DEADLINE_MARGIN_S=120 was refused as "expected int, got str"."""
    env = {"NUNET_PAYMENTS_DEADLINE_MARGIN_S": "120", "NUNET_MACHINE_CPU_CORES": "2"}
    result = run_cli("peer", "self", "--json", home=victim.home, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["peer_id"] == victim.peer_id


@pytest.mark.parametrize("kind", ["file", "below a file", "in /proc"])
def test_a_home_that_is_not_a_folder_is_one_line(tmp_path: Path, victim: Daemon, kind: str) -> None:
    plain = tmp_path / "notes.txt"
    plain.write_text("mine\n")
    home = {"file": plain, "below a file": plain / "home", "in /proc": Path("/proc/nunet")}[kind]
    for args in (("peer", "self"), ("daemon",), ("wallet", "show")):
        result = run_cli("--home", str(home), *args)
        if kind == "file":
            _one_line(result, "give --home (or NUNET_HOME) a folder you can write")
        else:  # nothing there: only the commands that make a node try to (issue 22)
            _one_line(result, f"there is no node at {home} (a mistyped --home?)")
    if kind != "file":  # one that would make it says why it cannot
        result = run_cli("--home", str(home), "daemon", "--init")
        _one_line(result, "give --home (or NUNET_HOME) a folder you can write")
    assert plain.read_text() == "mine\n"
    assert victim.cli("peer", "self")["peer_id"]


def test_bad_job_specs_name_the_field(tmp_path: Path, victim: Daemon) -> None:
    before = _files(Path(str(victim.home.config_dir)))
    jobs_before = victim.cli("job", "list")["jobs"]
    huge = tmp_path / "huge.toml"
    huge.write_text(
        'framework = "pytorch"\nscript_url = "http://127.0.0.1:9/t.py"\n'
        f'name = "{"n" * (10 << 20)}"\n'
    )
    deep = tmp_path / "deep.toml"
    deep.write_text('framework = "pytorch"\n' + DEEP_TOML)
    url = ("--url", "http://127.0.0.1:9/t.py", "--framework", "pytorch")
    cases = [
        (("-f", str(huge)), "name is 10,485,760 characters long: at most 200"),
        (("-f", str(deep)), "nested too deeply"),
        ((*url, "--name", "x" * 100_000), "name is 100,000 characters long"),
        ((*url, "--budget", "nan"), "budget_ntx must be a number above 0"),
        ((*url, "--budget", "inf"), "budget_ntx must be a number above 0"),
        ((*url, "--budget", "-3"), "budget_ntx must be a number above 0"),
        ((*url, "--expected-minutes", "nan"), "expected time must be above 0"),
        ((*url, "--dep", "x" * 5000), "deps is 5,000 characters long: at most 256"),
    ]
    for args, needle in cases:
        _one_line(run_cli("job", "submit", *args, home=victim.home), needle)
    assert victim.cli("job", "list")["jobs"] == jobs_before  # nothing was submitted
    assert _files(Path(str(victim.home.config_dir))) == before
    assert victim.cli("peer", "self")["peer_id"]


def test_out_of_range_ids_and_limits_are_usage_errors(victim: Daemon) -> None:
    for args, needle in (
        (("chat", "join", "99999999999999999999999"), "argument ID: must be from 1 to"),
        (("chat", "join", "0"), "argument ID: must be from 1 to"),
        (("chat", "join", "seven"), "argument ID: 'seven' is not a whole number"),
        (("chat", "history", victim.peer_id, "--limit", "10" * 20), "argument --limit"),
    ):
        result = run_cli(*args, home=victim.home)
        assert result.returncode == 2
        _one_line(result, needle)
    assert victim.cli("chat", "list")["requests"] == []
    assert victim.cli("peer", "self")["peer_id"]


@pytest.mark.timeout(300)  # two daemons and a real job, on a machine that may be busy
def test_job_results_out_dir_is_the_callers(tmp_path: Path, daemons: Callable[..., Daemon]) -> None:
    """``job results -o out`` run from a folder writes into that folder's ``out``, not into
    the daemon's working directory (the repository, here)."""
    import functools
    import http.server
    import threading

    www = tmp_path / "www"
    www.mkdir()
    (www / "job.py").write_text(
        "import pathlib\npathlib.Path('outputs').mkdir(exist_ok=True)\n"
        "pathlib.Path('outputs/answer.txt').write_text('42')\n"
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        consumer = daemons("consumer", 42)
        provider = daemons(
            "provider",
            43,
            bootstrap=consumer.addrs()[0],
            extra_toml='\n[jobs]\nexecutors = ["process"]\n',
        )
        provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
        wait_for(
            lambda: any(
                p["peer_id"] == provider.peer_id for p in consumer.cli("peer", "list")["peers"]
            ),
            "the consumer never saw the provider",
        )
        url = f"http://127.0.0.1:{server.server_address[1]}/job.py"
        job = consumer.cli("job", "submit", "--url", url, "--framework", "scikit-learn")
        job_id = job["job_id"]
        wait_for(
            lambda: consumer.cli("job", "show", job_id)["state"] in TERMINAL,
            "the job never ended",
            timeout=150,
        )
        shown = consumer.cli("job", "show", job_id)
        logs = run_cli("job", "logs", job_id, home=consumer.home).stdout
        assert shown["state"] == "completed", (shown["reason"], logs[-2000:])
        caller = tmp_path / "caller"
        caller.mkdir()
        result = _cli_in(
            caller, "job", "results", job_id, "-o", "out", "--json", home=consumer.home
        )
        assert result.returncode == 0, result.stderr
        directory = Path(json.loads(result.stdout)["directory"])
        assert directory.is_relative_to(caller / "out"), directory
        assert (directory / "outputs" / "answer.txt").read_text() == "42"
        assert not (REPO / "out").exists()
        assert consumer.cli("peer", "self")["peer_id"]
    finally:
        server.shutdown()
        server.server_close()
