"""Downloading a job's script: the one way a provider (and a consumer checking its own job)
fetches it, bounded in size and time, from the hosts the fetch policy allows.

The rules of what a script URL may be are the job spec's (engine/domain/spec.py); this is
the I/O, so it lives in the jobs room.
"""

from __future__ import annotations

import time

from engine.domain.fetch_policy import FetchPolicy
from engine.domain.spec import FETCH_TOTAL_S, MAX_SCRIPT_BYTES, check_script_url
from engine.errors import EngineError


def fetch_script(
    url: str,
    max_bytes: int = MAX_SCRIPT_BYTES,
    *,
    timeout: float = 15.0,
    policy: FetchPolicy | None = None,
    total_s: float = FETCH_TOTAL_S,
) -> bytes:
    """Download a job script: only from hosts ``policy`` allows (default: public addresses),
    bounded in size and in time (``timeout`` per step, ``total_s`` for the whole), and a
    clear error for each way it can fail."""
    import httpx

    from engine.jobs.vetted_http import get, vetted_client

    if why := check_script_url(url):
        raise EngineError("script_url", why)
    deadline = time.monotonic() + total_s
    try:
        with (
            vetted_client(policy or FetchPolicy(), timeout) as client,
            get(client, url, deadline=deadline) as response,
        ):
            if response.status_code == 404:
                raise EngineError("script_fetch", f"no script at {url} (404 not found)")
            if response.status_code >= 400:
                raise EngineError(
                    "script_fetch",
                    f"{url} answered {response.status_code} {response.reason_phrase}",
                )
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise EngineError("script_fetch", _too_big(url, int(declared), max_bytes))
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise EngineError("script_fetch", _too_big(url, len(body), max_bytes))
                if time.monotonic() > deadline:  # a server that drips a byte at a time
                    raise EngineError(
                        "script_fetch", f"{url} took over {total_s:g} s to send: stopped"
                    )
    except httpx.TimeoutException as exc:
        raise EngineError("script_fetch", f"{url} did not answer within {timeout:g} s") from exc
    except httpx.HTTPError as exc:
        raise EngineError("script_fetch", f"cannot reach {url}: {exc}") from exc
    except httpx.InvalidURL as exc:  # not an HTTPError: unanswered, it ended the stream
        raise EngineError("script_url", f"{url!r} is not a valid URL: {exc}") from exc
    if not body.strip():
        raise EngineError("script_fetch", f"the script at {url} is empty")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EngineError(
            "script_fetch", f"{url} is not a text (UTF-8) Python script: binary content"
        ) from exc
    if "\x00" in text:
        raise EngineError("script_fetch", f"{url} is not a text Python script: NUL bytes")
    return bytes(body)


def _too_big(url: str, size: int, limit: int) -> str:
    return f"the script at {url} is too big ({size} bytes; the limit is {limit})"
