"""A job's ports on its detail screen: forwarded to 127.0.0.1 with ``t``, a shell with ``e``.

``t`` asks the node to forward every declared port that is not forwarded yet (the node
listens on 127.0.0.1, engine/jobs/tunnel_consumer.py; the forwards last as long as the job), lists
their local URLs in the job's facts and copies the first one to the clipboard. ``e`` suspends
the app, runs the job's shell in the real terminal (engine's ``JobShell`` and the CLI's shell
client) and comes back when it exits, saying its exit status.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from typing import Any

from textual.content import Content

from engine.api import (
    ForwardList,
    JobForward,
    JobInfo,
    JobShell,
    ListForwards,
    ShellSession,
    TunnelForward,
)
from engine.errors import EngineError


def declared_ports(job: JobInfo) -> tuple[int, ...]:
    return job.spec.ports


def can_forward(job: JobInfo | None) -> bool:
    return (
        job is not None
        and job.role == "consumer"
        and job.state == "running"
        and bool(declared_ports(job))
    )


def can_shell(job: JobInfo | None) -> bool:
    return job is not None and job.role == "consumer" and job.state == "running"


def ports_row(job: JobInfo, forwards: Sequence[TunnelForward]) -> tuple[str, Content] | None:
    """The "Ports" fact: each declared port, with its local URL once forwarded."""
    ports = declared_ports(job)
    if not ports:
        return None
    by_port = {f.remote_port: f for f in forwards if f.job_id == job.job_id}
    parts: list[Content | str | tuple[str, str]] = []
    for index, port in enumerate(ports):
        if index:
            parts.append(" · ")
        forward = by_port.get(port)
        if forward is not None:
            parts += [f"{port} → ", (forward.url, "bold $text-accent")]
        else:
            parts.append(f"{port}")
    if job.role == "consumer" and job.state == "running":
        if len(by_port) < len(ports):
            parts += [" · ", ("t", "bold $text-accent"), " to forward"]
        parts += [" · ", ("e", "bold $text-accent"), " for a shell"]
    return ("Ports", Content.assemble(*parts))


async def forward_all(client: Any, job: JobInfo) -> tuple[TunnelForward, ...]:
    """Forward every declared port of ``job`` not forwarded yet; the job's forwards."""
    listed: ForwardList = await client.call(ListForwards(job_id=job.job_id))
    have = {f.remote_port for f in listed.forwards}
    for port in declared_ports(job):
        if port not in have:
            await client.call(JobForward(job_id=job.job_id, remote_port=port))
    listed = await client.call(ListForwards(job_id=job.job_id))
    return listed.forwards


async def open_session(client: Any, job: JobInfo, rows: int, cols: int) -> ShellSession:
    return await client.call(JobShell(job_id=job.job_id, rows=rows, cols=cols))


def run_in_terminal(session: ShellSession) -> int | None:
    """The shell in the real terminal (the app suspended): raw mode, resize, exit status."""
    from nunet_tui.shell_relay import raw_terminal, run_shell

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(session.socket)
        with raw_terminal(sys.stdin.fileno()):
            return run_shell(sock, sys.stdin.fileno(), sys.stdout.fileno())
    except OSError as exc:
        raise EngineError(
            "shell", f"the shell's connection failed: {exc.strerror or exc}"
        ) from None
    finally:
        sock.close()
