"""Telling the operator when a job ends or a reward is paid: delivering notices.

What is a notice is engine/notices.py's (``NoticeFilter``, which the TUI also uses for its
toasts and bell); a long-running engine hands each to what ``[notify]`` configures:

- ``webhook_url``: one JSON POST per notice, retried with doubling backoff after connection
  errors, timeouts, 5xx and 429 (``webhook_retries`` times), each try bounded by
  ``webhook_timeout_s``; redirects are not followed and the answer's body is never read.
- ``command``: a program (no shell) run with the notice as JSON on stdin, killed after
  ``command_timeout_s``.
- ``desktop``: ``notify-send``, where it is installed (nothing happens where it is not).

Delivery runs in its own task behind a bounded queue: the event sink only enqueues, so a
webhook that hangs delays later notices, never the node. The URL is logged without its
credentials, query or path (a chat webhook's token often is its path).
"""

from __future__ import annotations

import html
import json
import logging
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import trio

from engine import api
from engine.domain.safe_text import safe
from engine.notices import Notice, NoticeFilter

if TYPE_CHECKING:
    import httpx

    from engine.config import NotifySettings
    from engine.context import NodeContext

log = logging.getLogger("nunet.notify")

QUEUE = 256  # notices waiting for delivery; more are dropped (and counted in the log)
DESKTOP_TIMEOUT_S = 5.0


def redact_url(url: str) -> str:
    """``scheme://host[:port]/…``: no credentials, path or query (a token hides in any)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<an unreadable URL>"
    if ":" in host:
        host = f"[{host}]"
    hidden = "/…" if (parts.path not in ("", "/") or parts.query or parts.fragment) else ""
    return f"{parts.scheme}://{host}{port}{hidden}"


class Notifier:
    """Delivers notices where ``[notify]`` says; never raises, each channel bounded in time."""

    def __init__(
        self,
        settings: NotifySettings,
        client: httpx.AsyncClient | None,
        *,
        user_agent: str = "nunet-tui",
        which: Callable[[str], str | None] = shutil.which,
    ) -> None:
        self.settings = settings
        self.client = client
        self.user_agent = user_agent
        self._which = which
        self._desktop_missing_logged = False

    async def deliver(self, notice: Notice) -> None:
        body = json.dumps(notice.payload, separators=(",", ":")).encode()
        jobs: list[Callable[[], Awaitable[Any]]] = []
        if self.settings.webhook_url and self.client is not None:
            jobs.append(lambda: self.post(body))
        if self.settings.command:
            jobs.append(lambda: self.run_command(body))
        if self.settings.desktop:
            jobs.append(lambda: self.desktop(notice))
        async with trio.open_nursery() as nursery:
            for job in jobs:
                nursery.start_soon(_quietly, job)

    async def post(self, body: bytes) -> bool:
        """POST ``body``; True once the server took it (2xx)."""
        import httpx

        assert self.client is not None
        settings = self.settings
        where = redact_url(settings.webhook_url)
        delay = settings.webhook_backoff_s
        problem = ""
        headers = {"content-type": "application/json", "user-agent": self.user_agent}
        for attempt in range(settings.webhook_retries + 1):
            if attempt:
                await trio.sleep(delay)
                delay *= 2
            # httpx bounds each phase; this bounds the whole try (a server that drips).
            with trio.move_on_after(settings.webhook_timeout_s):
                try:
                    request = self.client.build_request(
                        "POST", settings.webhook_url, content=body, headers=headers
                    )
                    response = await self.client.send(request, stream=True)
                    await response.aclose()  # the answer's body is not ours to read
                except httpx.HTTPError as exc:
                    problem = type(exc).__name__
                    continue
                status = response.status_code
                if 200 <= status < 300:
                    return True
                problem = f"HTTP {status}"
                if status < 500 and status not in (408, 429):
                    log.warning("notify: the webhook %s refused the notice (%s)", where, problem)
                    return False
                continue
            problem = f"no answer within {settings.webhook_timeout_s:g} s"
        log.warning(
            "notify: the webhook %s failed %d times (%s); notice dropped",
            where,
            settings.webhook_retries + 1,
            problem,
        )
        return False

    async def run_command(self, body: bytes) -> int | None:
        """Run the hook with ``body`` on stdin; its exit status, None if killed or missing."""
        command = self.settings.command
        with trio.move_on_after(self.settings.command_timeout_s):
            try:
                done = await trio.run_process(
                    command,
                    stdin=body,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    check=False,
                )
            except OSError as exc:
                log.warning(
                    "notify: cannot run [notify] command %s (%s)",
                    safe(command[0]),
                    exc.strerror or exc,
                )
                return None
            if done.returncode:
                log.warning(
                    "notify: [notify] command %s exited %d", safe(command[0]), done.returncode
                )
            return done.returncode
        log.warning(
            "notify: [notify] command %s ran past %g s; killed",
            safe(command[0]),
            self.settings.command_timeout_s,
        )
        return None

    async def desktop(self, notice: Notice) -> None:
        program = self._which("notify-send")
        if program is None:
            if not self._desktop_missing_logged:
                self._desktop_missing_logged = True
                log.info("notify: no notify-send here; desktop notifications are skipped")
            return
        # Notification servers read a subset of HTML in the body: peer text stays text.
        argv = [program, "--app-name=nunet-tui", "--", notice.title, html.escape(notice.text)]
        with trio.move_on_after(DESKTOP_TIMEOUT_S):
            await trio.run_process(
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
            )


async def _quietly(job: Callable[[], Awaitable[Any]]) -> None:
    try:
        await job()
    except Exception:
        log.exception("notify: a delivery failed")


async def serve_notifications(
    node: NodeContext, add_sink: Callable[[Callable[[api.Event], None]], Callable[[], None]]
) -> None:
    """Hand the node's notices to ``[notify]``'s channels while it runs (none set: return)."""
    settings = node.settings.notify
    if not (settings.webhook_url or settings.command or settings.desktop):
        return
    send, receive = trio.open_memory_channel[Notice](QUEUE)
    notices = NoticeFilter(node_id=node.identity.peer_id)
    dropped = 0

    def sink(event: api.Event) -> None:
        nonlocal dropped
        try:
            notice = notices.observe(event)
            if notice is not None:
                send.send_nowait(notice)
        except trio.WouldBlock:
            dropped += 1
            if dropped in (1, 10, 100) or dropped % 1000 == 0:
                log.warning("notify: %d notices dropped (the queue of %d is full)", dropped, QUEUE)
        except Exception:  # a sink that raises is dropped by the node: never raise
            log.exception("notify: could not queue a notice")

    if settings.webhook_url:
        log.info("notify: webhook %s", redact_url(settings.webhook_url))
    remove = add_sink(sink)
    try:
        client = _client(settings) if settings.webhook_url else None
        notifier = Notifier(settings, client, user_agent=f"nunet-tui/{node.version}")
        try:
            async with receive:
                async for notice in receive:
                    await notifier.deliver(notice)
        finally:
            if client is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                    await client.aclose()
    finally:
        remove()


def _client(settings: NotifySettings) -> httpx.AsyncClient:
    import httpx

    return httpx.AsyncClient(
        timeout=settings.webhook_timeout_s,
        follow_redirects=False,
        limits=httpx.Limits(max_connections=4),
    )
