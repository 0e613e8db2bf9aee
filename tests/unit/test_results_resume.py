"""Results fetched in parts (issue 24): a relay ends a circuit at its data cap, the transfer goes
on from its offset over a new stream, and what arrives is still checked against the signed
checksum. Also the wire's bounds on the offset."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from engine import api
from engine.errors import EngineError
from engine.jobs import protocol as p
from tests.fakes.context import identity
from tests.fakes.network import FakeProviderPeer
from tests.unit.test_unit_consumer_jobs import spec, world

ARCHIVE = os.urandom(50_000)


class CutsEveryPart(FakeProviderPeer):
    """Serves ``ARCHIVE`` from the offset asked, at most ``cap`` bytes a stream (a relay's
    circuit cap), then closes; ``corrupt``: one byte of the second part flipped."""

    cap: int = 12_000
    corrupt: bool = False
    offsets: list[int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.offsets = []

    async def handle(self, stream: Any) -> None:
        got = await p.receive(stream, p.remote_peer(stream))
        assert got is not None and isinstance(got[0], p.FetchResults)
        offset = got[0].offset
        self.offsets.append(offset)
        header = p.ResultsHeader(
            job_id=got[0].job_id,
            sha256=hashlib.sha256(ARCHIVE).hexdigest(),
            size=len(ARCHIVE),
            offset=offset,
        )
        await p.send(stream, self.identity, header)
        part = bytearray(ARCHIVE[offset : offset + self.cap])
        if self.corrupt and len(self.offsets) == 2:
            part[0] ^= 0xFF
        await stream.write(bytes(part))
        await stream.close()


def _fetch(tmp_path: Path, peer: CutsEveryPart) -> tuple[Any, api.JobInfo, BaseException | None]:
    consumer, link, _ = world(tmp_path, (peer, 0.5))
    job = api.JobInfo(
        job_id="a1b2c3d4e5f6",
        role="consumer",
        state="completed",
        provider=peer.peer_id,
        consumer=consumer.ctx.identity.peer_id,
        spec=spec(),
        results_sha256=hashlib.sha256(ARCHIVE).hexdigest(),
        results_size=len(ARCHIVE),
    )
    consumer.ctx.store.save_job(job)

    async def fetch() -> BaseException | None:
        async with trio.open_nursery() as nursery:
            link.nursery = nursery
            try:
                await consumer._fetch_results(job)
            except Exception as exc:
                return exc
        return None

    return consumer, job, trio.run(fetch)


def test_results_cut_at_each_circuits_cap_resume_from_their_offset(tmp_path: Path) -> None:
    peer = CutsEveryPart(identity(10))
    consumer, job, failed = _fetch(tmp_path, peer)
    assert failed is None
    assert peer.offsets == [0, 12_000, 24_000, 36_000, 48_000]
    stored = consumer.ctx.store.get_job(job.job_id)
    assert Path(stored.results_dir).read_bytes() == ARCHIVE
    assert consumer._results_paths[job.job_id] == ("direct", 5)


def test_a_resumed_part_that_breaks_the_checksum_is_refused_and_not_resumed_from(
    tmp_path: Path,
) -> None:
    peer = CutsEveryPart(identity(10))
    peer.corrupt = True
    consumer, job, failed = _fetch(tmp_path, peer)
    assert isinstance(failed, EngineError) and "checksum mismatch" in failed.message
    assert not list(consumer.job_dir(job.job_id).glob("*.part"))  # the next try starts over
    assert not (consumer.ctx.store.get_job(job.job_id) or job).results_dir


def test_the_offset_is_bounded_on_the_wire() -> None:
    for offset in (-1, (1 << 40) + 1):
        raw = msgspec.msgpack.encode(
            {"t": "fetch_results", "v": 1, "job_id": "a1b2c3d4e5f6", "offset": offset}
        )
        with pytest.raises(msgspec.ValidationError):
            msgspec.msgpack.decode(raw, type=p.FetchResults)
    assert p.FetchResults(job_id="a1b2c3d4e5f6").offset == 0  # an older consumer's: all
