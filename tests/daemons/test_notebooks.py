"""Notebooks without a network: their specs, records and URLs (engine/api/notebooks.py), the
provider's deletion of a finished job's files on a real folder tree (links planted by the job,
a stored path that points elsewhere), the launcher's token redaction, and the Gradio chat
example's memory (its functions; gradio itself is never imported here)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import msgspec
import pytest

from engine import api
from engine.api import notebooks as nb
from engine.config import Paths
from engine.domain.spec import JobSpec, load_job_file, validate_spec
from engine.errors import EngineError
from engine.jobs import notebooks as provider_nb
from engine.store import Store
from tests.conftest import REPO, run_cli

EXAMPLES = REPO / "examples" / "jobs"
URL = "http://127.0.0.1:8765/notebook/notebook.py"
ME = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQc7XWbW"
OTHER = "12D3KooWRWcUSHYQhJjq4z1S8u5iEHoYwqHW6dFCzXvL1b8Ztq2a"


def _job(spec: JobSpec, **fields: object) -> api.JobInfo:
    base: dict[str, object] = {
        "job_id": "7b0e5c1a2f3d",
        "role": "consumer",
        "state": "running",
        "provider": OTHER,
        "consumer": ME,
        "spec": spec,
    }
    return api.JobInfo(**{**base, **fields})  # type: ignore[arg-type]


def test_a_notebook_spec_is_a_service_with_its_port_token_and_folder() -> None:
    base = load_job_file(EXAMPLES / "notebook" / "notebook.toml", base_url="http://h/notebook/")
    spec = nb.notebook_spec(str(base.script_url), base=base, deps=["jupyterlab"])
    assert spec.kind == "service" and spec.outputs == ("notebooks",)
    assert spec.script_url == "http://h/notebook/notebook.py"
    (port,) = spec.ports
    assert nb.PORT_RANGE[0] <= port < nb.PORT_RANGE[1]
    assert spec.env[nb.PORT_ENV] == str(port)
    token = spec.env[nb.TOKEN_ENV]
    assert len(token) == 48 and int(token, 16) >= 0
    assert spec.deps == ("jupyterlab",) and spec.expected_minutes == 120
    assert validate_spec(spec).ok
    # Every notebook its own token.
    assert nb.notebook_spec(URL).env[nb.TOKEN_ENV] != token
    with pytest.raises(EngineError, match="tier"):
        nb.notebook_spec(URL, tier="huge")


def test_notebooks_are_this_nodes_own_service_jobs_with_a_token() -> None:
    spec = nb.notebook_spec(URL, port=24_811, name="sweep")
    token = spec.env[nb.TOKEN_ENV]
    mine = _job(spec)
    theirs = _job(spec, job_id="aaaaaaaaaaaa", role="provider")
    plain = _job(JobSpec(framework="scikit-learn", script_url=URL), job_id="bbbbbbbbbbbb")
    forward = api.TunnelForward(
        forward_id="f1", job_id=mine.job_id, local_port=41_000, remote_port=24_811, url="u/"
    )
    elsewhere = msgspec.structs.replace(forward, forward_id="f2", remote_port=1)
    (listed,) = nb.notebooks([mine, theirs, plain], [elsewhere, forward])
    assert (listed.job_id, listed.name, listed.port, listed.local_url) == (
        mine.job_id,
        "sweep",
        24_811,
        "u/",
    )
    assert token not in json.dumps(msgspec.to_builtins(listed))
    assert nb.token_of(mine) == token
    assert nb.lab_url("http://127.0.0.1:41000/", token) == (
        f"http://127.0.0.1:41000/lab?token={token}"
    )
    assert nb.notebooks([mine])[0].local_url == ""
    with pytest.raises(EngineError, match="not yours"):
        nb.own_notebook(theirs)
    with pytest.raises(EngineError, match="not a notebook"):
        nb.own_notebook(plain)


def _finished(job_dir: Path, **fields: object) -> api.JobInfo:
    spec = nb.notebook_spec(URL)
    defaults: dict[str, object] = {
        "role": "provider",
        "state": "completed",
        "provider": ME,
        "consumer": OTHER,
        "results_dir": str(job_dir / "7b0e5c1a2f3d-results.tar.gz"),
    }
    return _job(spec, **{**defaults, **fields})


def _planted(tmp_path: Path) -> tuple[Path, Path]:
    job_dir = tmp_path / "jobs" / "7b0e5c1a2f3d"
    notebooks = job_dir / "workspace" / "notebooks"
    notebooks.mkdir(parents=True)
    (notebooks / "a.ipynb").write_text("{}")
    (job_dir / "checkpoints").mkdir()
    (job_dir / "log.jsonl").write_text("")
    (job_dir / "7b0e5c1a2f3d-results.tar.gz").write_bytes(b"x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    os.symlink(outside, notebooks / "escape")
    os.symlink(outside / "keep.txt", job_dir / "workspace" / "file-link")
    return job_dir, outside


def test_deleting_a_finished_jobs_files_never_follows_its_links(tmp_path: Path) -> None:
    job_dir, outside = _planted(tmp_path)
    removed = provider_nb.delete_job_files(job_dir, _finished(job_dir))
    assert removed == ["workspace", "checkpoints", "7b0e5c1a2f3d-results.tar.gz"]
    assert sorted(p.name for p in job_dir.iterdir()) == ["log.jsonl"]
    assert (outside / "keep.txt").read_text() == "keep"
    assert provider_nb.delete_job_files(job_dir, _finished(job_dir)) == []  # nothing left: done


def test_a_stored_results_path_outside_the_jobs_folder_is_refused(tmp_path: Path) -> None:
    job_dir, outside = _planted(tmp_path)
    for path in (outside / "keep.txt", job_dir / ".." / ".." / "outside" / "keep.txt"):
        with pytest.raises(EngineError, match="not in its own folder"):
            provider_nb.delete_job_files(job_dir, _finished(job_dir, results_dir=str(path)))
    assert (job_dir / "workspace" / "notebooks" / "a.ipynb").exists()
    assert (outside / "keep.txt").exists()
    # A job folder that is a link is not a job folder.
    linked = tmp_path / "jobs" / "0123456789ab"
    os.symlink(outside, linked)
    with pytest.raises(EngineError, match="symbolic link"):
        provider_nb.delete_job_files(
            linked, _finished(linked, job_id="0123456789ab", results_dir="")
        )
    assert (outside / "keep.txt").exists()


def test_only_the_owner_deletes_and_only_a_finished_job() -> None:
    job = _finished(Path("/nowhere"))
    assert provider_nb.deletion_refusal(job, OTHER) == ""
    assert provider_nb.deletion_refusal(job, ME) == "no such job of yours"
    assert provider_nb.deletion_refusal(None, OTHER) == "no such job of yours"
    assert provider_nb.deletion_refusal(msgspec.structs.replace(job, role="consumer"), OTHER) == (
        "no such job of yours"
    )
    running = msgspec.structs.replace(job, state="running")
    assert "stop it first" in provider_nb.deletion_refusal(running, OTHER)


def _module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_launcher_hides_the_token_and_refuses_to_start_without_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token = "ab" * 24
    monkeypatch.setenv("JUPYTER_TOKEN", token)
    launcher = _module(EXAMPLES / "notebook" / "notebook.py", "notebook_launcher")
    line = f"http://127.0.0.1:8888/lab?token={token} and again {token}"
    assert launcher.redacted(line) == "http://127.0.0.1:8888/lab?token=[token] and again [token]"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "notebook" / "notebook.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "JUPYTER_TOKEN"},
        timeout=60,
    )
    assert done.returncode == 2 and "no JUPYTER_TOKEN" in done.stdout


def test_the_chat_example_remembers_the_conversation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    chat = _module(EXAMPLES / "gradio_chat" / "chat.py", "gradio_chat_example")
    assert "gradio" not in sys.modules and chat.load() == []  # gradio only in main()
    turns: list[dict[str, str]] = []
    for message in ("my name is Ada", "what is my name?", "what did I say?"):
        answer = chat.reply(message, turns)
        turns += [{"role": "user", "content": message}, {"role": "assistant", "content": answer}]
        chat.save(turns)
    assert turns[3]["content"] == "You are Ada."
    assert turns[5]["content"] == "You first said: 'my name is Ada'"
    # Saved after every message, and read back as it was (a restarted chat goes on).
    assert chat.load() == turns
    assert json.loads((tmp_path / "outputs" / "conversation.json").read_text()) == turns
    spec = load_job_file(EXAMPLES / "gradio_chat" / "job.toml", base_url="http://h/gradio_chat/")
    assert (spec.kind, spec.ports, spec.deps) == ("service", (7860,), ("gradio",))


def test_the_cli_keeps_the_only_copy_and_says_what_is_missing(node_home: Paths) -> None:
    """A one-shot engine: its checks come before any network. A notebook whose files were
    not fetched yet is not deleted on its provider; a create without a launcher is a usage
    error (2); a job that is no notebook is named as such (1)."""
    spec = nb.notebook_spec(URL)
    store = Store(node_home.database)
    store.save_job(_job(spec, state="completed", results_sha256="ab" * 32, results_size=10))
    store.save_job(_job(JobSpec(framework="scikit-learn", script_url=URL), job_id="bbbbbbbbbbbb"))
    store.close()
    kept = run_cli("notebook", "delete", "7b0e5c1a2f3d", home=node_home)
    assert kept.returncode == 1 and "not fetched yet" in kept.stderr, kept.stderr
    plain = run_cli("notebook", "stop", "bbbbbbbbbbbb", home=node_home)
    assert plain.returncode == 1 and "not a notebook" in plain.stderr
    usage = run_cli("notebook", "create", home=node_home)
    assert usage.returncode == 2 and "--script-url" in usage.stderr
    listed = json.loads(run_cli("notebook", "list", "--json", home=node_home).stdout)
    assert [n["job_id"] for n in listed["notebooks"]] == ["7b0e5c1a2f3d"]
    assert spec.env[nb.TOKEN_ENV] not in json.dumps(listed)
