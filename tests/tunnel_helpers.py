"""Shared by the tunnel tests: a service job's script served over HTTP, a consumer/provider
pair, `job forward` as a real CLI process, and HTTP through it."""

from __future__ import annotations

import contextlib
import functools
import http.client
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, TEST_ADDRESS
from tests.daemon_harness import Daemon, wait_for

SERVICE = (REPO / "examples" / "jobs" / "http_service" / "serve.py").read_text()


@contextlib.contextmanager
def serving(root: Path) -> Iterator[str]:
    """http://127.0.0.1:N/: the files of ``root``, as a provider fetches a job's script."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def service_url(tmp_path: Path) -> Iterator[str]:
    """http://127.0.0.1:N/serve.py: the example service's script, as a provider fetches it."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "serve.py").write_text(SERVICE)
    with serving(root) as url:
        yield url + "serve.py"


def pair(
    daemons: Callable[..., Daemon], jobs_toml: str, env: dict[str, str] | None = None
) -> tuple[Daemon, Daemon]:
    consumer = daemons("consumer", 41)
    provider = daemons("provider", 40, bootstrap=consumer.addrs()[0], extra_toml=jobs_toml, env=env)
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    provider_id = provider.peer_id
    wait_for(
        lambda: any(p["peer_id"] == provider_id for p in consumer.cli("peer", "list")["peers"]),
        "the consumer never saw the provider",
    )
    return provider, consumer


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def submit_service(consumer: Daemon, url: str, tmp_path: Path, port: int = 8000) -> str:
    """A service job listening on ``port`` (the process executor's jobs share the host's
    127.0.0.1: give each test a free one)."""
    job_file = tmp_path / "service.toml"
    job_file.write_text(
        f'name = "svc"\nscript_url = "{url}"\nframework = "scikit-learn"\n'
        f'kind = "service"\nports = [{port}]\nexpected_minutes = 5\n'
        f'[env]\nPORT = "{port}"\n'
    )
    job = consumer.cli("job", "submit", "-f", str(job_file))
    job_id = str(job["job_id"])
    wait_for(lambda: consumer.cli("job", "show", job_id)["state"] == "running", "never ran", 60)
    # Running is not yet listening: the log says when the server is up.
    wait_for(lambda: "serving on" in _logs(consumer, job_id), "the service never listened", 60)
    return job_id


def _logs(daemon: Daemon, job_id: str) -> str:
    from tests.conftest import run_cli

    return run_cli("job", "logs", job_id, home=daemon.home).stdout


class Forwarding:
    """``nunet-tui job forward`` running as the user would run it, until stopped."""

    def __init__(self, daemon: Daemon, job_id: str, ports: str) -> None:
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "nunet_tui", "--home", str(daemon.home.home)),
                *("job", "forward", job_id, ports, "--json"),
            ],
            cwd=REPO,
            # PYTHONFAULTHANDLER: a forward that hangs shows where (stop()).
            env={
                **{k: v for k, v in os.environ.items() if k != "NUNET_HOME"},
                "PYTHONFAULTHANDLER": "1",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError("job forward printed nothing: " + self.proc.stderr.read())
        self.info: dict[str, Any] = json.loads(line)

    @property
    def port(self) -> int:
        return int(self.info["local_port"])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(2)  # Ctrl-C
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)  # faulthandler: every thread's traceback
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"job forward ignored Ctrl-C for 20 s; stderr: {err}") from None


def http_get(port: int, path: str = "/", timeout: float = 20.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def http_post(port: int, body: bytes, timeout: float = 30.0) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/echo", body=body)
        return conn.getresponse().read()
    finally:
        conn.close()
