"""The client end of the control socket (engine/control.py serves it): a daemon's engine
behind the EngineClient protocol, for the CLI, an attached TUI and the demo.

Kept apart from the server so a scripting command loads neither trio nor the command
registry: `nunet-tui peer list --json` against a daemon is mostly this module's imports.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import json
import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from engine import api
from engine.client import EventCallback, Subscribers
from engine.config import check_socket_dir, check_socket_file
from engine.errors import EngineError

log = logging.getLogger("nunet.control")

MAX_LINE = 1 << 20
"""The longest line either end accepts (a larger one closes the connection)."""


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
        import asyncio  # 30 ms: only an asyncio caller (the TUI) awaits

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
