"""The consumer's jobs, second layer: a finished job's results fetched from its provider
(bounded in time and size, checked against its signed hash), unpacked on request, deleted on
the provider.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import msgspec
import trio

from engine import api
from engine.errors import EngineError
from engine.jobs import protocol as p
from engine.jobs.consumer_base import (
    MAX_RESULTS_BYTES,
    RESULT_CHUNK_S,
    RESULT_MIN_RATE,
    RESULT_PARTS,
    RESULT_STALL_S,
    RESULT_STALLS,
    RESULT_TRANSFER_S,
    RESULT_TRIES,
    ConsumerBase,
    _waiting,
    _why,
)
from engine.jobs.results import safe_unpack, sha256_file, verify

log = logging.getLogger("nunet.jobs.consumer")


class _NoStream(Exception):
    """A results part that could not even open its stream (``original`` says why)."""

    def __init__(self, original: Exception) -> None:
        super().__init__(str(original))
        self.original = original


class ConsumerResults(ConsumerBase):
    def _results_missing(self, job: api.JobInfo) -> bool:
        return bool(job.results_sha256) and not job.results_dir and not job.results_error

    async def _fetch_results_tried(self, job: api.JobInfo) -> None:
        """One more try of the results; after RESULT_TRIES failures in a row the job keeps the
        reason for good (shown by `job show`; `job results` tries again). Raises to be
        retried on the follower's schedule."""
        try:
            await self._fetch_results(job)
        except Exception as exc:
            why = _why(exc)
            tries = self._fetch_failures.get(job.job_id, 0) + 1
            self._fetch_failures[job.job_id] = tries
            current = self.ctx.store.get_job(job.job_id) or job
            if tries >= RESULT_TRIES:
                self._fetch_failures.pop(job.job_id, None)
                self._save(
                    msgspec.structs.replace(current, results_error=f"{why} (tried {tries} times)")
                )
                log.warning(
                    "job %s: results not fetched after %d tries: %s", job.job_id, tries, why
                )
                return
            raise
        self._fetch_failures.pop(job.job_id, None)

    async def _fetch_results(self, job: api.JobInfo) -> None:
        if job.results_size > MAX_RESULTS_BYTES:
            self._save(
                msgspec.structs.replace(
                    job,
                    results_error=f"results of {job.results_size} bytes: this node fetches "
                    f"at most {MAX_RESULTS_BYTES} bytes",
                )
            )
            return
        target = self.job_path(job.job_id, "results.tar.gz")
        partial = target.with_suffix(".part")
        partial.parent.mkdir(parents=True, exist_ok=True)
        parts = stalls = 0
        while True:
            have = _size(partial)
            if have > job.results_size:  # not this job's archive: start over
                partial.unlink()
                have = 0
            parts += 1
            try:
                path = await self._fetch_part(job, partial, have)
            except _NoStream as exc:
                # Not even a stream: a relay still counting the circuits that just ended
                # against our share, a connection being replaced. A few tries, further apart.
                stalls += 1
                if stalls >= RESULT_STALLS or parts >= RESULT_PARTS:
                    raise exc.original from None
                await trio.sleep(RESULT_STALL_S * 2 ** (stalls - 1))
                continue
            except Exception as exc:
                if _size(partial) == have:
                    raise  # nothing came: said as it was (a silent provider, a refusal)
                path, why = self._results_paths.get(job.job_id, ("", 0))[0], _why(exc)
            else:
                if _size(partial) in (have, job.results_size):
                    break  # all of it, or nothing more: the checksum says which
                why = "the stream ended early"
            # A cut (a relay's circuit at its data cap or time): on from where it stopped.
            stalls = 0
            if parts >= RESULT_PARTS:
                raise p.ProtocolError(
                    f"results: {_size(partial)} of {job.results_size} bytes after {parts} "
                    f"parts ({why})"
                )
            log.info(
                "job %s: results cut at %d of %d bytes %s (%s): resuming from there",
                job.job_id,
                _size(partial),
                job.results_size,
                path,
                why,
            )
        try:
            verify(partial, job.results_sha256, job.results_size)  # raises, clearly
        except BaseException:
            partial.unlink(missing_ok=True)  # never resumed from bytes that do not add up
            raise
        partial.replace(target)
        self._results_paths[job.job_id] = (path, parts)
        current = self.ctx.store.get_job(job.job_id) or job
        self._save(msgspec.structs.replace(current, results_dir=str(target), results_error=""))

    async def _fetch_part(self, job: api.JobInfo, partial: Path, have: int) -> str:
        """The results' bytes from ``have`` on, appended to ``partial`` until the stream ends;
        returns the path the stream took ("direct", "via relay …")."""
        service = self._service()
        try:
            stream = await self._open(service, job.provider)
        except Exception as exc:
            raise _NoStream(exc) from exc
        path = service.path(job.provider, stream)
        self._results_paths[job.job_id] = (path, 0)
        try:
            fetch = p.FetchResults(job_id=job.job_id, offset=have)
            await p.send(stream, self.ctx.identity, fetch)
            with _waiting(RESULT_CHUNK_S, "for the results' header"):
                received = await p.receive(stream, job.provider)
            if received is None or not isinstance(received[0], p.ResultsHeader):
                raise p.ProtocolError("the provider did not send results")
            header = received[0]
            # Before a byte is written: the size and checksum the provider signed at the end of
            # the job bound what we accept (a header may not announce more).
            if header.sha256 != job.results_sha256 or header.size != job.results_size:
                raise p.ProtocolError("results header does not match the job's checksum and size")
            # A provider of before issue 24 sends everything (offset 0): we start over.
            if header.offset not in (0, have):
                raise p.ProtocolError(f"results resumed at {header.offset}, asked {have}")
            got = header.offset
            transfer_s = RESULT_TRANSFER_S + (header.size - got) / RESULT_MIN_RATE
            with (
                _waiting(transfer_s, f"for {header.size - got} bytes of results"),
                partial.open("ab" if got else "wb") as handle,
            ):
                while got < header.size:
                    with _waiting(RESULT_CHUNK_S, "for the next bytes of the results"):
                        chunk = await stream.read(min(p.RESULT_CHUNK, header.size - got))
                    if not chunk:
                        break
                    got += len(chunk)
                    handle.write(chunk)
        finally:
            with contextlib.suppress(Exception):
                await stream.close()
        return path

    async def results(self, command: api.FetchJobResults) -> api.JobResults:
        job = self.ctx.store.get_job(command.job_id.strip())
        if job is None:
            raise EngineError("not_found", f"no job {command.job_id!r}; `nunet-tui job list`")
        if job.role != "consumer":
            raise EngineError("invalid", "results are fetched by the job's consumer")
        if job.results_error:  # given up on in the background: once more, now
            try:
                await self._fetch_results(job)
            except Exception as exc:
                raise EngineError(
                    "no_results",
                    f"the results of {job.job_id} could not be fetched: {_why(exc)} "
                    f"(before: {job.results_error})",
                ) from None
            job = self._save(
                msgspec.structs.replace(self.ctx.store.get_job(job.job_id) or job, results_error="")
            )
        if not job.results_dir:
            state = "still running" if job.state not in api.TERMINAL_STATES else job.state
            raise EngineError("no_results", f"job {job.job_id} has no results yet ({state})")
        archive = Path(job.results_dir)
        out = Path(command.out_dir).expanduser()
        unpacked = await trio.to_thread.run_sync(_unpack, job, archive, out)
        path, parts = self._results_paths.get(job.job_id, ("", 0))
        return msgspec.structs.replace(unpacked, path=path, parts=parts)

    async def delete_results(self, command: api.DeleteJobResults) -> api.Done:
        """`notebook delete`: a finished job's files removed on its provider (helper D;
        engine/jobs/notebooks.py). Our own fetched copy stays for `job results`."""
        job = self.ctx.store.get_job(command.job_id.strip())
        if job is None or job.role != "consumer":
            raise EngineError(
                "not_found", f"no job {command.job_id!r} of yours; `nunet-tui job list`"
            )
        if job.state not in api.TERMINAL_STATES:
            raise EngineError(
                "not_finished", f"job {job.job_id} is {job.state}: stop it first (notebook stop)"
            )
        if self._results_missing(job):  # never delete the only copy
            raise EngineError("not_fetched", f"job {job.job_id}'s files are not fetched yet")
        answer = await self._ask(self._service(), job.provider, p.DeleteResults(job_id=job.job_id))
        if not isinstance(answer, p.Accepted):
            why = answer.reason if isinstance(answer, p.Refusal) else "an unexpected answer"
            raise EngineError("refused", f"the provider did not delete the files: {why}")
        return api.Done(message=f"job {job.job_id}'s files were deleted on its provider")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _unpack(job: api.JobInfo, archive: Path, out: Path) -> api.JobResults:
    """Off the trio loop: hashing and unpacking a large archive takes a while."""
    if sha256_file(archive) != job.results_sha256:
        raise EngineError("corrupt", f"the stored results of {job.job_id} are damaged")
    # Each call unpacks into a new folder (name, name-2, ...): runs never overwrite.
    try:
        directory = safe_unpack(archive, out, job.job_id)
    except EngineError as exc:
        if exc.code != "unsafe_archive":
            raise
        raise EngineError(
            "unsafe_archive",
            f"the results of {job.job_id} from its provider were refused (nothing was "
            f"written): {exc.message.removeprefix('the archive was refused: ')}",
        ) from None
    files = sorted(str(f.relative_to(directory)) for f in directory.rglob("*") if f.is_file())
    return api.JobResults(
        job_id=job.job_id,
        directory=str(directory),
        files=tuple(files),
        sha256=job.results_sha256,
        size=job.results_size,
    )
