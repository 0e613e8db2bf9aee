"""The local control socket: the engine facade as JSON lines over a 0600 Unix socket.

Requests are ``{"id": N, "cmd": {"type": ..., ...}}`` and are answered by
``{"id": N, "ok": {...}}`` or ``{"id": N, "error": {"code", "message", "problems"}}``.
``{"id": N, "subscribe": true}`` turns on ``{"event": {...}}`` lines on that connection.
Only the owner can connect (the socket and its folder are private), but input is still
bounded and validated: a bad line gets an error reply, an oversized one closes the stream.
Both ends refuse a socket folder that is not ours with mode 0700 (engine/config.py
``check_socket_dir``): a client is about to send the keystore passphrase and the mnemonic.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import trio

from engine import api
from engine.client import EventCallback, Subscribers
from engine.commands import command_error, decode_command
from engine.config import check_socket_dir, check_socket_file
from engine.errors import EngineError

log = logging.getLogger("nunet.control")

MAX_LINE = 1 << 20
EVENT_BACKLOG = 1000


class _LineTooLong(Exception):
    pass


class ControlServer:
    def __init__(self, node: Any, path: Path) -> None:
        self._node = node
        self._path = path

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # Not even an unlink in a folder someone else controls.
        check_socket_dir(self._path.parent)
        # We hold the home lock, so a socket file left here belongs to a dead process.
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            await sock.bind(str(self._path))
            os.chmod(self._path, 0o600)
            sock.listen(64)
        except BaseException:
            sock.close()
            raise
        listener = trio.SocketListener(sock)
        try:
            async with listener, trio.open_nursery() as nursery:
                task_status.started()
                while True:
                    stream = await listener.accept()
                    nursery.start_soon(self._connection, stream)
        finally:
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()

    async def _connection(self, stream: trio.SocketStream) -> None:
        send_lock = trio.Lock()
        remove_sink: Callable[[], None] | None = None

        async def send(obj: dict[str, Any]) -> None:
            data = msgspec.json.encode(obj) + b"\n"
            async with send_lock:
                await stream.send_all(data)

        try:
            async with stream, trio.open_nursery() as nursery:
                async for line in _lines(stream):
                    request = _parse(line)
                    if isinstance(request, EngineError):
                        await send({"id": None, "error": request.to_wire()})
                        continue
                    req_id = request.get("id")
                    if request.get("subscribe") is True:
                        if remove_sink is None:
                            remove_sink = self._subscribe(nursery, send)
                        await send({"id": req_id, "ok": {"message": "subscribed"}})
                        continue
                    nursery.start_soon(self._run_command, req_id, request.get("cmd"), send)
                # EOF: answer what was asked, stop the event pump, then close.
                if remove_sink is not None:
                    remove_sink()
                    remove_sink = None
        except Exception as exc:
            # One misbehaving client must never take the server down: nurseries wrap errors
            # in ExceptionGroups, so classify the leaves rather than matching the group.
            leaves = _leaves(exc)
            if any(isinstance(e, _LineTooLong) for e in leaves):
                log.warning("control client sent a line over %d bytes; closing it", MAX_LINE)
            elif not all(
                isinstance(e, trio.BrokenResourceError | trio.ClosedResourceError) for e in leaves
            ):
                log.exception("control connection failed")
        finally:
            if remove_sink is not None:
                remove_sink()

    def _subscribe(
        self, nursery: trio.Nursery, send: Callable[[dict[str, Any]], Any]
    ) -> Callable[[], None]:
        sender, receiver = trio.open_memory_channel[api.Event](EVENT_BACKLOG)

        def sink(event: api.Event) -> None:
            try:
                sender.send_nowait(event)
            except trio.WouldBlock:
                # A client that stops reading must not hold the engine's memory hostage.
                log.warning("control client fell %d events behind; disconnecting it", EVENT_BACKLOG)
                nursery.cancel_scope.cancel()
            except trio.ClosedResourceError:
                pass

        async def pump() -> None:
            async with receiver:
                async for event in receiver:
                    await send({"event": api.to_builtins(event)})

        nursery.start_soon(pump)
        remove = self._node.add_sink(sink)

        def unsubscribe() -> None:
            remove()
            sender.close()

        return unsubscribe

    async def _run_command(
        self, req_id: Any, raw: object, send: Callable[[dict[str, Any]], Any]
    ) -> None:
        try:
            command = decode_command(raw)
        except msgspec.ValidationError as exc:
            await send({"id": req_id, "error": command_error(exc).to_wire()})
            return
        try:
            reply = await self._node.handle(command)
        except EngineError as exc:
            await send({"id": req_id, "error": exc.to_wire()})
            return
        except Exception as exc:
            log.exception("command %s failed", type(command).__name__)
            await send(
                {"id": req_id, "error": EngineError("internal", f"internal error: {exc}").to_wire()}
            )
            return
        await send({"id": req_id, "ok": api.to_builtins(reply)})


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


async def _lines(stream: trio.SocketStream) -> Any:
    buffer = bytearray()
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        buffer += chunk
        while (newline := buffer.find(b"\n")) >= 0:
            line = bytes(buffer[:newline])
            del buffer[: newline + 1]
            yield line
        if len(buffer) > MAX_LINE:
            raise _LineTooLong


def _parse(line: bytes) -> dict[str, Any] | EngineError:
    if len(line) > MAX_LINE:
        return EngineError("protocol", "request too large")
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return EngineError("protocol", f"request is not JSON: {exc}")
    if not isinstance(obj, dict):
        return EngineError("protocol", "request must be a JSON object")
    return obj


DAEMON_GONE = "daemon_gone"
"""The code of every EngineError a ControlClient raises once its daemon went away (stopped,
restarted, killed): callers catch EngineError alone, never the socket's OSError."""


class ControlClient:
    """An EngineClient for a daemon's control socket; one connection, a reader thread.

    Once connected, every failure of the connection reaches callers as
    ``EngineError(DAEMON_GONE)``: a pending call when the daemon dies under it, a new call
    after that, and the subscription.
    """

    def __init__(
        self,
        path: Path,
        timeout: float = 5.0,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        """``on_lost(reason)``: called once, from the reader thread, when the daemon ends the
        connection (not after ``close``): engine/reconnect.py starts reconnecting from it."""
        # A missing folder or socket is an OSError (no daemon yet: callers retry); one that
        # someone else controls is an EngineError, before a byte is sent.
        check_socket_dir(path.parent)
        check_socket_file(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(str(path))
        except OSError:
            self._sock.close()
            raise
        self._sock.settimeout(None)
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[api.Command | None, concurrent.futures.Future[Any]]] = {}
        self._lock = threading.Lock()
        self._subscribers = Subscribers()
        self._subscribed = False
        self._closed = False
        self._closed_reason = "the daemon connection is closed"
        self._on_lost = on_lost
        self._reader = threading.Thread(target=self._read_loop, name="nunet-control", daemon=True)
        self._reader.start()

    @property
    def embedded(self) -> bool:
        return False

    def _send(
        self, payload: dict[str, Any], command: api.Command | None
    ) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                future.set_exception(EngineError(DAEMON_GONE, self._closed_reason))
                return future
            req_id = next(self._ids)
            self._pending[req_id] = (command, future)
            data = json.dumps({"id": req_id, **payload}, separators=(",", ":")).encode() + b"\n"
            try:
                self._sock.sendall(data)
            except OSError as exc:
                del self._pending[req_id]
                future.set_exception(EngineError(DAEMON_GONE, f"the daemon went away: {exc}"))
        return future

    def submit(self, command: api.Command) -> concurrent.futures.Future[Any]:
        return self._send({"cmd": api.to_builtins(command)}, command)

    async def call(self, command: api.Command) -> Any:
        return await asyncio.wrap_future(self.submit(command))

    def call_blocking(self, command: api.Command, timeout: float = 30.0) -> Any:
        try:
            return self.submit(command).result(timeout)
        except concurrent.futures.TimeoutError:
            raise EngineError(
                "timeout", f"the daemon did not answer within {timeout:.0f} s"
            ) from None

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        unsubscribe = self._subscribers.add(callback)
        with self._lock:
            first = not self._subscribed
            self._subscribed = True
        if first:
            try:
                self._send({"subscribe": True}, None).result(10)
            except concurrent.futures.TimeoutError:  # an OSError: the daemon hangs
                raise EngineError(DAEMON_GONE, "the daemon did not answer within 10 s") from None
        return unsubscribe

    def _read_loop(self) -> None:
        buffer = bytearray()
        try:
            while True:
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                while (newline := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:newline])
                    del buffer[: newline + 1]
                    self._dispatch(line)
                if len(buffer) > MAX_LINE:
                    log.warning("daemon sent an oversized line; disconnecting")
                    break
        except OSError:
            pass
        finally:
            self._fail_all("the daemon closed the connection (stopped or restarted)")

    def _dispatch(self, line: bytes) -> None:
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            log.warning("ignoring a malformed line from the daemon")
            return
        if not isinstance(obj, dict):
            return
        if "event" in obj:
            try:
                event = api.decode_event(obj["event"])
            except msgspec.ValidationError:
                log.warning("ignoring an unknown event from the daemon")
                return
            self._subscribers.deliver(event)
            return
        with self._lock:
            req_id = obj.get("id")
            entry = self._pending.pop(req_id, None) if isinstance(req_id, int) else None
        if entry is None:
            return
        command, future = entry
        if "error" in obj:
            future.set_exception(EngineError.from_wire(obj["error"]))
            return
        try:
            reply = obj.get("ok") if command is None else api.decode_reply(command, obj.get("ok"))
        except msgspec.ValidationError as exc:
            future.set_exception(EngineError("protocol", f"daemon sent a malformed reply: {exc}"))
            return
        future.set_result(reply)

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            lost = not self._closed  # the daemon went, rather than our own close()
            if lost:
                self._closed_reason = reason
            self._closed = True
            pending = list(self._pending.values())
            self._pending.clear()
        for _, future in pending:
            if not future.done():
                future.set_exception(EngineError(DAEMON_GONE, reason))
        if lost and self._on_lost is not None:
            try:
                self._on_lost(reason)
            except Exception:
                log.exception("the connection-lost callback failed")

    def close(self) -> None:
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        if self._reader is not threading.current_thread():
            self._reader.join(2.0)
