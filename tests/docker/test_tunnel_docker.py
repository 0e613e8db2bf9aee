"""Tunnels into a real container (Docker executor, ``network_mode: none``) between real
daemons: HTTP through ``job forward`` reaches the job's service, ``job shell`` runs commands
with a TTY and returns their exit status, and stopping the job closes an open tunnel."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.docker_fixture import docker_host, sklearn_image
from tests.tunnel_helpers import Forwarding, http_get, http_post, pair, service_url, submit_service

__all__ = ["daemons", "docker_host", "service_url", "sklearn_image"]

DOCKER_JOBS = '[jobs]\nexecutors = ["docker"]\ncheckpoint_interval_s = 0\n'


def test_a_service_in_a_container_without_network_is_reached_and_shelled(
    daemons: Callable[..., Daemon],
    docker_host: str,
    sklearn_image: str,
    service_url: str,
    tmp_path: Path,
) -> None:
    provider, consumer = pair(daemons, DOCKER_JOBS, env={"DOCKER_HOST": docker_host})
    job_id = submit_service(consumer, service_url, tmp_path, 8000)
    try:
        # The container really has no network but its loopback.
        inspect = json.loads(
            os.popen(
                f"DOCKER_HOST={docker_host} docker ps -q --filter label=nunet.job={job_id}"
                " | xargs -r env DOCKER_HOST=" + docker_host + " docker inspect"
            ).read()
        )
        assert inspect[0]["HostConfig"]["NetworkMode"] == "none"

        forward = Forwarding(consumer, job_id, "8000")
        try:
            status, body = http_get(forward.port)
            assert status == 200 and json.loads(body)["hello"] == "from a job"
            blob = os.urandom(500_000)
            assert http_post(forward.port, blob) == blob
        finally:
            assert forward.stop() == 0

        # A shell with a TTY, in the container, as the job's user; its exit status is ours.
        done = run_cli(
            "job",
            "shell",
            job_id,
            "--",
            "python3",
            "-c",
            "import os,sys; print('tty', os.isatty(1), os.getcwd()); sys.exit(3)",
            home=consumer.home,
        )
        assert done.returncode == 3, done.stderr
        assert "tty True /workspace" in done.stdout
        # Without a command: the image has no shell, so Python's prompt; EOF ends it.
        done = run_cli("job", "shell", job_id, home=consumer.home, input="print(6*7)\nexit(4)\n")
        assert done.returncode == 4, done.stderr
        assert "42" in done.stdout

        # Stopping the service closes a tunnel that is still open, and ends the job normally.
        forward = Forwarding(consumer, job_id, "8000")
        assert http_get(forward.port)[0] == 200
        consumer.cli("job", "stop", job_id)
        wait_for(
            lambda: consumer.cli("job", "show", job_id)["state"] == "completed", "never stopped", 60
        )
        assert forward.proc.wait(20) == 0
        with pytest.raises(OSError):
            http_get(forward.port, timeout=2)
        shown = consumer.cli("job", "show", job_id)
        assert shown["reason"] == "stopped by the consumer"
        assert shown["metering"]["net_rx_bytes"] >= 500_000
        assert shown["metering"]["net_tx_bytes"] >= 500_000
        log = run_cli("job", "logs", job_id, home=provider.home).stdout
        assert f"shell opened by {consumer.peer_id}" in log and "6*7" not in log
    finally:
        run_cli("job", "cancel", job_id, home=consumer.home)
