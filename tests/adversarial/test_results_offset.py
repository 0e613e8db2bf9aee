"""Where a results transfer resumes (issue 24) is the consumer's to say, within bounds: against a
real provider daemon, the job's own consumer (its key, from a hostile peer once its daemon is
gone) asks for the results from offsets past the archive, negative and huge: each is refused or
reset with nothing sent; an offset inside the archive gets exactly its tail, from a signed
header that says where it starts."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from engine.domain import wire
from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer, open_job, seal_job
from tests.daemon_harness import Daemon, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, _submit, scripts

__all__ = ["scripts"]

CONSUMER_SEED = bytes([31]) * 32  # the consumer of test_jobs_e2e._pair


def _fetch(peer: HostilePeer, provider_id: str, message: dict[str, Any]) -> tuple[Any, bytes]:
    """The first frame's message (None: none, the stream was reset) and the raw bytes after."""
    from libp2p.custom_types import TProtocol

    from engine.network.host import peer_id_of

    async def ask() -> tuple[Any, bytes]:
        with trio.fail_after(20):
            stream = await peer.host.new_stream(peer_id_of(provider_id), [TProtocol(JOB_PROTOCOL)])
        first: Any = None
        rest = bytearray()
        try:
            await stream.write(seal_job(peer.identity, message))
            with trio.move_on_after(10):
                frame = await wire.read_frame(stream, 1 << 20)
                if frame is not None:
                    first = open_job(frame)
                    while chunk := await stream.read(1 << 16):
                        rest += chunk
        except Exception:  # the provider reset the stream: what came before counts
            pass
        finally:
            with contextlib.suppress(Exception):
                await stream.reset()
        return first, bytes(rest)

    return peer.call(ask)


@pytest.mark.timeout(240)
def test_results_offsets_are_bounded_and_resume_exactly(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    scripts: str,
) -> None:
    """A real job on a real provider, then the consumer's key from a hostile peer: ~40 s."""
    provider, consumer = _pair(daemons)
    job_id = _submit(consumer, f"{scripts}/iris.py")["job_id"]
    wait_for(lambda: _state(consumer, job_id) == "completed", "the job never ran", 90)
    shown = provider.cli("job", "show", job_id)
    archive = Path(shown["results_dir"]).read_bytes()
    size = shown["results_size"]
    assert len(archive) == size > 20
    consumer.stop(kill=True)  # its key is ours now
    peer = hostile(seed=CONSUMER_SEED, bootstrap=[provider.addrs()[0]])
    assert peer.peer_id == shown["consumer"]
    peer.wait_connected(provider.peer_id)

    def ask(offset: Any) -> tuple[Any, bytes]:
        return _fetch(
            peer,
            provider.peer_id,
            {"t": "fetch_results", "v": 1, "job_id": job_id, "offset": offset},
        )

    header, tail = ask(size - 10)
    assert header["t"] == "results" and header["offset"] == size - 10 and header["size"] == size
    assert tail == archive[-10:]
    header, whole = ask(0)
    assert header["offset"] == 0 and whole == archive
    header, nothing = ask(size)  # at the end: a header and no bytes
    assert header["offset"] == size and nothing == b""

    refused, sent = ask(size + 1)
    assert refused["t"] == "refusal" and "past the results" in refused["reason"] and sent == b""
    for bad in (-1, (1 << 40) + 1, "12", 1.5):
        first, sent = ask(bad)
        assert first is None or first["t"] == "refusal", (bad, first)
        assert sent == b"", bad
