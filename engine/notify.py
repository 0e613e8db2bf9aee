"""Telling the operator when a job ends or a reward is paid.

``NoticeFilter`` turns the node's events into notices, each once: a ``JobChanged`` whose job
reached a final state, an ``EscrowChanged`` that was claimed (a reward paid to this provider)
or refunded (NTX back to this consumer). The TUI shows them with the terminal bell
(nunet_tui/app.py); a long-running engine also hands them to what ``[notify]`` configures:

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
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import trio

from engine import api
from engine.domain.safe_text import safe
from engine.jobs.metering import metered_units
from oracle_client.ntx import LOCKED, METERED, PAID, REFUNDED, format_ntx, json_key, ntx_of

if TYPE_CHECKING:
    import httpx

    from engine.config import NotifySettings
    from engine.context import NodeContext

log = logging.getLogger("nunet.notify")

QUEUE = 256  # notices waiting for delivery; more are dropped (and counted in the log)
SEEN = 4096  # notices remembered for telling each only once
MAX_REASON = 500  # a job's reason comes from its peer: bounded in every notice
DESKTOP_TIMEOUT_S = 5.0
NoticeKind = Literal["job_ended", "reward_paid", "refunded"]


@dataclass(frozen=True)
class Notice:
    kind: NoticeKind
    title: str
    text: str  # one line, escaped for a terminal
    payload: dict[str, Any]  # what the webhook and the command get, as JSON
    bad: bool = False  # a job that did not complete


def _job_payload(job: api.JobInfo) -> dict[str, Any]:
    """The job, and its metered figure in base units under its kind's key: the charge its
    receipt signs (engine/jobs/metering.py ``metered_units``); ``cost_ntx`` is the same in
    NTX, as before."""
    metering = job.metering
    metered = metered_units(job)
    return {
        "job_id": job.job_id,
        "name": job.spec.name,
        "role": job.role,
        "state": job.state,
        "reason": job.reason[:MAX_REASON],
        "exit_code": job.exit_code,
        "provider": job.provider,
        "consumer": job.consumer,
        "executor": job.executor,
        "price_ntx_hour": job.price_ntx_hour,
        "quoted_ntx": job.quoted_ntx,
        json_key(METERED): metered,
        "cost_ntx": ntx_of(metered) if metered is not None else None,
        "wall_s": metering.wall_s if metering else None,
        "gpu_s": metering.gpu_s if metering else None,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }


def _escrow_payload(escrow: api.EscrowInfo) -> dict[str, Any]:
    """The escrow's figures, each under its kind's key (``locked_units``, ``paid_units``...,
    oracle_client/ntx.py ``json_key``), NTX base units; ``amount_ntx_base_units`` and ``ntx``
    are the lock, as before."""
    paid, refunded = escrow.settled()
    return {
        "job_id": escrow.job_id,
        "role": escrow.role,
        "state": escrow.state,
        "amount_ntx_base_units": escrow.amount,
        "ntx": escrow.ntx,
        json_key(LOCKED): escrow.amount,
        json_key(METERED): escrow.metered_units,
        json_key(PAID): paid,
        json_key(REFUNDED): refunded,
        "tx": escrow.settle_tx or escrow.claim_tx,
        "outcome": escrow.outcome,
    }


class NoticeFilter:
    """Which events deserve a notice, each told once.

    A job counts when it reaches a final state; one that ended before ``since`` (a later save
    of an old job: results fetched, a receipt signed) was told by whoever watched then."""

    def __init__(self, since: float | None = None, node_id: str = "") -> None:
        self.since = time.time() if since is None else since
        self.node_id = node_id
        self._seen: OrderedDict[tuple[str, ...], None] = OrderedDict()

    def _first(self, key: tuple[str, ...]) -> bool:
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > SEEN:
            self._seen.popitem(last=False)
        return True

    def observe(self, event: api.Event) -> Notice | None:
        if isinstance(event, api.JobChanged):
            return self._job(event)
        if isinstance(event, api.EscrowChanged):
            return self._escrow(event)
        return None

    def _job(self, event: api.JobChanged) -> Notice | None:
        job = event.job
        if job.state not in api.TERMINAL_STATES:
            return None
        ended = job.finished_at or job.updated_at
        if ended < self.since - 1.0 or not self._first(("job", job.job_id)):
            return None
        label = safe(job.spec.name or job.job_id)[:80]
        side = "you bought" if job.role == "consumer" else "you ran"
        # The job's one metered figure, saying what it is (issue 20 §9: the metering's own
        # float, another figure than the receipt's, unlabelled).
        metered = metered_units(job)
        text = f"{label} ({side}): {job.state}"
        if metered:
            text += f" · {format_ntx(metered, METERED)}"
        if job.reason and job.state != "completed":
            text += f" · {safe(job.reason[:120])}"
        return Notice(
            kind="job_ended",
            title=f"Job {job.state}",
            text=text,
            payload=self._envelope("job_ended", event.at, job=_job_payload(job)),
            bad=job.state != "completed",
        )

    def _escrow(self, event: api.EscrowChanged) -> Notice | None:
        escrow = event.escrow
        paid, refunded = escrow.settled()
        # The settlement's own figure (issue 20 §9: this said the lock), and the lock's.
        if escrow.state == "claimed" and escrow.role == "provider":
            kind: NoticeKind = "reward_paid"
            title, figure = "Reward paid", format_ntx(paid, PAID)
        elif escrow.state == "refunded" and escrow.role == "consumer":
            kind, title, figure = "refunded", "Refund", format_ntx(refunded, REFUNDED)
        else:
            return None
        if not self._first(("escrow", escrow.job_id, escrow.state)):
            return None
        locked = format_ntx(escrow.amount, LOCKED)
        return Notice(
            kind=kind,
            title=title,
            text=f"{figure} (of {locked}) for job {safe(escrow.job_id)[:80]}",
            payload=self._envelope(kind, event.at, escrow=_escrow_payload(escrow)),
        )

    def _envelope(self, kind: str, at: float, **body: Any) -> dict[str, Any]:
        return {"event": kind, "at": at, "node": self.node_id, **body}


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
