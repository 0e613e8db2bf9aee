"""Stream exhaustion: one peer opens idle streams well past every cap (muxer streams that
never negotiate, job streams that never ask) and streams that each hold a large partial frame,
against a real provider daemon; the provider resets them at its caps and deadlines, its memory
stays bounded, and an honest consumer's job on it completes meanwhile.

Before the fix: 9,998 idle ``/nunet/job`` streams made the node unusable for everyone (the
handler waited for a first frame for ever, and py-libp2p's node-wide 10,000-stream cap was
reached), and 100 streams each holding a 1 MiB partial frame cost 100 MB.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from engine.domain import wire
from engine.jobs import protocol as p
from engine.jobs.provider import FIRST_FRAME_S, STREAMS_PER_PEER
from engine.network.host import MAX_INBOUND_STREAMS_PER_PEER
from tests.adversarial.hostile import JOB_PROTOCOL, HostilePeer
from tests.daemon_harness import Daemon, wait_for
from tests.daemons.test_jobs_e2e import _pair, _state, _submit, scripts

__all__ = ["scripts"]

IDLE_STREAMS = 200  # past both caps (128 per peer in all, 16 job streams per peer)
RAW_STREAMS = 300  # muxer streams that never even negotiate a protocol
PARTIAL_STREAMS = 100
# The provider's RSS may grow by this much while it is attacked (measured on 2 cores: 5 MB
# for the idle streams, 13 MB for the partial frames, an honest job running meanwhile; the
# 100 partial frames alone cost 100 MB before the fix).
RSS_GROWTH_LIMIT_MB = 30.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


class RssWatch:
    """The highest RSS of a process, sampled every 50 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_mb(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.peak = max(self.peak, rss_mb(self.pid))
            except (OSError, AssertionError):
                return  # the process is gone: the test says why

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(5)
        return self.peak


# --- in the hostile peer's trio loop ---------------------------------------------------------


async def _open_many(
    peer: HostilePeer,
    victim: str,
    count: int,
    concurrency: int,
    raw: bool = False,
    why: dict[str, int] | None = None,
) -> tuple[list[Any], int]:
    """Open ``count`` streams (``raw``: muxer streams, no protocol negotiated), write nothing;
    the ones the victim took, and how many it turned away at once (``why``: counted by the
    error each open ended with)."""
    from libp2p.custom_types import TProtocol

    from engine.network.host import peer_id_of

    held: list[Any] = []
    refused = 0
    gate = trio.Semaphore(concurrency)
    pid = peer_id_of(victim)

    async def one() -> None:
        nonlocal refused
        async with gate:
            try:
                with trio.fail_after(30):
                    if raw:
                        conn = peer.host.get_network().get_connections(pid)[0]
                        held.append(await conn.muxed_conn.open_stream())
                    else:
                        held.append(await peer.host.new_stream(pid, [TProtocol(JOB_PROTOCOL)]))
            except Exception as exc:
                refused += 1  # reset during negotiation, or never answered
                if why is not None:
                    name = type(exc).__name__
                    why[name] = why.get(name, 0) + 1

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)
    return held, refused


async def _still_open(streams: list[Any], probe_s: float = 0.5) -> int:
    """How many of ``streams`` the victim has neither reset nor closed: a read still waits
    after ``probe_s`` (what the victim wrote, a multistream header, is read and dropped)."""
    waiting = 0

    async def probe(stream: Any) -> None:
        nonlocal waiting
        with trio.move_on_after(probe_s):
            try:
                while await stream.read(65536):
                    pass
            except Exception:
                pass
            return  # ended: reset or closed
        waiting += 1

    async with trio.open_nursery() as nursery:
        for stream in streams:
            nursery.start_soon(probe, stream)
    return waiting


async def _until_all_ended(streams: list[Any], within_s: float) -> float:
    """Seconds until none of ``streams`` is open any more (AssertionError past ``within_s``)."""
    began = trio.current_time()
    while (left := await _still_open(streams)) > 0:
        if trio.current_time() - began > within_s:
            raise AssertionError(f"{left} stream(s) still open after {within_s:.0f} s")
    return trio.current_time() - began


async def _partial_frames(
    peer: HostilePeer, victim: str, count: int, announced: int, sent: int
) -> list[Any]:
    """``count`` job streams, each announcing ``announced`` bytes and sending ``sent`` of them."""
    streams, _ = await _open_many(peer, victim, count, concurrency=count)
    prefix = wire.encode_varint(announced)

    async def fill(stream: Any) -> None:
        # A reset while we write is what the victim should do with a huge frame.
        with trio.move_on_after(5), contextlib.suppress(Exception):
            await stream.write(prefix + bytes(sent))

    async with trio.open_nursery() as nursery:
        for stream in streams:
            nursery.start_soon(fill, stream)
    return streams


async def _half_closed(peer: HostilePeer, victim: str) -> str:
    """Open a job stream and close our side at once: how the victim ends its side."""
    from libp2p.custom_types import TProtocol

    from engine.network.host import peer_id_of

    stream = await peer.host.new_stream(peer_id_of(victim), [TProtocol(JOB_PROTOCOL)])
    await stream.close()
    with trio.move_on_after(FIRST_FRAME_S + 5):
        try:
            data = await stream.read(1)
        except Exception as exc:
            return "eof" if type(exc).__name__ == "StreamEOF" else type(exc).__name__
        return "eof" if not data else "data"
    return "left open"


def _in_background(report: dict[str, Any], phases: Callable[[], None]) -> threading.Thread:
    """Run the attack's phases in a thread (the test thread meanwhile runs an honest job)."""

    def run() -> None:
        try:
            phases()
        except BaseException as exc:  # reported to the test thread
            report["error"] = exc
        finally:
            report["done"] = True

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@dataclass
class Attacked:
    provider: Daemon
    consumer: Daemon
    peer: HostilePeer
    watch: RssWatch  # the provider's RSS, from before the attack
    baseline: float

    @property
    def victim(self) -> str:
        return self.provider.peer_id


def attacked(
    daemons: Callable[..., Daemon],
    hostile: Callable[..., HostilePeer],
    seed: bytes,
    env: dict[str, str] | None = None,
) -> Attacked:
    """A provider (``env``: its environment) and its honest consumer, a hostile peer connected
    to the provider, and the provider's RSS watched from now on."""
    provider, consumer = _pair(daemons, env=env)
    peer = hostile(seed=seed, bootstrap=[provider.addrs()[0]])
    peer.wait_connected(provider.peer_id)
    assert provider.proc is not None
    watch = RssWatch(provider.proc.pid)
    return Attacked(provider, consumer, peer, watch, watch.peak)


def _honest_job_during(
    consumer: Daemon, provider: Daemon, url: str, report: dict[str, Any], attack: threading.Thread
) -> None:
    """An honest consumer's job on the attacked provider completes, while the attack runs."""
    job = _submit(consumer, url, name="honest")
    assert job["state"] == "accepted" and job["provider"] == provider.peer_id
    attack.join(90)
    assert report.get("done"), f"the attack never finished: {report}"
    assert "error" not in report, report
    wait_for(lambda: _state(consumer, job["job_id"]) == "completed", "honest job failed", 60)


def test_idle_streams_are_capped_per_peer_and_reset_at_the_deadline(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer], scripts: str
) -> None:
    at = attacked(daemons, hostile, b"\x51" * 32)
    peer, victim = at.peer, at.victim
    report: dict[str, Any] = {}

    def phases() -> None:
        # Muxer streams that never negotiate a protocol: the resource manager's per-peer cap
        # resets the ones past it at once; py-libp2p's negotiation timeout ends the rest.
        raw, _ = peer.call(_open_many, peer, victim, RAW_STREAMS, 300, True)
        report["raw_open_at_once"] = peer.call(_still_open, raw, 3.0)
        report["raw_ended_in_s"] = peer.call(_until_all_ended, raw, 30.0)
        # Job streams that send nothing: the handler serves its per-peer cap and resets the
        # rest at once; those it serves are reset when their first frame does not come.
        why: dict[str, int] = {}
        report["idle_errors"] = why
        idle, refused = peer.call(_open_many, peer, victim, IDLE_STREAMS, 50, False, why)
        report["idle_taken"], report["idle_refused"] = len(idle), refused
        report["idle_open_at_once"] = peer.call(_still_open, idle, 1.0)
        report["idle_ended_in_s"] = peer.call(_until_all_ended, idle, FIRST_FRAME_S + 10)
        report["half_closed"] = peer.call(_half_closed, peer, victim)

    attack = _in_background(report, phases)
    wait_for(lambda: "raw_open_at_once" in report or "done" in report, "no attack", 60)
    _honest_job_during(at.consumer, at.provider, f"{scripts}/iris.py", report, attack)
    peak = at.watch.stop()
    print(f"\nidle streams: {report}; RSS {at.baseline:.0f} -> {peak:.0f} MB")
    assert 0 < report["raw_open_at_once"] <= MAX_INBOUND_STREAMS_PER_PEER
    assert report["raw_ended_in_s"] <= 30
    assert report["idle_taken"] + report["idle_refused"] == IDLE_STREAMS
    assert 0 < report["idle_open_at_once"] <= STREAMS_PER_PEER
    assert report["idle_ended_in_s"] <= FIRST_FRAME_S + 10
    # A stream the peer half-closed without asking anything is closed, not left open.
    assert report["half_closed"] == "eof"
    assert peak - at.baseline < RSS_GROWTH_LIMIT_MB, (at.baseline, peak)


def test_partial_frames_are_bounded_and_reset_at_the_deadline(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer], scripts: str
) -> None:
    at = attacked(daemons, hostile, b"\x52" * 32)
    peer, victim = at.peer, at.victim
    report: dict[str, Any] = {}

    def phases() -> None:
        # 100 streams each announcing a 1 MiB frame and sending all but its last byte: the
        # announced length is over the request limit, so each is reset at its prefix.
        huge = peer.call(_partial_frames, peer, victim, PARTIAL_STREAMS, 1 << 20, (1 << 20) - 1)
        report["huge_open_at_once"] = peer.call(_still_open, huge)
        # Frames just under the limit: only the per-peer cap of streams is read at all, each
        # reset at the deadline; what the provider buffers is bounded by cap x limit.
        near = p.MAX_REQUEST_BYTES - 1024
        partial = peer.call(_partial_frames, peer, victim, PARTIAL_STREAMS, near, near - 1)
        report["partial_open_at_once"] = peer.call(_still_open, partial)
        report["partial_ended_in_s"] = peer.call(_until_all_ended, partial, FIRST_FRAME_S + 10)

    attack = _in_background(report, phases)
    _honest_job_during(at.consumer, at.provider, f"{scripts}/iris.py", report, attack)
    peak = at.watch.stop()
    print(f"\npartial frames: {report}; RSS {at.baseline:.0f} -> {peak:.0f} MB")
    assert report["huge_open_at_once"] == 0
    assert 0 < report["partial_open_at_once"] <= STREAMS_PER_PEER
    assert report["partial_ended_in_s"] <= FIRST_FRAME_S + 10
    assert peak - at.baseline < RSS_GROWTH_LIMIT_MB, (at.baseline, peak)
