"""An HTTP client that fetches only what a FetchPolicy allows (job scripts, git redirects).

Every connection goes through the policy: the host is resolved and checked when the socket is
opened, and the socket goes to that checked address (see ``_VettedBackend``). Redirects are
never followed by httpx itself; ``get`` follows them one hop at a time, each new URL http(s)
only and its host checked again on connect.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from engine.domain.fetch_policy import FetchPolicy, odd_ipv4_problem
from engine.errors import EngineError

FETCH_SCHEMES = ("http", "https")
MAX_REDIRECTS = 5


class _VettedBackend(httpcore.NetworkBackend):
    """httpcore's own sockets, opened only to addresses the policy checked just now.

    httpcore asks its backend for a connection by host name; here the name is resolved and
    checked once and the socket opened to that very address, so no second lookup can answer
    differently. TLS still verifies the certificate against the URL's host name and the Host
    header stays the URL's: httpcore takes both from the request, not from the socket."""

    def __init__(self, policy: FetchPolicy) -> None:
        self._policy = policy
        self._sockets = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in self._policy.check_host(host, port):
            try:
                return self._sockets.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # check_host returns at least one address
        raise failure

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise EngineError("fetch_refused", "fetching over a unix socket is not allowed")

    def sleep(self, seconds: float) -> None:
        self._sockets.sleep(seconds)


class VettedTransport(httpx.HTTPTransport):
    """httpx's transport over ``_VettedBackend``. httpx has no public way to give its pool a
    network backend, so the pool it built is replaced by the same one with ours (the pinning
    test in tests/unit/test_fetch_policy.py fails if an httpx upgrade stops honouring this)."""

    def __init__(self, policy: FetchPolicy) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=4,
            max_keepalive_connections=4,
            network_backend=_VettedBackend(policy),
        )


def vetted_client(policy: FetchPolicy, timeout: float) -> httpx.Client:
    """A client that reaches only what ``policy`` allows. No redirects of its own (see
    ``get``), no proxies or netrc from the environment: a proxy would do the lookup for us,
    and the address it connects to could not be checked."""
    return httpx.Client(
        transport=VettedTransport(policy),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    )


def check_url(url: str) -> str | None:
    """Why ``url`` is not one we fetch (scheme, host), or None."""
    try:  # before httpx, which refuses some of these forms with a bare "Invalid IPv4"
        host = urlsplit(url).hostname
    except ValueError:
        host = None
    if host and (why := odd_ipv4_problem(host)):
        return why
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        return f"{url!r} is not a valid URL: {exc}"
    if parsed.scheme not in FETCH_SCHEMES:
        return f"unsupported URL scheme {parsed.scheme or 'none'!r}: only http:// and https://"
    if not parsed.host:
        return f"{url!r} has no host"
    return None


@contextmanager
def get(
    client: httpx.Client,
    url: str,
    *,
    max_redirects: int = MAX_REDIRECTS,
    deadline: float | None = None,
    headers: dict[str, str] | None = None,
) -> Iterator[httpx.Response]:
    """The streamed response to GET ``url``, redirects followed one hop at a time: each new
    URL must be http(s), and its host is checked again when the client connects to it.
    ``deadline`` (time.monotonic) bounds the whole of it, every hop included."""
    current = url
    for hop in range(max_redirects + 1):
        if deadline is not None and time.monotonic() > deadline:
            raise EngineError("fetch_timeout", f"fetching {url} took too long: stopped")
        with ExitStack() as stack:
            try:
                response = stack.enter_context(client.stream("GET", current, headers=headers))
            except EngineError as exc:
                if hop == 0 or exc.code != "fetch_refused":
                    raise
                raise EngineError(
                    exc.code, f"{url} redirected to {current}: {exc.message}"
                ) from exc
            if not response.is_redirect:
                yield response
                return
            location = response.headers["location"]
        try:
            target = str(httpx.URL(current).join(location))
        except httpx.InvalidURL:
            target = location
        if why := check_url(target):
            raise EngineError("fetch_refused", f"{url} redirected to {location!r}: {why}")
        current = target
    raise EngineError("fetch_refused", f"{url} redirected more than {max_redirects} times: stopped")
