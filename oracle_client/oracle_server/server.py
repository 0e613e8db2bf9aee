"""The oracle's HTTP front: stdlib ThreadingHTTPServer, JSON in and out, bounded bodies.

Kept deliberately plain: four routes, every body decoded into the typed request of models.py
(so nothing unvalidated reaches the logic), every refusal an ``ErrorReply``. Listens on
127.0.0.1 unless told otherwise: an oracle is put behind a real TLS proxy to be public.
"""

from __future__ import annotations

import logging
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec

from oracle_client.models import (
    ErrorKind,
    ErrorReply,
    RewardPending,
    RewardRequest,
    ServiceRequest,
    StatusReport,
)
from oracle_client.oracle_server.service import Oracle, OracleRefusal
from oracle_client.ratelimit import PeerRateLimiter

log = logging.getLogger(__name__)

# The largest request is a service request with 64 offers (~20 KiB); a receipt is ~1 KiB.
MAX_BODY_BYTES = 64 * 1024
PENDING_STATUS = 202  # NuNet's 102 "still running" (see models.py)

_ROUTES: dict[str, type[msgspec.Struct]] = {
    "/request-service": ServiceRequest,
    "/request-reward": RewardRequest,
    "/send-status": StatusReport,
}


# Requests per network address (issue 20 §4): a request-service costs a signature check and
# a chain read even when it is refused, so one address may not send them faster than a busy
# market behind one NAT would; every POST counts against a wider bound too. Over either: 429,
# and the client backs off (oracle_client/client.py).
SERVICE_REQUESTS_PER_S = 5.0
SERVICE_BURST = 50.0
POSTS_PER_S = 50.0
POSTS_BURST = 200.0


class OracleHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, oracle: Oracle, address: tuple[str, int], handler: type[OracleHandler]
    ) -> None:
        self.oracle = oracle
        self._limits_lock = threading.Lock()
        self._service_requests = PeerRateLimiter(SERVICE_REQUESTS_PER_S, SERVICE_BURST)
        self._posts = PeerRateLimiter(POSTS_PER_S, POSTS_BURST)
        super().__init__(address, handler)

    def over_limit(self, client: str, path: str) -> float:
        """Seconds until ``client`` may POST to ``path`` again (0.0: now; counted)."""
        with self._limits_lock:
            if not self._posts.allow(client):
                return max(1.0, self._posts.wait_s(client))
            if path == "/request-service" and not self._service_requests.allow(client):
                return max(1.0, self._service_requests.wait_s(client))
        return 0.0


class OracleHandler(BaseHTTPRequestHandler):
    server: OracleHTTPServer
    protocol_version = "HTTP/1.1"  # keep-alive: the client reuses its connection
    timeout = 15  # seconds a client may stall mid-request before its thread is freed
    server_version = "nunet-oracle"

    def do_GET(self) -> None:
        if self.path == "/info":
            self._send(200, self.server.oracle.info())
        else:
            self._refuse(404, "not_found", f"no such endpoint: GET {self.path}")

    def do_POST(self) -> None:
        cls = _ROUTES.get(self.path)
        if cls is None:
            self._refuse(404, "not_found", f"no such endpoint: POST {self.path}", close=True)
            return
        client = str(self.client_address[0]) if self.client_address else ""
        wait = self.server.over_limit(client, self.path)
        if wait:
            # Not read: refusing costs nothing, reading and checking could cost a chain read.
            self._refuse(
                429,
                "rate_limited",
                f"too many requests from {client}: try again in {wait:.0f} s",
                close=True,
                retry_after=wait,
            )
            return
        body = self._read_body()
        if body is None:
            return
        try:
            request = msgspec.json.decode(body, type=cls)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            self._refuse(400, "bad_request", f"bad payload: {exc}")
            return
        self._handle(request)

    def _handle(self, request: Any) -> None:
        oracle = self.server.oracle
        try:
            if isinstance(request, ServiceRequest):
                client = str(self.client_address[0]) if self.client_address else ""
                reply: msgspec.Struct = oracle.request_service(request, client=client)
            elif isinstance(request, RewardRequest):
                reply = oracle.request_reward(request)
            else:
                reply = oracle.send_status(request)
        except OracleRefusal as refusal:
            self._refuse(refusal.status, refusal.error, refusal.reason)
            return
        except Exception as exc:
            log.exception("oracle failure on %s", self.path)
            self._refuse(500, "internal", f"oracle failure: {type(exc).__name__}")
            return
        self._send(PENDING_STATUS if isinstance(reply, RewardPending) else 200, reply)

    def _read_body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding"):
            self._refuse(411, "bad_request", "send the body with a Content-Length", close=True)
            return None
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._refuse(411, "bad_request", "a Content-Length is required", close=True)
            return None
        if not 0 <= length <= MAX_BODY_BYTES:
            # Not read: answering and closing costs nothing, reading could cost a lot.
            self._refuse(413, "payload_too_large", f"body over {MAX_BODY_BYTES} bytes", close=True)
            return None
        return self.rfile.read(length)

    def _refuse(
        self,
        status: int,
        error: ErrorKind,
        reason: str,
        *,
        close: bool = False,
        retry_after: float = 0.0,
    ) -> None:
        reply = ErrorReply(code=status, error=error, reason=reason)
        self._send(status, reply, close=close, retry_after=retry_after)

    def _send(
        self, status: int, reply: msgspec.Struct, *, close: bool = False, retry_after: float = 0.0
    ) -> None:
        body = msgspec.json.encode(reply)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if retry_after:
            self.send_header("Retry-After", str(math.ceil(retry_after)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)


class OracleServer:
    """The HTTP server around an ``Oracle``; ``start()`` serves from a background thread."""

    def __init__(
        self,
        oracle: Oracle,
        host: str = "127.0.0.1",
        port: int = 0,
        handler: type[OracleHandler] = OracleHandler,
        poll_interval: float = 0.5,
    ) -> None:
        self.oracle = oracle
        self.poll_interval = poll_interval  # how soon shutdown() is noticed
        self._httpd = OracleHTTPServer(oracle, (host, port), handler)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> OracleServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            args=(self.poll_interval,),
            name="nunet-oracle-http",
            daemon=True,
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever(self.poll_interval)

    def shutdown(self) -> None:
        """Stop serve_forever (from another thread or a signal handler's thread)."""
        self._httpd.shutdown()

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()
