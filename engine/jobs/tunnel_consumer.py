"""The consumer's side of tunnels (see tunnel_provider.py): :func:`open_tunnel` (a stream to the
provider, its signed header accepted or the provider's refusal as an EngineError) and
:class:`ConsumerTunnels`, the daemon's ``job forward`` listeners and ``job shell`` relays.

``job forward`` asks the daemon to listen on 127.0.0.1:LOCAL and forward each connection over
its own stream (the CLI only waits); ``job shell`` gets a one-shot Unix socket in the node's
private socket folder whose bytes the daemon relays, unchanged, to the stream (the shell
framing runs end to end between the CLI and the provider). Separate from the provider's side
(tunnel_provider.py): a node runs one or the other for a given job, and they share only the
wire format (tunnel_frames.py) and the relay (tunnel_relay.py).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from engine import api
from engine.context import NodeContext
from engine.domain import wire
from engine.domain.safe_text import safe
from engine.domain.tunnel_frames import (
    ANSWER_S,
    HEADER_S,
    JOB_CONNECT_S,
    MAX_HEADER_BYTES,
    SHELL_IDLE_S,
    STREAMS_PER_JOB,
    TUNNEL_PROTOCOL,
    TunnelError,
    TunnelOpen,
    decode_answer,
    seal,
)
from engine.errors import EngineError
from engine.identity import Identity
from engine.jobs.tunnel_relay import StreamPipe, TrioPipe, relay, reset

if TYPE_CHECKING:
    from engine.ports import NetworkPort


# One logger for the tunnels, whichever of their modules writes the line.
log = logging.getLogger("nunet.jobs.tunnel")

FORWARDS_TOTAL = 64  # `job forward` listeners one consumer node keeps
SHELL_ACCEPT_S = 30.0  # for the CLI to connect to its shell socket


async def open_tunnel(
    network: NetworkPort, identity: Identity, provider: str, request: TunnelOpen
) -> Any:
    """A tunnel stream to ``provider``, its header accepted; EngineError with the provider's
    reason when refused."""
    service = network.require_service("job tunnels")
    try:
        with trio.fail_after(HEADER_S):
            stream = await service.open_stream(provider, TUNNEL_PROTOCOL)
    except trio.TooSlowError:
        raise EngineError("unreachable", f"the provider did not answer in {HEADER_S:g} s") from None
    except Exception as exc:  # py-libp2p's dial and negotiation errors, of many types
        raise EngineError("unreachable", f"cannot reach the provider: {safe(exc)[:300]}") from None
    try:
        with trio.fail_after(ANSWER_S):
            await stream.write(seal(identity, request))
            data = await wire.read_frame(stream, MAX_HEADER_BYTES)
        if data is None:
            raise EngineError("tunnel", "the provider closed the tunnel without answering")
        answer = decode_answer(data, provider)
    except BaseException as exc:
        await reset(stream)
        if isinstance(exc, trio.TooSlowError):
            raise EngineError(
                "unreachable",
                f"the provider did not answer the tunnel request in {ANSWER_S:g} s (it has "
                f"{JOB_CONNECT_S:g} s to reach the job's port)",
            ) from None
        if isinstance(exc, TunnelError | wire.WireError):
            raise EngineError("tunnel", f"bad answer from the provider: {exc}") from None
        raise
    if not answer.ok:
        await StreamPipe(stream).send_eof()
        raise EngineError("refused", f"the provider refused the tunnel: {answer.reason}")
    return stream


@dataclass
class Forward:
    info: api.TunnelForward
    scope: trio.CancelScope
    connections: int = 0
    lease_s: float = 0.0
    renewed: float = field(default_factory=time.monotonic)


class ConsumerTunnels:
    """``job forward`` listeners and ``job shell`` relays of this consumer node."""

    def __init__(self, ctx: NodeContext, network: Callable[[], NetworkPort]) -> None:
        self.ctx = ctx
        self._network = network
        self.idle_s = ctx.settings.jobs.tunnel_idle_s
        self._forwards: dict[str, Forward] = {}
        self._nursery: trio.Nursery | None = None

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def _job(self, job_id: str) -> api.JobInfo:
        job = self.ctx.store.get_job(job_id.strip())
        if job is None or job.role != "consumer":
            raise EngineError("not_found", f"no job {job_id!r} of yours; `nunet-tui job list`")
        if job.state in api.TERMINAL_STATES:
            raise EngineError("not_running", f"job {job.job_id} has ended ({job.state})")
        return job

    def _path(self, provider: str, stream: Any) -> str:
        """ "direct" or "via relay <short id>": the user is told which (issue 24)."""
        with contextlib.suppress(EngineError):
            return self._network().require_service("job tunnels").path(provider, stream)
        return ""

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._nursery is None:
            raise EngineError("no_network", "job tunnels need the running node (a daemon)")
        self._nursery.start_soon(fn, *args)

    # --- job forward -----------------------------------------------------------------------

    async def forward(self, command: api.JobForward) -> api.TunnelForward:
        job = self._job(command.job_id)
        ports = job.spec.ports
        if command.remote_port not in ports:
            shown = ", ".join(str(port) for port in ports) or "none"
            raise EngineError(
                "invalid",
                f"job {job.job_id} declared no port {command.remote_port} (its ports: {shown}); "
                "declare it in the job's spec: ports = [...]",
            )
        if len(self._forwards) >= FORWARDS_TOTAL:
            raise EngineError("busy", f"{FORWARDS_TOTAL} forwards are open: close one first")
        # One stream now, closed at once: a refusal (not running, port, owner) is said here,
        # not later to a browser that only sees its connection dropped.
        probe = await open_tunnel(
            self._network(),
            self.ctx.identity,
            job.provider,
            TunnelOpen(job_id=job.job_id, kind="tcp", port=command.remote_port),
        )
        path = self._path(job.provider, probe)
        await StreamPipe(probe).send_eof()
        await reset(probe)
        try:
            listeners = await trio.open_tcp_listeners(command.local_port, host="127.0.0.1")
        except OSError as exc:
            raise EngineError(
                "port_in_use",
                f"cannot listen on 127.0.0.1:{command.local_port} ({exc.strerror or exc}): give "
                "another LOCAL port, or none for a free one",
            ) from None
        local = listeners[0].socket.getsockname()[1]
        info = api.TunnelForward(
            forward_id=secrets.token_hex(6),
            job_id=job.job_id,
            local_port=local,
            remote_port=command.remote_port,
            url=f"http://127.0.0.1:{local}/",
            path=path,
        )
        lease = command.lease_s if math.isfinite(command.lease_s) else 0.0
        lease = max(0.0, min(lease, 3600.0))
        forward = Forward(info, trio.CancelScope(), lease_s=lease)
        self._forwards[info.forward_id] = forward
        try:
            self._spawn(self._serve_forward, forward, listeners, job.provider)
        except EngineError:
            self._forwards.pop(info.forward_id, None)
            for listener in listeners:
                await listener.aclose()
            raise
        log.info(
            "forwarding 127.0.0.1:%d to job %s port %d (%s)",
            local,
            job.job_id,
            command.remote_port,
            path,
        )
        return info

    async def _serve_forward(
        self, forward: Forward, listeners: list[trio.SocketListener], provider: str
    ) -> None:
        info = forward.info
        try:
            with forward.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._watch_job, forward, nursery.cancel_scope)
                    for listener in listeners:
                        nursery.start_soon(
                            trio.serve_listeners,
                            lambda conn: self._one_connection(forward, conn, provider),
                            [listener],
                        )
        finally:
            self._forwards.pop(info.forward_id, None)
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    with contextlib.suppress(Exception):
                        await listener.aclose()
            log.info("forward 127.0.0.1:%d of job %s closed", info.local_port, info.job_id)

    async def _watch_job(self, forward: Forward, scope: trio.CancelScope) -> None:
        """A forward lasts as long as its job, and its lease if it has one: then its
        listener closes."""
        while True:
            job = self.ctx.store.get_job(forward.info.job_id)
            if job is None or job.state in api.TERMINAL_STATES:
                scope.cancel()
                return
            if forward.lease_s and time.monotonic() - forward.renewed > forward.lease_s:
                log.info("forward of job %s: its lease ran out", forward.info.job_id)
                scope.cancel()
                return
            await trio.sleep(0.5)

    async def _one_connection(
        self, forward: Forward, conn: trio.SocketStream, provider: str
    ) -> None:
        local = TrioPipe(conn)
        if forward.connections >= STREAMS_PER_JOB:
            await local.close()  # the provider would refuse it anyway
            return
        forward.connections += 1
        try:
            stream = await open_tunnel(
                self._network(),
                self.ctx.identity,
                provider,
                TunnelOpen(job_id=forward.info.job_id, kind="tcp", port=forward.info.remote_port),
            )
        except (EngineError, trio.TooSlowError, OSError, Exception) as exc:
            message = exc.message if isinstance(exc, EngineError) else str(exc)
            log.info("forward of job %s: %s", forward.info.job_id, message)
            forward.info = msgspec.structs.replace(forward.info, last_error=message[:500])
            forward.connections -= 1
            await local.close()
            return
        forward.info = msgspec.structs.replace(
            forward.info, opened=forward.info.opened + 1, path=self._path(provider, stream)
        )
        try:
            await relay(local, StreamPipe(stream, self.idle_s), idle_s=self.idle_s)
        finally:
            forward.connections -= 1
            with trio.CancelScope(shield=True):
                await local.close()
                await reset(stream)

    async def close_forward(self, command: api.JobForwardClose) -> api.Done:
        forward = self._forwards.get(command.forward_id)
        if forward is None:
            raise EngineError("not_found", f"no forward {command.forward_id!r} is open")
        forward.scope.cancel()
        with trio.move_on_after(5):
            while command.forward_id in self._forwards:
                await trio.sleep(0.02)
        return api.Done(message=f"forward 127.0.0.1:{forward.info.local_port} closed")

    async def list_forwards(self, command: api.ListForwards) -> api.ForwardList:
        now = time.monotonic()
        for forward_id in command.renew[:FORWARDS_TOTAL]:
            if (forward := self._forwards.get(forward_id)) is not None:
                forward.renewed = now
        forwards = tuple(
            msgspec.structs.replace(f.info, connections=f.connections)
            for f in self._forwards.values()
            if not command.job_id or f.info.job_id == command.job_id
        )
        return api.ForwardList(forwards=forwards)

    # --- job shell -------------------------------------------------------------------------

    async def shell(self, command: api.JobShell) -> api.ShellSession:
        job = self._job(command.job_id)
        fields = {
            "job_id": job.job_id,
            "kind": "shell",
            "command": list(command.command),
            "rows": command.rows,
            "cols": command.cols,
            "term": command.term,
        }
        try:  # convert, unlike the constructor, checks the bounds the provider will check
            request = msgspec.convert(fields, TunnelOpen)
        except msgspec.ValidationError as exc:
            raise EngineError("invalid", f"job shell: {exc}") from None
        stream = await open_tunnel(self._network(), self.ctx.identity, job.provider, request)
        try:
            path, listener = _shell_socket(self.ctx.paths.control_socket.parent)
            self._spawn(self._relay_shell, stream, listener, path)
        except BaseException:
            await reset(stream)
            raise
        route = self._path(job.provider, stream)
        return api.ShellSession(job_id=job.job_id, socket=str(path), path=route)

    async def _relay_shell(self, stream: Any, listener: trio.socket.SocketType, path: Path) -> None:
        try:
            with trio.move_on_after(SHELL_ACCEPT_S) as scope:
                conn, _ = await listener.accept()
            if scope.cancelled_caught:
                log.info("nobody connected to the shell socket in %g s", SHELL_ACCEPT_S)
                return
        finally:
            listener.close()
            with contextlib.suppress(OSError):
                path.unlink()
        local = TrioPipe(trio.SocketStream(conn))
        try:
            await relay(local, StreamPipe(stream, SHELL_IDLE_S), idle_s=SHELL_IDLE_S)
        finally:
            with trio.CancelScope(shield=True):
                await local.close()
                await reset(stream)


def _shell_socket(folder: Path) -> tuple[Path, trio.socket.SocketType]:
    """A one-shot Unix socket in the node's private socket folder (0700, checked by
    Paths.ensure): only our own user can reach the shell through it. Its name is shorter
    than the control socket's, so it fits wherever that one does."""
    path = folder / f"sh-{secrets.token_hex(4)}"
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        raw.bind(str(path))
        os.chmod(path, 0o600)
        raw.listen(1)
    except BaseException:
        raw.close()
        raise
    sock = trio.socket.from_stdlib_socket(raw)
    return path, sock
