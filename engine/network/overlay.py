"""The overlay's carriage (issue 25 §2; docs/cluster-overlay.md): a job's IP packets between
the providers running its replicas, over libp2p streams on ``/nunet/overlay/1.0.0``.

Each node opens one stream to each other member of the job and sends on it only; it receives
on the streams the others open to it. A stream starts with a hello (one length byte and the
job id), answered with one byte (1: accepted) or a reset, then carries frames: a 2-byte
big-endian length and one IPv4 packet.

What crosses, and what is refused (each refusal counted in the job's ``OverlayStats``):
- only the job's members: a stream from a peer that is not in the job's allowlist (the
  remote peer id is the secure channel's, not a claim) is reset before a byte is read past
  the hello; two streams at most per member;
- only IPv4 packets of at most ``MTU`` bytes whose source is the sending member's own address
  and whose destination is ours (domain/overlay_packets.py); a frame longer than the MTU
  ends the stream;
- at most ``rate_bytes_s`` per member each way (a token bucket; past it packets are dropped,
  as a router drops, and TCP inside backs off), and ``queue_bytes`` queued per
  member outwards (then dropped).
Bytes are metered per job, in and out: the IP packets as the container sent or received them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import struct
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import trio

from engine import api
from engine.domain.overlay_packets import MTU, OverlayError, check_members, endpoints
from engine.ports import PacketDevice

log = logging.getLogger("nunet.network.overlay")

OVERLAY_PROTOCOL = "/nunet/overlay/1.0.0"
HELLO_S = 10.0  # a stream's hello arrives within this or the stream is reset
# Per member and direction. A bound on a member, not a throttle: gloo's 4 MiB all-reduces
# came in bursts past 64 MiB/s with 4 MiB of burst (a few packets dropped per 200 MiB,
# each a TCP retransmission inside), while the carriage itself moves about 60 MiB/s.
RATE_BYTES_S = 256 * 1024 * 1024
BURST_BYTES = 16 * 1024 * 1024
QUEUE_BYTES = 4 * 1024 * 1024  # per member, outwards: past it packets are dropped
QUEUE_PACKETS = 4096  # and at most this many
STREAMS_PER_MEMBER = 2  # inbound, at once (one, and its replacement while the old one ends)
BATCH_BYTES = 64 * 1024  # packets written to a stream in one write, at most
REDIAL_S = (0.2, 5.0)  # a member not reachable yet (or not joined yet): first and last pause
ENDED_KEPT = 256  # figures of ended overlays kept for OverlayStatus
ACCEPTED = b"\x01"  # the answer to a member's hello; a stranger's stream is reset instead


class OverlayLink(Protocol):
    """What the carriage needs of the running network service."""

    async def open_stream(self, peer_id: str, protocol: str) -> Any: ...


class Bucket:
    """A token bucket of bytes: ``allow(n)`` spends n when there are n (else False), ``wait``
    how long until there are."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.at = trio.current_time()

    def _refill(self) -> None:
        now = trio.current_time()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def allow(self, n: int) -> bool:
        self._refill()
        if self.tokens >= n:
            self.tokens -= n
            return True
        return False

    def wait(self, n: int) -> float:
        self._refill()
        return max(0.0, (n - self.tokens) / self.rate)


@dataclass
class _Member:
    peer_id: str
    address: bytes
    queue_send: trio.MemorySendChannel[bytes]
    queue_receive: trio.MemoryReceiveChannel[bytes]
    bucket_in: Bucket
    bucket_out: Bucket
    queued: int = 0  # bytes in the queue now
    inbound: int = 0  # streams from it open now


@dataclass
class _Session:
    job_id: str
    subnet: str
    address: bytes
    members: tuple[api.OverlayMember, ...]
    device: PacketDevice
    peers: dict[str, _Member] = field(default_factory=dict)
    by_address: dict[bytes, _Member] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def stats(self) -> api.OverlayStats:
        c = self.counts
        return api.OverlayStats(
            job_id=self.job_id,
            address=str(ipaddress.IPv4Address(self.address)),
            subnet=self.subnet,
            members=self.members,
            bytes_out=c.get("bytes_out", 0),
            bytes_in=c.get("bytes_in", 0),
            packets_out=c.get("packets_out", 0),
            packets_in=c.get("packets_in", 0),
            dropped_out=c.get("dropped_out", 0),
            dropped_in=c.get("dropped_in", 0),
            strangers_refused=c.get("strangers_refused", 0),
            peers_connected=sum(1 for m in self.peers.values() if m.inbound),
        )


class OverlayCarrier:
    """Every job's overlay on this node: ``carry`` runs one (until cancelled), ``handle``
    serves the streams the other members open, ``stats`` reports the figures."""

    def __init__(
        self,
        link: Callable[[], OverlayLink],
        *,
        rate_bytes_s: int = RATE_BYTES_S,
        burst_bytes: int = BURST_BYTES,
        queue_bytes: int = QUEUE_BYTES,
    ) -> None:
        self._link = link
        self.rate_bytes_s = rate_bytes_s
        self.burst_bytes = max(burst_bytes, MTU)
        self.queue_bytes = queue_bytes
        self._sessions: dict[str, _Session] = {}
        self._ended: deque[api.OverlayStats] = deque(maxlen=ENDED_KEPT)
        self.strangers_refused = 0  # streams for no overlay of ours at all

    def stats(self, job_id: str = "") -> tuple[api.OverlayStats, ...]:
        live = [s.stats() for s in self._sessions.values()]
        every = [*live, *(s for s in self._ended if s.job_id not in self._sessions)]
        return tuple(s for s in every if not job_id or s.job_id == job_id)

    def joined(self, job_id: str) -> bool:
        return job_id in self._sessions

    async def carry(
        self,
        job_id: str,
        subnet: str,
        address: str,
        members: Sequence[api.OverlayMember],
        device: PacketDevice,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Pump ``device``'s packets to the job's other members and theirs to it, until
        cancelled. OverlayError for members that do not make an overlay."""
        if job_id in self._sessions:
            raise OverlayError(f"job {job_id} already has an overlay on this node")
        _net, own, others = check_members(
            subnet, address, [(m.peer_id, m.address) for m in members]
        )
        session = _Session(job_id, subnet, own, tuple(members), device)
        for peer_id, packed in others.items():
            send, receive = trio.open_memory_channel[bytes](QUEUE_PACKETS)
            member = _Member(
                peer_id,
                packed,
                send,
                receive,
                Bucket(self.rate_bytes_s, self.burst_bytes),
                Bucket(self.rate_bytes_s, self.burst_bytes),
            )
            session.peers[peer_id] = member
            session.by_address[packed] = member
        self._sessions[job_id] = session
        try:
            async with trio.open_nursery() as nursery:
                for member in session.peers.values():
                    nursery.start_soon(self._sender, session, member)
                task_status.started()
                await self._from_device(session)
        finally:
            del self._sessions[job_id]
            self._ended.append(msgspec.structs.replace(session.stats(), carrying=False))

    # --- outwards --------------------------------------------------------------------------

    async def _from_device(self, session: _Session) -> None:
        """Our replica's packets, each to the member it is for (or dropped)."""
        while True:
            try:
                packet = await session.device.read()
            except OSError as exc:
                log.info("overlay %s: the device is gone (%s)", session.job_id, exc)
                return
            ends = endpoints(packet)
            member = session.by_address.get(ends[1]) if ends else None
            if ends is None or member is None or ends[0] != session.address:
                session.add("dropped_out")
                continue
            if member.queued + len(packet) > self.queue_bytes:
                session.add("dropped_out")
                continue
            try:
                member.queue_send.send_nowait(packet)
            except trio.WouldBlock:
                session.add("dropped_out")
                continue
            member.queued += len(packet)

    async def _sender(self, session: _Session, member: _Member) -> None:
        """One stream to ``member``, opened again whenever it fails (the member may not have
        joined yet, or its provider restarted), carrying what the queue holds."""
        pause = REDIAL_S[0]
        pending: list[bytes] = []
        while True:
            try:
                stream = await self._link().open_stream(member.peer_id, OVERLAY_PROTOCOL)
            except Exception as exc:  # unreachable, not joined, the network restarting
                log.debug(
                    "overlay %s: no stream to %s yet: %s", session.job_id, member.peer_id, exc
                )
                await trio.sleep(pause)
                pause = min(REDIAL_S[1], pause * 2)
                continue
            try:
                hello = session.job_id.encode()
                await stream.write(bytes([len(hello)]) + hello)
                # Accepted only once the member says so: it may not have joined yet, and a
                # stream it reset would otherwise look open until the first packet is lost.
                with trio.fail_after(HELLO_S):
                    if await _read_exactly(stream, 1) != ACCEPTED:
                        raise OverlayError("refused")
                pause = REDIAL_S[0]
                while True:
                    pending = pending or await _batch(member)
                    size = sum(len(p) for p in pending)
                    # The rate bound outwards: wait for the tokens (the queue fills
                    # meanwhile, and drops past its bound).
                    await trio.sleep(member.bucket_out.wait(size))
                    member.bucket_out.allow(size)
                    await stream.write(b"".join(struct.pack("!H", len(p)) + p for p in pending))
                    session.add("bytes_out", size)
                    session.add("packets_out", len(pending))
                    pending = []
            except (Exception, trio.TooSlowError) as exc:  # a new stream (pending kept)
                log.info("overlay %s: stream to %s ended: %s", session.job_id, member.peer_id, exc)
                await _reset(stream)
                await trio.sleep(pause)
                pause = min(REDIAL_S[1], pause * 2)

    # --- inwards ---------------------------------------------------------------------------

    async def handle(self, stream: Any) -> None:
        """A stream another node opened: its hello names the job; only a member of it is
        heard, and only its own packets for our replica reach the device."""
        peer_id = str(stream.muxed_conn.peer_id)
        try:
            with trio.fail_after(HELLO_S):
                size = (await _read_exactly(stream, 1))[0]
                job_id = (await _read_exactly(stream, size)).decode("ascii", "replace")
        except (Exception, trio.TooSlowError):
            await _reset(stream)
            return
        session = self._sessions.get(job_id)
        member = session.peers.get(peer_id) if session else None
        if session is None or member is None:
            if session is not None:
                session.add("strangers_refused")
            else:
                self.strangers_refused += 1
            log.info("overlay: refused a stream from %s for job %r (not a member)", peer_id, job_id)
            await _reset(stream)
            return
        if member.inbound >= STREAMS_PER_MEMBER:
            session.add("strangers_refused")
            await _reset(stream)
            return
        member.inbound += 1
        try:
            await stream.write(ACCEPTED)
            await self._receive(session, member, stream)
        except Exception as exc:
            log.info("overlay %s: stream from %s ended: %s", job_id, peer_id, exc)
        finally:
            member.inbound -= 1
            await _reset(stream)

    async def _receive(self, session: _Session, member: _Member, stream: Any) -> None:
        buffer = bytearray()
        while True:
            chunk = await stream.read(BATCH_BYTES)
            if not chunk:
                return
            buffer += chunk
            while len(buffer) >= 2:
                (size,) = struct.unpack_from("!H", buffer)
                if size > MTU:
                    session.add("dropped_in")
                    raise OverlayError(f"a frame of {size} bytes (the MTU is {MTU})")
                if len(buffer) < 2 + size:
                    break
                packet = bytes(buffer[2 : 2 + size])
                del buffer[: 2 + size]
                self._deliver(session, member, packet)

    def _deliver(self, session: _Session, member: _Member, packet: bytes) -> None:
        ends = endpoints(packet)
        if (
            ends is None
            or ends[0] != member.address
            or ends[1] != session.address
            or not member.bucket_in.allow(len(packet))
            or not session.device.write(packet)
        ):
            session.add("dropped_in")
            return
        session.add("bytes_in", len(packet))
        session.add("packets_in")


async def _batch(member: _Member) -> list[bytes]:
    """The next packets queued for ``member``: one (waited for), then what else is there, up
    to BATCH_BYTES, so a burst is written (and encrypted) at once."""
    batch = [await member.queue_receive.receive()]
    size = len(batch[0])
    while size < BATCH_BYTES:
        try:
            packet = member.queue_receive.receive_nowait()
        except trio.WouldBlock:
            break
        batch.append(packet)
        size += len(packet)
    member.queued -= size
    return batch


async def _read_exactly(stream: Any, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = await stream.read(n - len(data))
        if not chunk:
            raise EOFError("the stream ended")
        data += chunk
    return data


async def _reset(stream: Any) -> None:
    with contextlib.suppress(Exception):  # already gone
        await stream.reset()
