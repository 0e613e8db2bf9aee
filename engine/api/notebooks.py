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

Everything here is pure (specs, records, URLs over the API's job records): the CLI
(nunet_tui/cli/notebook.py), the Notebooks screen and the consumer's jobs room build on the
existing job and tunnel commands, so a notebook needs no protocol of its own beyond the
deletion (the provider's side: engine/jobs/notebooks.py). Imported by path
(``from engine.api import notebooks``), beside the API's records.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterable
from typing import Any

import msgspec

from engine.api.jobs import JobInfo
from engine.api.tunnels import TunnelForward
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


def is_notebook(job: JobInfo) -> bool:
    spec = job.spec
    return spec.kind == "service" and bool(spec.env.get(TOKEN_ENV)) and bool(spec.ports)


def token_of(job: JobInfo) -> str:
    return job.spec.env.get(TOKEN_ENV, "")


def port_of(job: JobInfo) -> int:
    env, ports = job.spec.env, job.spec.ports
    with contextlib.suppress(TypeError, ValueError):
        declared = int(env.get(PORT_ENV, 0))
        if declared in ports:
            return declared
    return int(ports[0]) if ports else 0


def lab_url(local_url: str, token: str) -> str:
    """The URL the owner opens: JupyterLab on the forwarded port, logged in by its token."""
    return f"{local_url.rstrip('/')}/lab?token={token}"


def forward_of(job: JobInfo, forwards: Iterable[TunnelForward]) -> TunnelForward | None:
    port = port_of(job)
    for forward in forwards:
        if forward.job_id == job.job_id and forward.remote_port == port:
            return forward
    return None


def notebooks(jobs: Iterable[JobInfo], forwards: Iterable[TunnelForward] = ()) -> list[Notebook]:
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


def own_notebook(job: JobInfo) -> JobInfo:
    """``job`` if it is one of this node's notebooks; else the one-line reason."""
    if job.role != "consumer":
        raise EngineError("invalid", f"job {job.job_id} is not yours: notebooks are their owner's")
    if not is_notebook(job):
        raise EngineError(
            "invalid", f"job {job.job_id} is not a notebook (`nunet-tui job show {job.job_id}`)"
        )
    return job
