"""Tunnels into running jobs (issue 13; engine/jobs/tunnel_provider.py): port forwards and
shells."""

from __future__ import annotations

from engine.api.base import Command, Record


class TunnelForward(Record, frozen=True):
    """A ``job forward``: 127.0.0.1:local_port on this node reaches the job's remote_port."""

    forward_id: str
    job_id: str
    local_port: int
    remote_port: int
    url: str
    connections: int = 0  # open now
    opened: int = 0  # connections forwarded so far
    last_error: str = ""  # the provider's last refusal, if any
    # How its streams reach the provider (issue 24): "direct" or "via relay <short id>",
    # of the last one opened; a relay's circuit ends after a time or data limit, and each
    # new connection to the forward opens a new stream (a new circuit when the last ended).
    path: str = ""


class ForwardList(Record, frozen=True):
    forwards: tuple[TunnelForward, ...] = ()


class ShellSession(Record, frozen=True):
    """A shell the provider accepted: the CLI connects to ``socket`` (one use, ours only)."""

    job_id: str
    socket: str
    path: str = ""  # "direct" or "via relay <short id>" (issue 24): a relay ends it in time


class JobForward(Command, tag="job_forward", frozen=True):
    reply = TunnelForward
    job_id: str
    remote_port: int
    local_port: int = 0  # 0: a free port
    # > 0: the forward closes unless renewed (ListForwards.renew) this often; the CLI's
    # lease, so a `job forward` killed with -9 leaves nothing listening. 0: until closed.
    lease_s: float = 0.0


class JobForwardClose(Command, tag="job_forward_close", frozen=True):
    forward_id: str


class ListForwards(Command, tag="job_forwards", frozen=True):
    reply = ForwardList
    job_id: str = ""  # "": every job's
    renew: tuple[str, ...] = ()  # forward ids whose lease starts again


class JobShell(Command, tag="job_shell", frozen=True):
    reply = ShellSession
    job_id: str
    command: tuple[str, ...] = ()  # (): the job's default shell
    rows: int = 24
    cols: int = 80
    term: str = "xterm"
