"""``FakeNetwork`` (``NetworkPort``) and ``FakePeerLink`` (``PeerLink``): the network as the
jobs see it, in memory. Streams are pairs of in-memory pipes; a remote peer is any handler
(a ``FakeProviderPeer`` script, or a real ``ProviderJobs.handle``)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import trio

from engine import api
from engine.domain import wire
from engine.domain.peer_info import PeerInfo
from engine.domain.ratelimit import PeerRateLimiter
from engine.errors import EngineError
from engine.identity import Identity
from engine.jobs import protocol as p
from engine.ports import StreamHandler


class FakeStream:
    """One end of an in-memory stream, with the remote peer where libp2p keeps it."""

    def __init__(
        self,
        remote: str,
        inbox: trio.MemoryReceiveChannel[bytes],
        outbox: trio.MemorySendChannel[bytes],
    ) -> None:
        self.muxed_conn = SimpleNamespace(peer_id=remote)
        self._inbox = inbox
        self._outbox = outbox
        self._buffer = bytearray()

    async def read(self, n: int = 65536) -> bytes:
        while not self._buffer:
            try:
                self._buffer += await self._inbox.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                return b""
        chunk = bytes(self._buffer[:n])
        del self._buffer[:n]
        return chunk

    async def write(self, data: bytes) -> None:
        await self._outbox.send(bytes(data))

    async def close(self) -> None:
        await self._outbox.aclose()

    async def reset(self) -> None:
        await self._outbox.aclose()
        await self._inbox.aclose()


def stream_pair(local: str, remote: str) -> tuple[FakeStream, FakeStream]:
    """(our end, whose remote is ``remote``; their end, whose remote is ``local``)."""
    to_them, their_inbox = trio.open_memory_channel[bytes](math.inf)
    to_us, our_inbox = trio.open_memory_channel[bytes](math.inf)
    return FakeStream(remote, our_inbox, to_them), FakeStream(local, their_inbox, to_us)


def provider_info(
    peer_id: str, *, cpu_mhz: int = 8000, prices: dict[str, float] | None = None
) -> PeerInfo:
    """A provider as discovery lists it: its signed advert's figures."""
    advert = wire.Advert(
        peer_id=peer_id,
        channel="c",
        cpu_mhz=cpu_mhz,
        ram_mb=16384,
        prices=prices or {"low": 1.0, "moderate": 2.5, "high": 6.0},
        executors=("process",),
        frameworks=("pytorch", "tensorflow", "scikit-learn"),
    )
    return PeerInfo(peer_id=peer_id, channel="c", advert=advert, last_seen=time.time())


@dataclass
class FakePeerLink:
    """The running service: the listed peers, and a handler per reachable remote peer."""

    me: str
    listed: list[PeerInfo] = field(default_factory=list)
    remotes: dict[str, StreamHandler] = field(default_factory=dict)
    nursery: trio.Nursery | None = None  # runs the remote peers' handlers
    opened: list[tuple[str, str]] = field(default_factory=list)
    served: dict[str, StreamHandler] = field(default_factory=dict)

    def add(self, info: PeerInfo, handler: StreamHandler | None = None) -> None:
        self.listed.append(info)
        if handler is not None:
            self.remotes[info.peer_id] = handler

    def peers(self) -> list[PeerInfo]:
        return list(self.listed)

    def peer(self, peer_id: str) -> PeerInfo | None:
        return next((info for info in self.listed if info.peer_id == peer_id), None)

    async def open_stream(self, peer_id: str, protocol: str) -> Any:
        self.opened.append((peer_id, protocol))
        handler = self.remotes.get(peer_id)
        if handler is None:
            raise ConnectionError(f"no route to {peer_id}")
        assert self.nursery is not None, "give the FakePeerLink a nursery for its peers"
        ours, theirs = stream_pair(self.me, peer_id)
        self.nursery.start_soon(handler, theirs)
        return ours

    def path(self, peer_id: str, stream: Any = None) -> str:
        return "direct" if peer_id in self.remotes else ""

    def set_stream_handler(self, protocol: str, handler: StreamHandler) -> None:
        self.served[protocol] = handler


@dataclass
class FakeNetwork:
    """``NetworkPort``: ``link`` None is a network that is not up."""

    link: FakePeerLink | None = None
    beats: int = 0

    def require_service(self, what: str) -> FakePeerLink:
        if self.link is None:
            raise EngineError("offline", f"{what}: the network is not up yet")
        return self.link

    def beat_now(self) -> None:
        self.beats += 1


@dataclass
class FakeProviderPeer:
    """A remote provider that speaks the job protocol from a script: it quotes every offer
    at ``total_ntx`` (or refuses it with ``refuse``) and accepts every confirm (or refuses it
    with ``refuse_confirm``; or, ``silent``, never answers one, nor a Release unless
    ``releases``: then it refuses the Release, it will never run the job)."""

    identity: Identity
    total_ntx: float = 0.5
    refuse: str = ""
    payment_address: str = ""
    refuse_confirm: str = ""
    silent: bool = False
    releases: bool = False
    # The real provider's per-consumer offer rate (provider.py), when a test wants it.
    offer_limit: PeerRateLimiter | None = None
    received: list[p.AnyJobMessage] = field(default_factory=list)

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id

    async def handle(self, stream: FakeStream) -> None:
        got = await p.receive(stream, p.remote_peer(stream))
        if got is None:
            return
        message, _ = got
        self.received.append(message)
        answer: p.JobMessage
        refuse = self.refuse
        limit = self.offer_limit
        if isinstance(message, p.Offer) and limit and not limit.allow(p.remote_peer(stream)):
            refuse = "too many offers from you"
        if isinstance(message, p.Offer):
            answer = (
                p.refusal(message.job_id, refuse)
                if refuse
                else p.Quote(
                    job_id=message.job_id,
                    provider=self.peer_id,
                    price_ntx_hour=self.total_ntx * 6,
                    total_ntx=self.total_ntx,
                    expires_at=time.time() + 60,
                    executor="process",
                    payment_address=self.payment_address,
                )
            )
        elif isinstance(message, p.Release) and self.releases:
            answer = p.refusal(message.job_id, "released")
        elif self.silent and isinstance(message, p.Confirm | p.Release):
            await trio.sleep(1.5)  # holds the stream past the consumer's wait, silent
            return
        elif isinstance(message, p.Confirm):
            answer = (
                p.refusal(message.job_id, self.refuse_confirm)
                if self.refuse_confirm
                else p.Accepted(job_id=message.job_id)
            )
        else:
            answer = p.refusal(message.job_id, "this script answers offers and confirms only")
        await p.send(stream, self.identity, answer)
        await stream.close()


def no_job_events(events: list[api.Event]) -> bool:
    return not any(isinstance(event, api.JobChanged) for event in events)
