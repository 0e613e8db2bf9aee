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

On the consumer the daemon opens the streams: ``job forward`` asks it to listen on
127.0.0.1:LOCAL and forward each connection over its own stream (the CLI only waits), and
``job shell`` gets a one-shot Unix socket in the node's private socket folder whose bytes the
daemon relays, unchanged, to the stream (the shell framing runs end to end between the CLI and
the provider).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, runtime_checkable

import msgspec
import trio

from engine import api
from engine.context import NodeContext
from engine.errors import EngineError
from engine.identity import Identity
from engine.jobs.executors.base import JOB_CONNECT_S
from engine.network import wire
from engine.network.ratelimit import ScopedStreamLimiter, remote_host
from engine.network.yamux_credit import wait_for_credit_up_to
from engine.safe_paths import JobId
from engine.safe_text import safe

if TYPE_CHECKING:
    from engine.ports import NetworkPort

log = logging.getLogger("nunet.jobs.tunnel")

TUNNEL_PROTOCOL = "/nunet/tunnel/1.0.0"
KIND = "tunnel"
MAX_HEADER_BYTES = 16 * 1024  # a TunnelOpen with its command at the limits below
HEADER_S = 10.0  # for a stream to open, for its header to arrive, for an answer to be written
# For the provider's answer to a tunnel request: it answers once it reached the job's port,
# which takes its executor up to JOB_CONNECT_S (a busy Docker engine) - so the consumer waits
# longer than that. The command line waits longer still (nunet_tui/cli/job_tunnel.py).
ANSWER_S = JOB_CONNECT_S + 5.0
OPEN_S = HEADER_S + ANSWER_S  # a whole open_tunnel, at most
STREAMS_PER_JOB = 8  # tunnels open at once into one job
STREAMS_PER_PEER = 16  # tunnel streams one peer holds here at once (all its jobs)
STREAMS_PER_ADDRESS = 32  # ... and strangers per address and subnet (identities are free)
STREAMS_PER_SUBNET = 64
STREAMS_TOTAL = 128
STREAMS_RESERVED = 32  # for the consumers of jobs here
IDLE_S = 600.0  # a TCP tunnel with no byte either way this long is closed ([jobs] tunnel_idle_s)
SHELL_IDLE_S = 3600.0  # a shell left at its prompt
CREDIT_GRACE_S = 5.0  # a write waits for window credit this much past the idle timeout
CHUNK = 64 * 1024
MAX_COMMAND_ARGS = 64
MAX_ARG_CHARS = 4096
FORWARDS_TOTAL = 64  # `job forward` listeners one consumer node keeps
SHELL_ACCEPT_S = 30.0  # for the CLI to connect to its shell socket

# Shell frames (after the answer): a type byte, a 4-byte big-endian length, the payload.
SHELL_DATA = 0  # both ways: terminal bytes
SHELL_RESIZE = 1  # consumer -> provider: rows, cols (2 x u16)
SHELL_EOF = 2  # consumer -> provider: stdin closed
SHELL_EXIT = 3  # provider -> consumer: the exit status (i32; -1: unknown), then the end
SHELL_FRAME_MAX = CHUNK
_HEAD = struct.Struct(">BI")

Arg = Annotated[str, msgspec.Meta(max_length=MAX_ARG_CHARS)]
TermSize = Annotated[int, msgspec.Meta(ge=1, le=10_000)]


class TunnelOpen(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    v: int = 1
    job_id: JobId
    kind: Literal["tcp", "shell"]
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 0  # tcp
    command: Annotated[tuple[Arg, ...], msgspec.Meta(max_length=MAX_COMMAND_ARGS)] = ()  # shell
    rows: TermSize = 24
    cols: TermSize = 80
    term: Annotated[str, msgspec.Meta(max_length=64, pattern=r"^[A-Za-z0-9._+-]*$")] = "xterm"


class TunnelAnswer(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    v: int = 1
    ok: bool
    reason: Annotated[str, msgspec.Meta(max_length=1000)] = ""


_encoder = msgspec.msgpack.Encoder()
_open_decoder = msgspec.msgpack.Decoder(TunnelOpen)
_answer_decoder = msgspec.msgpack.Decoder(TunnelAnswer)


class TunnelError(Exception):
    """A tunnel header or answer we cannot accept."""


def seal(identity: Identity, message: TunnelOpen | TunnelAnswer) -> bytes:
    return wire.frame(wire.seal_payload(identity, KIND, _encoder.encode(message)))


def _open_envelope(data: bytes, signer: str) -> bytes:
    try:
        envelope = wire.open_payload(data, MAX_HEADER_BYTES)
    except wire.WireError as exc:
        raise TunnelError(str(exc)) from exc
    if envelope.kind != KIND:
        raise TunnelError(f"expected a tunnel header, got {envelope.kind[:40]!r}")
    if envelope.signer != signer:
        raise TunnelError("header signed by another peer than the one at the other end")
    return envelope.payload


def decode_open(data: bytes, signer: str) -> TunnelOpen:
    try:
        message = _open_decoder.decode(_open_envelope(data, signer))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TunnelError(f"bad tunnel header: {exc}") from exc
    if message.v != 1:
        raise TunnelError(f"unsupported tunnel version {message.v}")
    return message


def decode_answer(data: bytes, signer: str) -> TunnelAnswer:
    try:
        return _answer_decoder.decode(_open_envelope(data, signer))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TunnelError(f"bad tunnel answer: {exc}") from exc


def shell_frame(kind: int, payload: bytes = b"") -> bytes:
    return _HEAD.pack(kind, len(payload)) + payload


def resize_frame(rows: int, cols: int) -> bytes:
    return shell_frame(SHELL_RESIZE, struct.pack(">HH", min(rows, 65535), min(cols, 65535)))


def exit_frame(code: int | None) -> bytes:
    return shell_frame(SHELL_EXIT, struct.pack(">i", -1 if code is None else code))


class ShellFrames:
    """Shell frames out of a byte stream (bounded: a frame over SHELL_FRAME_MAX is an error)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buffer += data
        frames = []
        while len(self._buffer) >= _HEAD.size:
            kind, size = _HEAD.unpack_from(self._buffer)
            if size > SHELL_FRAME_MAX or kind > SHELL_EXIT:
                raise TunnelError(f"bad shell frame (type {kind}, {size} bytes)")
            if len(self._buffer) < _HEAD.size + size:
                break
            frames.append((kind, bytes(self._buffer[_HEAD.size : _HEAD.size + size])))
            del self._buffer[: _HEAD.size + size]
        return frames


# --- byte pipes ------------------------------------------------------------------------------


class Pipe(Protocol):
    """A byte stream both ways: what the relays move bytes between."""

    async def receive(self, max_bytes: int) -> bytes: ...  # b"" at the end
    async def send(self, data: bytes) -> None: ...
    async def send_eof(self) -> None: ...
    async def close(self) -> None: ...


@runtime_checkable
class ShellPipe(Pipe, Protocol):
    async def resize(self, rows: int, cols: int) -> None: ...
    async def exit_code(self) -> int | None: ...


@runtime_checkable
class TunnelExecutor(Protocol):
    """What an executor offers for tunnels (docker.py, process.py)."""

    name: str

    async def open_tunnel(self, run: Any, port: int) -> Pipe: ...
    async def exec_shell(
        self, run: Any, command: tuple[str, ...], rows: int, cols: int, term: str
    ) -> ShellPipe: ...


_EOF_NAMES = ("StreamEOF", "EOFError", "IncompleteReadError", "MuxedStreamEOF")


class StreamPipe:
    """A libp2p stream as a Pipe (its EOF errors read as the end).

    ``idle_s``: the relay's idle timeout. A write waits that long for the peer's window credit
    (a local client that paused reading), where py-libp2p gave up after 5 s and reset the
    tunnel; the relay ends a tunnel idle that long itself, with its reason ("idle"). The
    write's own bound, a little later, is only a backstop: were both due at once, the write's
    error could end the tunnel first as "broken"."""

    def __init__(self, stream: Any, idle_s: float | None = None) -> None:
        self.stream = stream
        if idle_s is not None:
            wait_for_credit_up_to(stream, idle_s + CREDIT_GRACE_S)

    async def receive(self, max_bytes: int) -> bytes:
        try:
            return bytes(await self.stream.read(max_bytes))
        except Exception as exc:
            if type(exc).__name__ in _EOF_NAMES:
                return b""
            raise

    async def send(self, data: bytes) -> None:
        await self.stream.write(data)

    async def send_eof(self) -> None:
        with contextlib.suppress(Exception):
            await self.stream.close()

    async def close(self) -> None:
        await reset(self.stream)


class TrioPipe:
    """A trio stream (TCP or Unix socket) as a Pipe."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream

    async def receive(self, max_bytes: int) -> bytes:
        try:
            return bytes(await self.stream.receive_some(max_bytes))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return b""

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send_eof(self) -> None:
        if isinstance(self.stream, trio.abc.HalfCloseableStream):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await self.stream.send_eof()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.stream.aclose()


async def reset(stream: Any) -> None:
    with contextlib.suppress(Exception), trio.move_on_after(1.0):
        await stream.reset()


@dataclass
class Activity:
    """When a relay last moved a byte, and how many it moved each way."""

    at: float = field(default_factory=trio.current_time)
    up: int = 0  # a -> b
    down: int = 0  # b -> a


async def relay(
    a: Pipe,
    b: Pipe,
    *,
    idle_s: float,
    activity: Activity | None = None,
    on_up: Callable[[int], None] | None = None,
    on_down: Callable[[int], None] | None = None,
) -> str:
    """Bytes both ways until both ends have finished (each end's EOF is passed on), one
    breaks, or nothing moved for ``idle_s``; returns why it ended ("closed", "idle",
    "broken")."""
    seen = activity or Activity()
    ended = ["closed"]

    async def pump(src: Pipe, dst: Pipe, up: bool) -> None:
        while True:
            data = await src.receive(CHUNK)
            if not data:
                await dst.send_eof()
                return
            seen.at = trio.current_time()
            await dst.send(data)
            if up:
                seen.up += len(data)
                if on_up is not None:
                    on_up(len(data))
            else:
                seen.down += len(data)
                if on_down is not None:
                    on_down(len(data))

    async def guarded(src: Pipe, dst: Pipe, up: bool, scope: trio.CancelScope) -> None:
        try:
            await pump(src, dst, up)
        except Exception as exc:  # one end broke: the other has nothing left to talk to
            log.debug("tunnel relay: %s", exc)
            ended[0] = "broken"
            scope.cancel()

    with trio.CancelScope() as everything:
        async with trio.open_nursery() as outer:
            outer.start_soon(_idle_watch, seen, idle_s, everything, ended)
            async with trio.open_nursery() as pumps:
                pumps.start_soon(guarded, a, b, True, everything)
                pumps.start_soon(guarded, b, a, False, everything)
            outer.cancel_scope.cancel()  # both ends finished: stop the watchdog
    return ended[0]


async def _idle_watch(
    seen: Activity, idle_s: float, scope: trio.CancelScope, ended: list[str]
) -> None:
    while True:
        left = seen.at + idle_s - trio.current_time()
        if left <= 0:
            ended[0] = "idle"
            scope.cancel()
            return
        await trio.sleep(left)


# --- the provider's side ---------------------------------------------------------------------


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
            nursery.start_soon(_idle_watch, seen, self.shell_idle_s, nursery.cancel_scope, ended)
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


# --- the consumer's side ---------------------------------------------------------------------


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
            "forwarding 127.0.0.1:%d to job %s port %d", local, job.job_id, command.remote_port
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
        forward.info = msgspec.structs.replace(forward.info, opened=forward.info.opened + 1)
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
        return api.ShellSession(job_id=job.job_id, socket=str(path))

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
