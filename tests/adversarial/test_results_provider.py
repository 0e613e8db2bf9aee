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
from tests.daemons import Daemon, wait_for

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
os.link(keys + "/identity.key", "outputs/hard")                 # the key's own inode
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
    consumer = daemons("consumer", 61)
    provider = daemons(
        "provider",
        60,
        bootstrap=consumer.addrs()[0],
        extra_toml='[jobs]\nexecutors = ["process"]\n',
    )
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
        90,
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
        "'outputs/hard' has other hard links",
        "'outputs/fifo' is a FIFO: not sent",
    ):
        assert said in log, (said, log)
    # The key is still where it was, untouched, and the provider still serves.
    assert provider.home.identity_key.read_bytes() == key
    assert provider.cli("job", "show", job_id)["state"] == "completed"
