"""The job streams the provider serves (``/nunet/job/1.0.0``): each bounded (its request
within ``FIRST_FRAME_S`` and ``p.MAX_REQUEST_BYTES``, streams per peer, address and subnet)
and dispatched by its message to a quote, a Confirm, a cancel, a follow (the job's Updates:
its state, log lines and live usage until it ends), its results or their deletion."""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import msgspec
import trio

from engine import api
from engine.domain.ratelimit import remote_host
from engine.errors import EngineError
from engine.jobs import protocol as p
from engine.jobs.provider_base import JOB_PEERS_TTL_S
from engine.jobs.provider_quotes import ProviderQuotes

log = logging.getLogger("nunet.jobs.provider")

# A stream must bring its one request this soon; a peer that opens streams and says nothing
# has them reset (the consumer writes its request at once, and waits 10 s for the answer).
FIRST_FRAME_S = 10.0
WRITE_S = 10.0  # for one reply to be taken by the peer
LINGER_S = 5.0  # for the peer to close its side after our last frame (then: reset)
FOLLOW_POLL_S = 0.1
# After an Update with lines, a running job's next lines wait this long and go together: a
# service that logs every request (the tunnels' common case) would otherwise cost both daemons
# a signed Update, its check and a store write per request, in the middle of its round trips.
LINES_GATHER_S = 0.1


class ProviderStreams(ProviderQuotes):
    """The job protocol's stream handler and what it serves."""

    async def handle(self, stream: Any) -> None:
        peer = p.remote_peer(stream)
        lease = self._streams.acquire(peer, remote_host(stream), lambda: self.deals_with(peer))
        if lease is None:
            log.debug("job stream from %s refused: over its peer's, address's or subnet's", peer)
            await _reset(stream)
            return
        try:
            await self._serve_stream(stream, peer)
        finally:
            self._streams.release(lease)

    def deals_with(self, peer: str) -> bool:
        """A peer we have a job with, either side: its streams come from the reserve."""
        at, peers = self._job_peers
        now = time.monotonic()
        if now - at >= JOB_PEERS_TTL_S:
            peers = self.ctx.store.job_peers()
            self._job_peers = (now, peers)
        return peer in peers

    async def _serve_stream(self, stream: Any, peer: str) -> None:
        try:
            try:
                with trio.fail_after(FIRST_FRAME_S):
                    received = await p.receive(stream, peer, p.MAX_REQUEST_BYTES)
            except p.BadOffer as bad:
                refusal = self._offer_gate(bad.job_id, bad.consumer, peer) or p.refusal(
                    bad.job_id, bad.reason
                )
                await self._reply(stream, peer, refusal, keep=False)
                await p.finish(stream, LINGER_S)
                return
            if received is None:  # the peer closed without asking: close our side too
                await p.finish(stream, LINGER_S)
                return
            message, raw = received
            await self._dispatch(stream, peer, message, raw)
        except trio.TooSlowError:
            log.debug("job stream from %s: too slow (request or reply); reset", peer)
            await _reset(stream)
        except p.ProtocolError as exc:
            log.info("job protocol: rejected input from %s: %s", peer, exc)
            await _reset(stream)
        except Exception as exc:  # a peer's broken stream must never take the node down
            log.info("job stream from %s ended: %s", peer, exc)
            await _reset(stream)
        else:
            await p.finish(stream, LINGER_S)

    async def _dispatch(self, stream: Any, peer: str, message: p.AnyJobMessage, raw: bytes) -> None:
        if isinstance(message, p.Offer):
            # Never stored here: a quote keeps its offer until the Confirm makes a job.
            quoted = self._offer(message, peer, raw)
            if isinstance(quoted, p.Quote):
                quoted = await self._fetch_before_quoting(quoted)
            await self._reply(stream, peer, quoted, keep=False)
            return
        if isinstance(message, p.Confirm):
            answer, created = await self._confirm(message, peer, raw)
            await self._reply(stream, peer, answer, keep=created)
            return
        self._record(message.job_id, peer, "in", p.kind(message), raw)
        if isinstance(message, p.Countersign):
            await self._reply(stream, peer, self._countersigned(message, peer))
        elif isinstance(message, p.Release):
            await self._reply(stream, peer, self._released(message, peer))
        elif isinstance(message, p.Cancel):
            await self._reply(stream, peer, await self._cancel(message, peer))
        elif isinstance(message, p.Follow):
            await self._follow(stream, message, peer)
        elif isinstance(message, p.FetchResults):
            await self._send_results(stream, message, peer)
        elif isinstance(message, p.GangStart):
            await self._reply(stream, peer, self._gang_started(message, peer))
        elif isinstance(message, p.DeleteResults):  # notebook delete (helper D)
            await self._reply(stream, peer, await self._delete_results(message, peer))
        else:
            raise p.ProtocolError(f"unexpected {type(message).__name__}")

    async def _reply(
        self, stream: Any, consumer: str, message: p.JobMessage, *, keep: bool = True
    ) -> None:
        raw = p.encode(self.ctx.identity, message)
        if keep:
            self._record(message.job_id, consumer, "out", p.kind(message), raw)
        with trio.fail_after(WRITE_S):
            await stream.write(_frame(raw))

    async def _follow(self, stream: Any, follow: p.Follow, consumer: str) -> None:
        job = self.ctx.store.get_job(follow.job_id)
        if job is None or job.consumer != consumer:
            await self._reply(stream, consumer, p.refusal(follow.job_id, "no such job of yours"))
            return
        after = follow.after_seq
        joblog = self.job_log(follow.job_id)
        last_state: tuple[Any, ...] = ()
        sampled = -1.0  # the last live sample sent on this stream (a new follow: all kept)
        while True:
            changed = self._changed.setdefault(follow.job_id, trio.Event())
            job = self.ctx.store.get_job(follow.job_id) or job
            lines = _within_budget(joblog.read(after, p.MAX_LINES_PER_UPDATE))
            more = bool(lines) and bool(joblog.read(lines[-1].seq, 1))
            ring = self._usage.get(follow.job_id)
            usage = ring.since(sampled)[-p.MAX_USAGE_SAMPLES :] if ring is not None else ()
            # The end goes out with the last line: a consumer that sees "completed" has the
            # whole log, and it never follows a finished job again.
            shown = _before_the_end(job) if more and job.state in api.TERMINAL_STATES else job
            state = (shown.state, shown.checkpoint, shown.resumed_from, shown.reason)
            if lines or usage or state != last_state:
                await p.send(stream, self.ctx.identity, _update(shown, lines, usage))
                if lines:
                    after = lines[-1].seq
                if usage:
                    sampled = usage[-1].at
                last_state = state
                if more:
                    continue  # more backlog waiting
                if lines and job.state not in api.TERMINAL_STATES:
                    await trio.sleep(LINES_GATHER_S)
                    continue
            if job.state in api.TERMINAL_STATES and not joblog.read(after, 1):
                return
            with trio.move_on_after(FOLLOW_POLL_S * 10):
                await changed.wait()

    async def _delete_results(
        self, message: p.DeleteResults, consumer: str
    ) -> p.Accepted | p.Refusal:
        """`notebook delete`: the owner's finished job's files go (engine/jobs/notebooks.py)."""
        from engine.jobs.notebooks import delete_job_files, deletion_refusal

        job = self.ctx.store.get_job(message.job_id)
        if (why := deletion_refusal(job, consumer)) or job is None:
            return p.refusal(message.job_id, why)
        try:
            removed = await trio.to_thread.run_sync(delete_job_files, self.job_dir(job.job_id), job)
        except (EngineError, OSError) as exc:
            why = exc.message if isinstance(exc, EngineError) else str(exc)
            return p.refusal(message.job_id, f"could not delete job {job.job_id}'s files: {why}")
        log.info("job %s: its consumer deleted its files (%s)", job.job_id, ", ".join(removed))
        self._save(msgspec.structs.replace(job, results_dir=""))
        return p.Accepted(job_id=message.job_id)

    async def _send_results(self, stream: Any, fetch: p.FetchResults, consumer: str) -> None:
        job = self.ctx.store.get_job(fetch.job_id)
        if job is None or job.consumer != consumer:
            await self._reply(stream, consumer, p.refusal(fetch.job_id, "no such job of yours"))
            return
        if not job.results_dir or not Path(job.results_dir).exists():
            await self._reply(stream, consumer, p.refusal(fetch.job_id, "no results for this job"))
            return
        if fetch.offset > job.results_size:
            why = f"offset {fetch.offset} is past the results' {job.results_size} bytes"
            await self._reply(stream, consumer, p.refusal(fetch.job_id, why))
            return
        header = p.ResultsHeader(
            job_id=job.job_id,
            sha256=job.results_sha256,
            size=job.results_size,
            offset=fetch.offset,
        )
        await p.send(stream, self.ctx.identity, header)
        with Path(job.results_dir).open("rb") as handle:
            handle.seek(fetch.offset)  # a resumed transfer (a relay's circuit ended)
            while chunk := handle.read(p.RESULT_CHUNK):
                await stream.write(chunk)


def _within_budget(lines: list[api.JobLogLine]) -> list[api.JobLogLine]:
    """As many lines as fit one Update frame (long lines count by their size)."""
    used = 0
    for count, line in enumerate(lines):
        chars = min(len(line.text), p.MAX_LINE_CHARS)
        # Worst-case UTF-8 (4 bytes a character) unless ASCII, which most logs are: 4x for
        # every line made a flood of short lines take three times the Updates it needs.
        used += (chars if line.text.isascii() else chars * 4) + 48  # + framing
        if used > p.UPDATE_BUDGET_BYTES:
            return lines[: max(count, 1)]
    return lines


def _before_the_end(job: api.JobInfo) -> api.JobInfo:
    """A finished job as it looked while running: for the updates that carry its backlog."""
    return msgspec.structs.replace(
        job,
        state="running",
        reason="",
        exit_code=None,
        finished_at=None,
        metering=None,
        results_sha256="",
        results_size=0,
        results_cid="",
        receipt="",
    )


def _update(
    job: api.JobInfo,
    lines: list[api.JobLogLine],
    usage: tuple[api.UsageSample, ...] = (),
) -> p.Update:
    return p.Update(
        job_id=job.job_id,
        **{**p.progress_of(job), "reason": p.clip(job.reason)},
        receipt=job.receipt,
        usage=usage,
        lines=tuple(
            ln
            if len(ln.text) <= p.MAX_LINE_CHARS
            else msgspec.structs.replace(ln, text=ln.text[: p.MAX_LINE_CHARS])
            for ln in lines
        ),
    )


async def _reset(stream: Any) -> None:
    with contextlib.suppress(Exception), trio.move_on_after(1.0):
        await stream.reset()


def _frame(raw: bytes) -> bytes:
    from engine.domain.wire import frame

    return frame(raw)
