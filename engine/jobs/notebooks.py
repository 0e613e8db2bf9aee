"""Notebooks (issue 13): a JupyterLab server run as a service job, reached through a tunnel.

A notebook is an ordinary service job whose script is the launcher of
examples/jobs/notebook/notebook.py: it declares one port (JupyterLab's, on the job's own
127.0.0.1) and carries a token the consumer made (``JUPYTER_TOKEN``), which JupyterLab
demands on every request. The token never appears in the job's log (the launcher replaces any
copy in JupyterLab's output, and JupyterLab itself prints ``token=...``); only the owner's node
holds it, in the job's spec, and ``notebook open`` shows it in the local URL. The notebook
files live in ``notebooks/`` in the job's workspace, the job's one declared output: they come
back as its results when it stops (``job results``), and ``notebook delete`` removes them on
the provider (``DeleteResults``, owner only, finished jobs only; ``delete_job_files``).

Everything here is pure (specs, records, URLs, the files of one finished job): the CLI
(nunet_tui/cli/notebook.py) and the Notebooks screen build on the existing job and tunnel
commands, so a notebook needs no protocol of its own beyond the deletion.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from engine import api
from engine.domain import safe_paths
from engine.domain.spec import JobSpec, validate_spec
from engine.errors import EngineError

TOKEN_ENV = "JUPYTER_TOKEN"
PORT_ENV = "NOTEBOOK_PORT"
FOLDER = "notebooks"  # in the workspace: the job's declared output
SCRIPT = "notebook.py"  # the launcher's file name under an examples base URL
DEFAULT_MINUTES = 120.0
DEFAULT_NAME = "notebook"
# Process-executor jobs share the host's loopback: each notebook gets its own port there.
PORT_RANGE = (20_000, 40_000)
# What a finished job leaves on its provider and ``notebook delete`` removes. Its log stays:
# the provider's record of what ran (and the receipt's evidence).
JOB_FILES = ("workspace", "checkpoints")
RM_TIMEOUT_S = 600.0  # a workspace at the file cap takes seconds; a stuck disk, no longer


class Notebook(msgspec.Struct, frozen=True, kw_only=True):
    """One notebook as ``notebook list`` shows it (never its token)."""

    job_id: str
    name: str
    state: str
    provider: str
    port: int
    created_at: float = 0.0
    reason: str = ""
    local_url: str = ""  # http://127.0.0.1:N/ while forwarded, else ""
    forward_id: str = ""
    has_results: bool = False


def new_token() -> str:
    """A token for one notebook: 192 random bits, hex (safe in a URL as it is)."""
    return secrets.token_hex(24)


def choose_port() -> int:
    low, high = PORT_RANGE
    return low + secrets.randbelow(high - low)


def notebook_spec(
    script_url: str,
    *,
    base: JobSpec | None = None,
    token: str | None = None,
    port: int | None = None,
    name: str | None = None,
    framework: str | None = None,
    tier: str | None = None,
    device: str | None = None,
    expected_minutes: float | None = None,
    deps: Iterable[str] = (),
) -> JobSpec:
    """The job spec of a new notebook: ``base`` (a job file's fields, or the defaults) made
    into a service with JupyterLab's port, the token and ``notebooks/`` as its output."""
    spec = base or JobSpec(framework="scikit-learn", expected_minutes=DEFAULT_MINUTES)
    port = port or (spec.ports[0] if spec.ports else choose_port())
    env = {**spec.env, TOKEN_ENV: token or new_token(), PORT_ENV: str(port)}
    changes: dict[str, Any] = {
        "script_url": script_url,
        "git": None,
        "kind": "service",
        "ports": (port,),
        "env": env,
        "outputs": (FOLDER,),
        "name": name or spec.name or DEFAULT_NAME,
        "deps": tuple(dict.fromkeys((*spec.deps, *deps))),
    }
    for field, value in (
        ("framework", framework),
        ("tier", tier),
        ("device", device),
        ("expected_minutes", expected_minutes),
    ):
        if value is not None:
            changes[field] = value
    made = msgspec.structs.replace(spec, **changes)
    validate_spec(made).raise_if_failed("invalid")
    return made


def is_notebook(job: api.JobInfo) -> bool:
    spec = job.spec
    return spec.kind == "service" and bool(spec.env.get(TOKEN_ENV)) and bool(spec.ports)


def token_of(job: api.JobInfo) -> str:
    return job.spec.env.get(TOKEN_ENV, "")


def port_of(job: api.JobInfo) -> int:
    env, ports = job.spec.env, job.spec.ports
    with contextlib.suppress(TypeError, ValueError):
        declared = int(env.get(PORT_ENV, 0))
        if declared in ports:
            return declared
    return int(ports[0]) if ports else 0


def lab_url(local_url: str, token: str) -> str:
    """The URL the owner opens: JupyterLab on the forwarded port, logged in by its token."""
    return f"{local_url.rstrip('/')}/lab?token={token}"


def forward_of(job: api.JobInfo, forwards: Iterable[api.TunnelForward]) -> api.TunnelForward | None:
    port = port_of(job)
    for forward in forwards:
        if forward.job_id == job.job_id and forward.remote_port == port:
            return forward
    return None


def notebooks(
    jobs: Iterable[api.JobInfo], forwards: Iterable[api.TunnelForward] = ()
) -> list[Notebook]:
    """This node's own notebooks, newest first, with their local URLs where forwarded."""
    open_forwards = tuple(forwards)
    found = []
    for job in jobs:
        if job.role != "consumer" or not is_notebook(job):
            continue
        forward = forward_of(job, open_forwards)
        found.append(
            Notebook(
                job_id=job.job_id,
                name=job.spec.name or DEFAULT_NAME,
                state=job.state,
                provider=job.provider,
                port=port_of(job),
                created_at=job.created_at,
                reason=job.reason,
                local_url=forward.url if forward is not None else "",
                forward_id=forward.forward_id if forward is not None else "",
                has_results=bool(job.results_dir),
            )
        )
    return sorted(found, key=lambda n: (-n.created_at, n.job_id))


def own_notebook(job: api.JobInfo) -> api.JobInfo:
    """``job`` if it is one of this node's notebooks; else the one-line reason."""
    if job.role != "consumer":
        raise EngineError("invalid", f"job {job.job_id} is not yours: notebooks are their owner's")
    if not is_notebook(job):
        raise EngineError(
            "invalid", f"job {job.job_id} is not a notebook (`nunet-tui job show {job.job_id}`)"
        )
    return job


# --- the provider's side of ``notebook delete`` ----------------------------------------------


def deletion_refusal(job: api.JobInfo | None, peer: str) -> str:
    """Why ``peer`` may not delete this job's files here ("" when it may)."""
    # A stranger learns nothing about other people's jobs: the same words as for none.
    if job is None or job.role != "provider" or job.consumer != peer:
        return "no such job of yours"
    if job.state not in api.TERMINAL_STATES:
        return f"job {job.job_id} is {job.state}: stop it first (its files are in use)"
    return ""


def delete_job_files(job_dir: Path, job: api.JobInfo) -> list[str]:
    """Remove a finished job's workspace, checkpoints and results archive, every path resolved
    inside the job's own folder first (a link or a stored path that points elsewhere is
    refused, never followed); returns what was removed."""
    root = safe_paths.real_dir(job_dir, what=f"job {job.job_id}'s folder")
    targets = [safe_paths.child(root, name, what=f"job {job.job_id}'s") for name in JOB_FILES]
    if job.results_dir:
        archive = Path(job.results_dir)
        if archive.is_symlink() or not archive.resolve().is_relative_to(root.resolve()):
            raise EngineError(
                "unsafe_path", f"job {job.job_id}'s results are not in its own folder: kept"
            )
        targets.append(safe_paths.child(root, archive.name, what=f"job {job.job_id}'s"))
    return remove_job_paths(targets)


def remove_job_paths(targets: Iterable[Path]) -> list[str]:
    """Remove each of a job's own files or folders (paths already checked to be inside its
    folder); returns the names of those that were there. Also the workspace retention's."""
    removed: list[str] = []
    for path in targets:
        if path.is_dir() and not path.is_symlink():
            _remove_tree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(path.name)
    return removed


def _remove_tree(path: Path) -> None:
    """Linux's rmtree works from directory descriptors: a link the job made inside its
    workspace is removed, never followed. It recurses, though: folders nested past Python's
    recursion limit (a job made 1,200 in a blink) are left to rm, which does not recurse
    (fts) and follows no links either."""
    try:
        shutil.rmtree(path)
    except RecursionError:
        done = subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", str(path)],
            capture_output=True,
            text=True,
            timeout=RM_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise OSError(f"rm could not remove {path}: {done.stderr.strip()[:300]}") from None
