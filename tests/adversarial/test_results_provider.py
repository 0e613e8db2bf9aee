"""A hostile consumer's job tries to make the provider pack files from outside its workspace.

Real consumer and provider daemons on 127.0.0.1, the process executor, the script served by a
real HTTP server. The job's script plants links in its outputs (a folder link in the middle of
a declared output path, ``leak -> ../../../../keys``, the issue's attack; a folder link and a
file link inside outputs/; a hard link to the provider's identity.key; a FIFO) and declares
output paths through them. The provider must pack only the job's own files, name what it left
out in the job's log, and the job must still complete with its honest results.
"""

from __future__ import annotations

import functools
import gzip
import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import TEST_ADDRESS, run_cli
from tests.daemon_harness import Daemon, wait_for
from tests.docker_fixture import docker_host, sklearn_image

__all__ = ["docker_host", "sklearn_image"]

TRICKS = """
import os, pathlib
os.chdir(os.path.dirname(os.path.abspath(__file__)))  # the workspace
keys = "../../../../keys"  # workspace -> <job> -> jobs -> state -> home
pathlib.Path("outputs/deep").mkdir(parents=True, exist_ok=True)
pathlib.Path("outputs/honest.txt").write_text("the job's own result")
os.symlink(keys, "leak")                                        # leak/identity.key
os.symlink("../" + keys, "outputs/keys")                        # a folder link inside outputs
os.symlink("../../" + keys, "outputs/deep/mid")                 # outputs/deep/mid/identity.key
os.symlink("../" + keys + "/identity.key", "outputs/key.txt")   # a file link
try:  # in a container the key is not even visible: the link is refused there
    os.link(keys + "/identity.key", "outputs/hard")             # the key's own inode
except OSError as exc:
    print(f"no hard link: {exc}", flush=True)
os.mkfifo("outputs/fifo")                                       # a reader that opens it hangs
print("links planted", flush=True)
"""


@pytest.fixture
def tricks_url(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "www"
    root.mkdir()
    (root / "tricks.py").write_text(TRICKS)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/tricks.py"
    server.shutdown()
    server.server_close()


def test_links_in_a_jobs_outputs_never_reach_the_providers_keys(
    daemons: Callable[..., Daemon], tricks_url: str, tmp_path: Path
) -> None:
    # Unsandboxed: in its sandbox the job cannot even name the key (test_process_sandbox.py);
    # here the pack's own checks are what stands between its links and the key.
    jobs = '[jobs]\nexecutors = ["process"]\nprocess_sandbox = "off"\n'
    _attack(daemons, tricks_url, tmp_path, jobs, {})


def test_links_made_inside_a_container_are_not_followed_on_the_host(
    daemons: Callable[..., Daemon],
    tricks_url: str,
    tmp_path: Path,
    docker_host: str,
    sklearn_image: str,
) -> None:
    """The container sees only /workspace, but its links are read by the provider on the
    host, where ``../../../../keys`` is the provider's keys folder. The provider is root here,
    so the results are read by a child that became the workspace's owner (nobody)."""
    jobs = '[jobs]\nexecutors = ["docker"]\ncheckpoint_interval_s = 0\n'
    _attack(daemons, tricks_url, tmp_path, jobs, {"DOCKER_HOST": docker_host}, docker=True)


def _attack(
    daemons: Callable[..., Daemon],
    tricks_url: str,
    tmp_path: Path,
    jobs_toml: str,
    env: dict[str, str],
    *,
    docker: bool = False,
) -> None:
    consumer = daemons("consumer", 61)
    provider = daemons("provider", 60, bootstrap=consumer.addrs()[0], extra_toml=jobs_toml, env=env)
    provider.cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS)
    provider_id = provider.peer_id
    wait_for(
        lambda: any(p["peer_id"] == provider_id for p in consumer.cli("peer", "list")["peers"]),
        "the consumer never saw the provider",
    )
    key = provider.home.identity_key.read_bytes()
    assert len(key) >= 32
    job_file = tmp_path / "job.toml"
    job_file.write_text(
        f"""name = "tricks"
script_url = "{tricks_url}"
framework = "scikit-learn"
expected_minutes = 1
outputs = ["outputs", "leak/identity.key", "leak", "outputs/deep/mid/identity.key"]
"""
    )
    job_id = consumer.cli("job", "submit", "-f", str(job_file), "--peer", provider_id)["job_id"]
    wait_for(
        lambda: consumer.cli("job", "show", job_id)["state"] == "completed",
        "the job with links in its outputs did not complete",
        120,
    )
    # What crossed the wire, as the consumer stored it: not a byte of the key.
    received = consumer.home.state_dir / "jobs" / job_id / "results.tar.gz"
    wait_for(received.exists, "the consumer never fetched the results")
    assert key not in gzip.decompress(received.read_bytes())
    result = consumer.cli("job", "results", job_id, "-o", str(tmp_path / "out"))
    unpacked = Path(result["directory"])
    files = sorted(str(p.relative_to(unpacked)) for p in unpacked.rglob("*") if p.is_file())
    assert files == ["outputs/honest.txt"]
    assert (unpacked / "outputs" / "honest.txt").read_text() == "the job's own result"
    assert not any(p.is_symlink() for p in unpacked.rglob("*"))
    # The job's log says what was left out, on both sides.
    log = run_cli("job", "logs", job_id, home=consumer.home).stdout
    for said in (
        "'leak' is a symbolic link, not a folder: not sent",
        "'outputs/keys' is a symbolic link: not sent",
        "'outputs/deep/mid' is a symbolic link",
        "'outputs/key.txt' is a symbolic link: not sent",
        "'outputs/fifo' is a FIFO: not sent",
        *(() if docker else ("'outputs/hard' has other hard links",)),
    ):
        assert said in log, (said, log)
    # The key is still where it was, untouched, and the provider still serves.
    assert provider.home.identity_key.read_bytes() == key
    assert provider.cli("job", "show", job_id)["state"] == "completed"
