"""``notebook delete`` (``DeleteResults``) removes a finished job's files on its provider, for
the job's owner only: a hostile peer cannot delete someone else's notebook (refused in the
words used for a job that does not exist), a crafted job id never names a folder outside the
provider's jobs (the schema refuses it before anything is looked up), a running job's files
are not deleted, and deleting its own job removes links the job planted without following
them. The honest owner's delete still works afterwards.

Real consumer and provider daemons on 127.0.0.1 with the process executor; the hostile peer
is a real libp2p host that signs whatever the test gives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, open_job, seal_job
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, wait_for
from tests.tunnel_helpers import free_port, pair, service_url, serving

__all__ = ["service_url"]

PROCESS_JOBS = '[jobs]\nexecutors = ["process"]\ncheckpoint_interval_s = 0\nslots = 2\n'
TOKEN = "5eb1" * 12

# The hostile peer's own job: it links its workspace to a folder outside, then ends.
LINKS = """
import os, pathlib
os.chdir(os.path.dirname(os.path.abspath(__file__)))  # the workspace
pathlib.Path("outputs").mkdir(exist_ok=True)
pathlib.Path("outputs/mine.txt").write_text("mine")
os.symlink(os.environ["CANARY"], "escape")
os.symlink(os.environ["CANARY"], "outputs/escape")
print("links planted", flush=True)
"""


@pytest.fixture
def links_url(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "links-www"
    root.mkdir()
    (root / "links.py").write_text(LINKS)
    with serving(root) as url:
        yield url + "links.py"


def _delete(peer: HostilePeer, provider: str, job_id: str) -> list[bytes]:
    message = {"t": "delete_results", "v": 1, "job_id": job_id}
    return peer.request(provider, JOB_PROTOCOL, [seal_job(peer.identity, message)])


def _own_job(peer: HostilePeer, provider: str, url: str, canary: Path) -> str:
    job_id = "b0b1b2b3b4b5"
    spec = {
        "framework": "scikit-learn",
        "script_url": url,
        "expected_minutes": 2,
        "env": {"CANARY": str(canary)},
    }
    offer = {"t": "offer", "v": 1, "job_id": job_id, "spec": spec, "consumer": peer.peer_id}
    quote = open_job(peer.request(provider, JOB_PROTOCOL, [seal_job(peer.identity, offer)])[0])
    assert quote["t"] == "quote", quote
    confirm = {"t": "confirm", "v": 1, "job_id": job_id, "total_ntx": quote["total_ntx"]}
    accepted = open_job(peer.request(provider, JOB_PROTOCOL, [seal_job(peer.identity, confirm)])[0])
    assert accepted["t"] == "accepted", accepted
    return job_id


def _notebook_like(consumer: Daemon, url: str, tmp_path: Path) -> str:
    """A service job shaped like a notebook (token, port, notebooks/ output): what
    `notebook stop` and `notebook delete` act on; the example service stands in for
    JupyterLab, which the process executor's host does not have."""
    port = free_port()
    job_file = tmp_path / "notebook.toml"
    job_file.write_text(
        f'name = "notebook"\nscript_url = "{url}"\nframework = "scikit-learn"\n'
        f'kind = "service"\nports = [{port}]\nexpected_minutes = 5\noutputs = ["outputs"]\n'
        f'[env]\nPORT = "{port}"\nNOTEBOOK_PORT = "{port}"\nJUPYTER_TOKEN = "{TOKEN}"\n'
    )
    job_id = str(consumer.cli("job", "submit", "-f", str(job_file))["job_id"])
    wait_for(
        lambda: "serving on" in run_cli("job", "logs", job_id, home=consumer.home).stdout,
        "the service never listened",
        60,
    )
    return job_id


def test_only_the_owner_deletes_a_finished_jobs_files(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    service_url: str,
    links_url: str,
    tmp_path: Path,
) -> None:
    provider, consumer = pair(daemons, PROCESS_JOBS)
    pid = provider.peer_id
    jobs = provider.home.state_dir / "jobs"
    job_id = _notebook_like(consumer, service_url, tmp_path)
    peer = hostile(seed=b"\x67" * 32, bootstrap=[provider.addrs()[0]])
    peer.wait_connected(pid)

    # Running: neither the owner nor anyone else deletes its files.
    early = run_cli("notebook", "delete", job_id, home=consumer.home)
    assert early.returncode == 1 and "stop it first" in early.stderr
    (refused,) = (open_job(f) for f in _delete(peer, pid, job_id))
    assert refused["t"] == "refusal" and refused["reason"] == "no such job of yours"

    assert run_cli("notebook", "stop", job_id, home=consumer.home).returncode == 0
    wait_for(
        lambda: consumer.cli("job", "show", job_id)["results_dir"] != "",
        "the results never came back",
        60,
    )
    workspace = jobs / job_id / "workspace"
    archive = Path(provider.cli("job", "show", job_id)["results_dir"])
    assert workspace.is_dir() and archive.is_file()

    # Someone else's finished job: the same words as for none; nothing is removed.
    for target in (job_id, "ffffffffffff"):
        (answer,) = (open_job(f) for f in _delete(peer, pid, target))
        assert answer["t"] == "refusal" and answer["reason"] == "no such job of yours"
    # Crafted ids: refused by the schema, the stream reset without an answer.
    key = provider.home.identity_key.read_bytes()
    for crafted in ("..", "../keys", f"{job_id}/../..", "/etc", "..%2f..", job_id + "\x00"):
        assert _delete(peer, pid, crafted) == []
    assert workspace.is_dir() and archive.is_file()
    assert provider.home.identity_key.read_bytes() == key

    # Its own job's files go, and the links it planted are removed, not followed.
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep.txt").write_text("not the job's")
    own = _own_job(peer, pid, links_url, canary)
    wait_for(lambda: provider.cli("job", "show", own)["state"] == "completed", "never ended", 60)
    assert (jobs / own / "workspace" / "escape").is_symlink()
    (accepted,) = (open_job(f) for f in _delete(peer, pid, own))
    assert accepted["t"] == "accepted", accepted
    assert not (jobs / own / "workspace").exists()
    assert (canary / "keep.txt").read_text() == "not the job's"
    assert (jobs / own / "log.jsonl").exists()  # the provider's record of what ran stays

    # The honest owner still deletes its own, and the provider still answers it.
    assert workspace.is_dir() and archive.is_file()
    done = run_cli("notebook", "delete", job_id, "--json", home=consumer.home)
    assert done.returncode == 0, done.stderr
    assert not workspace.exists() and not archive.exists()
    assert provider.cli("job", "show", job_id)["state"] == "completed"
