"""A JupyterLab notebook on a real provider daemon with the Docker executor (the container has
``network_mode: none``), reached through the tunnel: its API answers 200 with the notebook's
token and 403 without; the token never reaches the job's log; a file written through
JupyterLab comes back in the results when it stops; ``notebook delete`` removes its files on
the provider and another delete is refused for the right reason.

The image is scripts/build_notebook_image.sh's (the jobs' test image plus JupyterLab from the
package index pip is configured with), built once when missing: nothing is downloaded while
the test runs.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.docker_fixture import NOTEBOOK_IMAGE, docker_host, notebook_image
from tests.tunnel_helpers import pair, serving

__all__ = ["daemons", "docker_host", "notebook_image"]

pytestmark = pytest.mark.docker

# The notebook asks for the pytorch image: this provider's is the JupyterLab test image.
PROVIDER_TOML = (
    '[jobs]\nexecutors = ["docker"]\ncheckpoint_interval_s = 0\n'
    f'[ml_images]\npytorch_cpu = "{NOTEBOOK_IMAGE}"\n'
)


@pytest.fixture
def launcher_url() -> Iterator[str]:
    """examples/jobs/notebook/notebook.py over HTTP, as a provider fetches it."""
    with serving(REPO / "examples" / "jobs" / "notebook") as url:
        yield url + "notebook.py"


def _request(
    port: int, method: str, path: str, body: bytes | None = None, token: str = ""
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _cli(daemon: Daemon, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, home=daemon.home, timeout=timeout)


def test_a_notebook_is_created_opened_stopped_fetched_and_deleted(
    daemons: Callable[..., Daemon],
    docker_host: str,
    notebook_image: str,
    launcher_url: str,
    tmp_path: Path,
) -> None:
    provider, consumer = pair(daemons, PROVIDER_TOML, env={"DOCKER_HOST": docker_host})
    created = _cli(
        consumer, "notebook", "create", "--script-url", launcher_url, "--image", "pytorch", "--json"
    )
    assert created.returncode == 0, created.stderr
    job_id = json.loads(created.stdout)["job_id"]
    try:
        opened = _cli(consumer, "notebook", "open", job_id, "--json", timeout=240)
        assert opened.returncode == 0, opened.stderr
        info = json.loads(opened.stdout)
        port, token = int(info["local_url"].rsplit(":", 1)[1].strip("/")), info["token"]
        assert info["url"] == f"http://127.0.0.1:{port}/lab?token={token}"

        # JupyterLab answers through the tunnel, only with the token.
        status, body = _request(port, "GET", f"/api/status?token={token}")
        assert status == 200 and "started" in json.loads(body)
        assert _request(port, "GET", "/api/status")[0] == 403
        assert _request(port, "GET", "/api/status?token=" + "0" * len(token))[0] == 403
        content = json.dumps({"type": "file", "format": "text", "content": "kept\n"}).encode()
        status, _ = _request(port, "PUT", "/api/contents/note.txt", content, token)
        assert status in (200, 201)

        # The container has no network; the token is in neither side's job log.
        ids = subprocess.run(
            ["docker", "ps", "-q", "--filter", f"label=nunet.job={job_id}"],
            capture_output=True,
            text=True,
            env={**os.environ, "DOCKER_HOST": docker_host},
            check=True,
        ).stdout.split()
        inspect = subprocess.run(
            ["docker", "inspect", *ids],
            capture_output=True,
            text=True,
            env={**os.environ, "DOCKER_HOST": docker_host},
            check=True,
        ).stdout
        assert {c["HostConfig"]["NetworkMode"] for c in json.loads(inspect)} == {"none"}
        provider_log = _cli(provider, "job", "logs", job_id).stdout
        assert "notebook ready on 127.0.0.1" in provider_log
        assert (
            token not in provider_log and token not in _cli(consumer, "job", "logs", job_id).stdout
        )

        listed = json.loads(_cli(consumer, "notebook", "list", "--json").stdout)["notebooks"]
        assert [(n["job_id"], n["state"], n["local_url"]) for n in listed] == [
            (job_id, "running", info["local_url"])
        ]
        # A provider's view of its job is no notebook of its own.
        refused = _cli(provider, "notebook", "open", job_id)
        assert refused.returncode == 1 and "not yours" in refused.stderr

        # Deleting a running notebook's files is refused: stop it first.
        early = _cli(consumer, "notebook", "delete", job_id)
        assert early.returncode == 1 and "stop it first" in early.stderr

        stopped = _cli(consumer, "notebook", "stop", job_id, "--json")
        assert stopped.returncode == 0, stopped.stderr
        wait_for(
            lambda: consumer.cli("job", "show", job_id)["results_dir"] != "",
            "the notebook's files never came back",
            60,
        )
        out = tmp_path / "fetched"
        fetched = consumer.cli("job", "results", job_id, "-o", str(out))
        assert (Path(fetched["directory"]) / "notebooks" / "note.txt").read_text() == "kept\n"
        assert "notebooks/welcome.ipynb" in fetched["files"]

        workspace = provider.home.state_dir / "jobs" / job_id / "workspace"
        archive = Path(provider.cli("job", "show", job_id)["results_dir"])
        assert (workspace / "notebooks" / "note.txt").exists() and archive.exists()
        deleted = _cli(consumer, "notebook", "delete", job_id, "--json")
        assert deleted.returncode == 0, deleted.stderr
        assert not workspace.exists() and not archive.exists()
        assert provider.cli("job", "show", job_id)["results_dir"] == ""
        again = _cli(consumer, "notebook", "delete", job_id)
        assert again.returncode == 0  # nothing left: still done, and still nothing there
        # Our own fetched copy stays.
        assert (Path(fetched["directory"]) / "notebooks" / "note.txt").exists()
    finally:
        run_cli("job", "cancel", job_id, home=consumer.home)
