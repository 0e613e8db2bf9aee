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

import contextlib
import json
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import trio

from engine import api
from engine.commands import command_error, decode_command
from engine.config import check_socket_dir
from engine.control_client import MAX_LINE
from engine.errors import EngineError

log = logging.getLogger("nunet.control")

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
        await send({"id": req_id, **await answer(self._node, raw)})


async def answer(node: Any, raw: object) -> dict[str, Any]:
    """One command in its wire form, decoded and handled: ``{"ok": reply}`` or ``{"error":
    {"code", "message", "problems"}}``. The one way in for the control socket and the HTTP
    API (engine/http_api.py)."""
    try:
        command = decode_command(raw)
    except msgspec.ValidationError as exc:
        return {"error": command_error(exc).to_wire()}
    try:
        reply = await node.handle(command)
    except EngineError as exc:
        return {"error": exc.to_wire()}
    except Exception as exc:
        name = type(command).__name__
        log.exception("command %s failed", name)
        # Some exceptions say nothing (a timeout's str() is ""): their type does.
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        message = f"internal error in {name}: {detail} (the daemon's log has the traceback)"
        return {"error": EngineError("internal", message).to_wire()}
    return {"ok": api.to_builtins(reply)}


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
