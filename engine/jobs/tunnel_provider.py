"""Tunnels into a running job (``/nunet/tunnel/1.0.0``): one TCP connection or one terminal
session per libp2p stream, for the job's owner only.

The stream starts with a signed, length-prefixed ``TunnelOpen`` from the consumer (job id,
``tcp`` + a port the job declared, or ``shell`` + a command and a terminal size); the provider
answers with a signed ``TunnelAnswer`` (ok, or a refusal with its reason), then the stream
carries raw bytes both ways (tcp) or shell frames (``SHELL_*``: data, resize, stdin closed,
exit status). Only the consumer whose signed offer created the job may open one: the stream's
remote peer (authenticated by Noise) is compared with the stored job's consumer; every other
peer is refused with the same reason as for a job that does not exist, so nothing about other
people's jobs is learnt.

On the provider the job keeps no network (Docker: ``network_mode: none``): the executor
reaches the service on the container's own loopback (``docker exec`` of a tiny forwarder whose
stdin/stdout are bridged to the stream) or, for the process executor (trusted networks only),
connects directly to the loopback listener found to be the job's own. Bounded: tunnels per
job (``STREAMS_PER_JOB``) and per peer, a deadline for the header, an idle timeout; the
bytes are counted into the job's metering (``net_rx_bytes``: into the job, ``net_tx_bytes``:
out of it). Ending the job closes them all.

On the consumer the daemon opens the streams (``job forward``, ``job shell``).

This module is the provider's side (:class:`TunnelServer`); the header and shell frames are in
tunnel_frames.py, the relay and the Pipes an executor hands back in tunnel_relay.py, the
consumer's side in tunnel_consumer.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from engine.context import NodeContext
from engine.domain import wire
from engine.domain.ratelimit import ScopedStreamLimiter, remote_host
from engine.domain.safe_text import safe
from engine.domain.tunnel_frames import (
    CHUNK,
    HEADER_S,
    MAX_HEADER_BYTES,
    SHELL_DATA,
    SHELL_EOF,
    SHELL_IDLE_S,
    SHELL_RESIZE,
    STREAMS_PER_JOB,
    ShellFrames,
    TunnelAnswer,
    TunnelError,
    TunnelOpen,
    decode_open,
    exit_frame,
    seal,
    shell_frame,
)
from engine.errors import EngineError
from engine.jobs.tunnel_relay import (
    Activity,
    Pipe,
    ShellPipe,
    StreamPipe,
    TunnelExecutor,
    idle_watch,
    relay,
    reset,
)

# One logger for the tunnels, whichever of their modules writes the line.
log = logging.getLogger("nunet.jobs.tunnel")

STREAMS_PER_PEER = 16  # tunnel streams one peer holds here at once (all its jobs)
STREAMS_PER_ADDRESS = 32  # ... and strangers per address and subnet (identities are free)
STREAMS_PER_SUBNET = 64
STREAMS_TOTAL = 128
STREAMS_RESERVED = 32  # for the consumers of jobs here


@dataclass
class _Open:
    scope: trio.CancelScope
    peer: str
    kind: str


class TunnelServer:
    """Serves ``/nunet/tunnel/1.0.0`` for the provider's running jobs."""

    def __init__(self, ctx: NodeContext, running: Callable[[str], tuple[Any, Any] | None]) -> None:
        """``running``: the executor and run of a job running here now (None otherwise)."""
        self.ctx = ctx
        self._running = running
        self.idle_s = ctx.settings.jobs.tunnel_idle_s
        self.shell_idle_s = SHELL_IDLE_S
        self._streams = ScopedStreamLimiter(
            STREAMS_PER_PEER,
            STREAMS_PER_ADDRESS,
            STREAMS_PER_SUBNET,
            STREAMS_TOTAL,
            STREAMS_RESERVED,
        )
        self._open: dict[str, list[_Open]] = {}
        self._bytes: dict[str, list[int]] = {}  # job id -> [into the job, out of it]
        self.refused = 0  # tunnels refused (any reason), for tests and status

    def open_count(self, job_id: str) -> int:
        return len(self._open.get(job_id, ()))

    def take_traffic(self, job_id: str) -> tuple[int, int] | None:
        """Bytes into and out of the job through its tunnels (None: it never had one), once:
        for its metering when it ends."""
        counted = self._bytes.pop(job_id, None)
        return (counted[0], counted[1]) if counted is not None else None

    def close_job(self, job_id: str) -> int:
        """Close every tunnel of ``job_id`` (its job ended); returns how many there were."""
        tunnels = self._open.pop(job_id, [])
        for tunnel in tunnels:
            tunnel.scope.cancel()
        return len(tunnels)

    async def handle(self, stream: Any) -> None:
        from engine.jobs import protocol as p

        peer = p.remote_peer(stream)
        lease = self._streams.acquire(peer, remote_host(stream), lambda: self._deals_with(peer))
        if lease is None:
            self.refused += 1
            log.debug("tunnel stream from %s refused: over its peer's, address's or subnet's", peer)
            await reset(stream)
            return
        try:
            await self._serve(stream, peer)
        except Exception as exc:  # a peer's broken stream never takes the provider down
            log.info("tunnel from %s ended: %s", peer, exc)
            await reset(stream)
        finally:
            self._streams.release(lease)

    def _deals_with(self, peer: str) -> bool:
        """A peer we have a job with: asked only once a stranger's caps refuse its stream."""
        return peer in self.ctx.store.job_peers()

    async def _answer(self, stream: Any, ok: bool, reason: str = "") -> None:
        if not ok:
            self.refused += 1
        answer = TunnelAnswer(ok=ok, reason=reason[:1000])
        with trio.fail_after(HEADER_S):
            await stream.write(seal(self.ctx.identity, answer))

    async def _refuse(self, stream: Any, peer: str, reason: str) -> None:
        from engine.jobs import protocol as p

        log.info("tunnel from %s refused: %s", peer, safe(reason))
        await self._answer(stream, False, reason)
        await p.finish(stream, 2.0)

    async def _serve(self, stream: Any, peer: str) -> None:
        try:
            with trio.fail_after(HEADER_S):
                data = await wire.read_frame(stream, MAX_HEADER_BYTES + 1024)
        except (trio.TooSlowError, wire.WireError):
            await reset(stream)
            return
        if data is None:
            await reset(stream)
            return
        try:
            request = decode_open(data, peer)
        except TunnelError as exc:
            await self._refuse(stream, peer, str(exc)[:300])
            return
        job_id = request.job_id
        why, executor, run = self._refusal(request, peer)
        if why:
            await self._refuse(stream, peer, why)
            return
        # The slot is taken before anything slow: a flood cannot slip past the cap.
        tunnel = _Open(trio.CancelScope(), peer, request.kind)
        self._open.setdefault(job_id, []).append(tunnel)
        try:
            await self._tunnel(stream, peer, request, executor, run, tunnel)
        finally:
            held = self._open.get(job_id)
            if held is not None and tunnel in held:
                held.remove(tunnel)
                if not held:
                    del self._open[job_id]

    def _refusal(self, request: TunnelOpen, peer: str) -> tuple[str, Any, Any]:
        """Why ``peer`` may not open this tunnel ("" when it may), with the job's run."""
        job = self.ctx.store.get_job(request.job_id)
        # A stranger learns nothing about other people's jobs: the same words as for none.
        if job is None or job.role != "provider" or job.consumer != peer:
            return "no such job of yours", None, None
        if job.state != "running":
            return f"job {job.job_id} is {job.state}, not running", None, None
        running = self._running(job.job_id)
        if running is None:
            return f"job {job.job_id} is not running here yet; try again", None, None
        executor, run = running
        if not isinstance(executor, TunnelExecutor):
            return f"the {executor.name} executor offers no tunnels", None, None
        if request.kind == "tcp":
            declared = tuple(run.spec.ports)
            if request.port not in declared:
                shown = ", ".join(str(port) for port in declared) or "none"
                return (
                    f"port {request.port} is not one the job declared (its ports: {shown})",
                    None,
                    None,
                )
        elif not self.ctx.settings.jobs.allow_shell:
            return "shells are turned off on this provider (jobs.allow_shell)", None, None
        elif executor.name == "process" and not self.ctx.settings.jobs.allow_process_shell:
            return (
                "shells into process jobs are off on this provider (jobs.allow_process_shell)",
                None,
                None,
            )
        if self.open_count(job.job_id) >= STREAMS_PER_JOB:
            return (
                f"job {job.job_id} has {STREAMS_PER_JOB} tunnels open already: close one first",
                None,
                None,
            )
        return "", executor, run

    def _count(self, job_id: str, into: int = 0, out: int = 0) -> None:
        counted = self._bytes.setdefault(job_id, [0, 0])
        counted[0] += into
        counted[1] += out

    async def _tunnel(
        self,
        stream: Any,
        peer: str,
        request: TunnelOpen,
        executor: TunnelExecutor,
        run: Any,
        tunnel: _Open,
    ) -> None:
        job_id = request.job_id
        why = "closed"
        with tunnel.scope:  # cancelled when the job ends (close_job)
            try:
                if request.kind == "tcp":
                    pipe: Pipe = await executor.open_tunnel(run, request.port)
                else:
                    pipe = await executor.exec_shell(
                        run, tuple(request.command), request.rows, request.cols, request.term
                    )
            except EngineError as exc:
                await self._refuse(stream, peer, exc.message)
                return
            started = time.monotonic()
            try:
                self._count(job_id)
                await self._answer(stream, True)
                if request.kind == "shell":
                    self._note(
                        executor, run, f"shell opened by {peer} ({_program(request.command)})"
                    )
                if request.kind == "tcp":
                    why = await relay(
                        StreamPipe(stream, self.idle_s),
                        pipe,
                        idle_s=self.idle_s,
                        on_up=lambda n: self._count(job_id, into=n),
                        on_down=lambda n: self._count(job_id, out=n),
                    )
                else:
                    assert isinstance(pipe, ShellPipe)
                    why = await self._shell(stream, pipe, job_id)
            finally:
                with trio.CancelScope(shield=True):
                    await pipe.close()
                    if tunnel.scope.cancel_called:
                        why = "the job ended"
                    if request.kind == "shell":
                        took = time.monotonic() - started
                        self._note(
                            executor, run, f"shell of {peer} closed after {took:.0f} s ({why})"
                        )
                    else:  # a line for "idle" (a client that stopped reading, or talking)
                        log.log(
                            logging.INFO if why == "idle" else logging.DEBUG,
                            "tunnel of %s to port %d of job %s ended after %.0f s (%s)",
                            peer,
                            request.port,
                            job_id,
                            time.monotonic() - started,
                            why,
                        )
                    if why == "closed":
                        from engine.jobs import protocol as p

                        await p.finish(stream, 2.0)
                    else:
                        await reset(stream)

    async def _shell(self, stream: Any, pipe: ShellPipe, job_id: str) -> str:
        """Shell frames from the consumer to the session; its output back as frames, then its
        exit status."""
        remote = StreamPipe(stream, self.shell_idle_s)
        seen = Activity()
        ended = ["closed"]

        async def up(scope: trio.CancelScope) -> None:
            frames = ShellFrames()
            while True:
                data = await remote.receive(CHUNK)
                if not data:
                    return
                seen.at = trio.current_time()
                for kind, payload in frames.feed(data):
                    if kind == SHELL_DATA:
                        self._count(job_id, into=len(payload))
                        await pipe.send(payload)
                    elif kind == SHELL_RESIZE and len(payload) == 4:
                        rows, cols = struct.unpack(">HH", payload)
                        if rows and cols:
                            await pipe.resize(rows, cols)
                    elif kind == SHELL_EOF:
                        await pipe.send_eof()

        async def down() -> None:
            while data := await pipe.receive(CHUNK):
                seen.at = trio.current_time()
                self._count(job_id, out=len(data))
                await remote.send(shell_frame(SHELL_DATA, data))
            code = await pipe.exit_code()
            await remote.send(exit_frame(code))

        async def guarded_up(scope: trio.CancelScope) -> None:
            try:
                await up(scope)
            except Exception as exc:  # bad frames or a broken stream: the session ends
                log.debug("shell input: %s", exc)
                ended[0] = "broken"
                scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(idle_watch, seen, self.shell_idle_s, nursery.cancel_scope, ended)
            nursery.start_soon(guarded_up, nursery.cancel_scope)
            await down()
            nursery.cancel_scope.cancel()
        return ended[0]

    def _note(self, executor: Any, run: Any, text: str) -> None:
        """A line in the job's own log (the consumer sees it too) and in the provider's."""
        log.info("job %s: %s", run.job_id, text)
        with contextlib.suppress(Exception):  # a run that just ended has a closed log
            executor.state(run).logs.append("system", text)


def _program(command: tuple[str, ...]) -> str:
    return f"command {safe(os.path.basename(command[0]))[:60]}" if command else "default shell"
