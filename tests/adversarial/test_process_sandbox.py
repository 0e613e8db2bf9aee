"""A process job, and a shell into it, against the provider that runs it (sandbox.py).

Before the sandbox a process job ran as the provider's own user: on a root provider `job
shell` was a root shell that read the provider's identity key, its database and every job's
folder, and drove its control socket. Here a real provider daemon with the process executor
runs a hostile job that tries each of those, writes outside its workspace and into the host's
/tmp, looks for the provider's process and connects to a service on the provider's 127.0.0.1;
then the same probe runs again through `job shell`. Each must fail, while an honest job beside
it still runs, logs, sends its results, and its service port is forwarded through the tunnel.

Run with ``jobs.process_sandbox = "require"`` every probe reaches its target (the test fails).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from engine.jobs.executors import sandbox
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.tunnel_helpers import Forwarding, free_port, http_get, pair, serving

__all__ = ["daemons"]

pytestmark = pytest.mark.skipif(
    not sandbox.probe().usable, reason=f"no job sandbox here: {sandbox.probe().detail}"
)

JOBS = (
    '[jobs]\nexecutors = ["process"]\ncheckpoint_interval_s = 0\nslots = 2\n'
    'process_sandbox = "require"\n'
)

# The honest job: a secret in its workspace (the hostile one's target), a result, a log line.
HONEST = """
import pathlib
pathlib.Path("secret.txt").write_text("the honest job's secret")
pathlib.Path("outputs").mkdir(exist_ok=True)
pathlib.Path("outputs/result.txt").write_text("42")
print("honest work done", flush=True)
"""

# The hostile job: every probe, then (as a job, not in a shell) a service on its port.
PROBE = r"""
import http.server, json, os, socket, sys

def attempt(name, action):
    try:
        action()
        return "reached"
    except Exception as exc:
        return f"denied ({type(exc).__name__})"

def read(path):
    with open(path, "rb") as f:
        f.read(1)

def write(path):
    with open(path, "w") as f:
        f.write("pwned")

def unix(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(path)

def tcp(port):
    socket.create_connection(("127.0.0.1", port), timeout=5).close()

def provider_process(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        if b"nunet" not in f.read():
            raise LookupError("another process")

e = os.environ
probes = {
    "identity key": attempt("key", lambda: read(e["P_KEY"])),
    "database": attempt("db", lambda: read(e["P_DB"])),
    "other job's workspace": attempt("other", lambda: read(e["P_OTHER"])),
    "control socket": attempt("sock", lambda: unix(e["P_SOCK"])),
    "write provider state": attempt("state", lambda: write(e["P_STATE"])),
    "write host /tmp": attempt("tmp", lambda: write(e["P_TMP"])),
    "write its venv": attempt("venv", lambda: write(os.path.join(e["VIRTUAL_ENV"], "pwned"))),
    "provider process": attempt("proc", lambda: provider_process(e["P_PID"])),
    "provider service on 127.0.0.1": attempt("tcp", lambda: tcp(int(e["P_PORT"]))),
}
print("PROBES " + json.dumps(probes), flush=True)
if "--once" in sys.argv:
    sys.exit(0)
os.makedirs("outputs", exist_ok=True)
with open("outputs/probes.json", "w") as f:
    json.dump(probes, f)

class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"an honest answer"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

# A process that leaves the job's process group (its own session): cancel must end it too.
import subprocess
subprocess.Popen(["sleep", e["P_SLEEP"]], start_new_session=True)
server = http.server.HTTPServer(("127.0.0.1", int(e["PORT"])), Hello)
print("serving on", e["PORT"], flush=True)
server.serve_forever()
"""


def _running(*cmdline: str) -> bool:
    return any(p.info["cmdline"] == list(cmdline) for p in psutil.process_iter(["cmdline"]))


def _logs(daemon: Daemon, job_id: str) -> str:
    return run_cli("job", "logs", job_id, home=daemon.home).stdout


def _probes(text: str) -> dict[str, str]:
    line = next(line for line in text.splitlines() if "PROBES " in line)
    return dict(json.loads(line.split("PROBES ", 1)[1]))


def _job_file(tmp_path: Path, name: str, url: str, body: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'name = "{name}"\nscript_url = "{url}"\nframework = "scikit-learn"\n{body}')
    return path


def test_a_process_job_and_its_shell_reach_nothing_of_the_provider(
    daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    provider, consumer = pair(daemons, JOBS + "allow_process_shell = true\n")
    www = tmp_path / "www"
    www.mkdir()
    (www / "honest.py").write_text(HONEST)
    (www / "probe.py").write_text(PROBE)
    with serving(www) as url:
        port = int(url.rsplit(":", 1)[1].strip("/"))  # a service on the provider's loopback
        honest = consumer.cli(
            "job", "submit", "-f", str(_job_file(tmp_path, "honest", url + "honest.py", ""))
        )["job_id"]
        wait_for(
            lambda: consumer.cli("job", "show", honest)["state"] == "completed",
            "the honest job never completed",
            120,
        )
        other = provider.home.state_dir / "jobs" / honest / "workspace" / "secret.txt"
        assert other.exists()  # the target is there: only the sandbox keeps the probe out
        host_tmp = Path("/tmp") / f"nunet-sandbox-probe-{uuid.uuid4().hex}"
        service_port = free_port()
        sleep = f"{uuid.uuid4().int % 100000 + 10000}.5"  # seconds: a name to find it by
        env = {
            "P_KEY": provider.home.identity_key,
            "P_DB": provider.home.database,
            "P_OTHER": other,
            "P_SOCK": provider.home.control_socket,
            "P_STATE": provider.home.state_dir / "pwned",
            "P_TMP": host_tmp,
            "P_PID": provider.proc.pid,
            "P_PORT": port,
            "PORT": service_port,
            "P_SLEEP": sleep,
        }
        body = f'kind = "service"\nports = [{service_port}]\nexpected_minutes = 5\n[env]\n'
        body += "".join(f'{key} = "{value}"\n' for key, value in env.items())
        hostile = consumer.cli(
            "job", "submit", "-f", str(_job_file(tmp_path, "probe", url + "probe.py", body))
        )["job_id"]
        try:
            wait_for(lambda: "serving on" in _logs(consumer, hostile), "never served", 120)
            as_job = _probes(_logs(consumer, hostile))
            shell = run_cli(
                "job", "shell", hostile, "--", "python", "probe.py", "--once", home=consumer.home
            )
            assert shell.returncode == 0, shell.stderr
            in_shell = _probes(shell.stdout)

            # The hostile job's own service still answers through the tunnel.
            forward = Forwarding(consumer, hostile, str(service_port))
            try:
                assert http_get(forward.port) == (200, b"an honest answer")
            finally:
                forward.stop()
        finally:
            # Asked again while the provider's connection is being made anew ("try again").
            wait_for(
                lambda: run_cli("job", "cancel", hostile, home=consumer.home).returncode == 0,
                "the provider never took the cancel",
                60,
            )
        # The whole sandbox went with the job, the process that left its group included.
        wait_for(
            lambda: consumer.cli("job", "show", hostile)["state"] != "running",
            f"the hostile job was never cancelled: {consumer.cli('job', 'show', hostile)}",
            60,
        )
        wait_for(lambda: not _running("sleep", sleep), "the job's escaped process lived on", 30)
        for where, probes in (("job", as_job), ("shell", in_shell)):
            reached = {name: how for name, how in probes.items() if how == "reached"}
            # Writes are judged by the host's files below: the private /tmp takes a write to
            # a /tmp path (and the test's provider keeps its state under pytest's /tmp).
            reached.pop("write host /tmp", None)
            reached.pop("write provider state", None)
            assert not reached, f"the {where} reached {sorted(reached)}"
            assert len(probes) == 9, probes
        assert not host_tmp.exists()
        assert not (provider.home.state_dir / "pwned").exists()

    # The honest job beside it: its log and its results, as without a sandbox.
    assert "honest work done" in _logs(consumer, honest)
    out = tmp_path / "out"
    consumer.cli("job", "results", honest, "-o", str(out))
    assert any(p.name == "result.txt" and p.read_text() == "42" for p in out.rglob("*"))


def test_shells_into_process_jobs_are_off_unless_turned_on(
    daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    _, consumer = pair(daemons, JOBS)
    www = tmp_path / "www"
    www.mkdir()
    (www / "probe.py").write_text(PROBE)
    service_port = free_port()
    with serving(www) as url:
        body = f'kind = "service"\nports = [{service_port}]\nexpected_minutes = 5\n'
        body += "[env]\n" + "".join(
            # Paths of this test's own: were the sandbox off, a write would land here, not
            # at a shared path other tests read (a "/nonexistent" file broke DOCKER_HOST ones).
            f'{key} = "{tmp_path / "absent" / key}"\n'
            for key in ("P_KEY", "P_DB", "P_OTHER", "P_SOCK", "P_STATE", "P_TMP")
        )
        body += f'P_PID = "1"\nP_PORT = "1"\nP_SLEEP = "1"\nPORT = "{service_port}"\n'
        job_id = consumer.cli(
            "job", "submit", "-f", str(_job_file(tmp_path, "probe", url + "probe.py", body))
        )["job_id"]
        try:
            wait_for(lambda: "serving on" in _logs(consumer, job_id), "never served", 120)
            done = run_cli("job", "shell", job_id, "--", "id", home=consumer.home)
            assert done.returncode == 1
            assert "shells into process jobs are off on this provider" in done.stderr
            assert "jobs.allow_process_shell" in done.stderr
        finally:
            run_cli("job", "cancel", job_id, home=consumer.home)


def test_bwrap_reports_a_signal_as_the_executor_reads_one() -> None:
    assert sandbox.exit_code(128 + 24) == -24  # SIGXCPU: "used up its CPU time limit"
    assert sandbox.exit_code(0) == 0 and sandbox.exit_code(1) == 1
    assert sandbox.exit_code(None) is None
