"""Chat over direct streams (``/nunet/chat/1.0.0``): requests, joins, ordered acked messages.

One outbound stream per peer, used under a lock, so messages of a conversation arrive in the
order they were sent; every frame is acknowledged after the receiver's hook returned (the node
persists there), so an ack means "stored on the other side". Persistence is not done here.
Sending to a peer we cannot reach raises ``PeerUnreachable``; the caller decides to queue.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio
from libp2p.custom_types import TProtocol

from engine.domain import wire
from engine.domain.ratelimit import (
    ScopedRateLimiter,
    ScopedStreamLimiter,
    ThrottledWarning,
    address_scopes,
    remote_host,
)
from engine.network.host import peer_id_of

log = logging.getLogger("nunet.network.chat")

CHAT_PROTOCOL = TProtocol("/nunet/chat/1.0.0")
ACK_TIMEOUT_S = 5.0
IDLE_TIMEOUT_S = 300.0  # a peer in good standing keeps its one cached stream open
FIRST_FRAME_S = 10.0  # the opener writes its hello at once; a silent stream is reset
# Anyone else's stream is closed soon after its last frame: 82 identities once held 9,932
# idle chat streams for 300 s each. A sender whose cached stream was closed opens a new one
# (ChatService._exchange_locked retries once), so an honest stranger loses nothing.
STRANGER_IDLE_S = 10.0
# Streams served at once (issue 21). Identities are free, so what a stranger may hold is
# also capped per address (/32, /64) and subnet (/24, /56); RESERVED of TOTAL are kept for
# peers in good standing (an accepted chat, a job or an escrow with us). One honest peer
# uses one stream (the sender caches it), two when both sides write at once.
STREAMS_PER_PEER = 4
STREAMS_PER_ADDRESS = 16
STREAMS_PER_SUBNET = 32
STREAMS_TOTAL = 256
STREAMS_RESERVED = 64
# A person types far slower than this; a script flooding us is cut off, others are not.
# (per second, burst): per peer, and for strangers per address and per subnet as well.
RATE_PER_PEER = (50.0, 100.0)
RATE_PER_ADDRESS = (20.0, 60.0)
RATE_PER_SUBNET = (40.0, 120.0)
# What a stranger's stream costs in requests (a chat request shown to the user, and a row
# for it): once per stream, at its first frame.
REQUESTS_PER_PEER = (0.1, 3.0)
REQUESTS_PER_ADDRESS = (0.5, 10.0)
REQUESTS_PER_SUBNET = (1.0, 20.0)
_CONVERSATION_ID = re.compile(r"\A[0-9a-f]{16}\Z")  # what direct_conversation makes


class ChatFailure(Exception):
    """A chat operation failed; ``str()`` is meant for the user."""


class MessageTooLarge(ChatFailure):
    pass


class PeerUnreachable(ChatFailure):
    pass


class ChatRejected(ChatFailure):
    pass


class ChatHooks(Protocol):
    """What the node does with chat events (persist, notify). Called on the trio thread."""

    def on_chat_request(self, peer_id: str, conversation: str, at: float) -> None: ...

    def on_chat_join(self, peer_id: str, conversation: str, at: float) -> None: ...

    def on_message(
        self, peer_id: str, conversation: str, text: str, seq: int, at: float
    ) -> None: ...


def direct_conversation(a: str, b: str) -> str:
    """The default conversation between two peers: the same id on both sides."""
    low, high = sorted((a, b))
    return hashlib.sha256(f"{low}\n{high}".encode()).hexdigest()[:16]


def is_conversation_id(value: str) -> bool:
    return _CONVERSATION_ID.match(value) is not None


def check_text(text: str) -> None:
    size = len(text.encode())
    if size > wire.MAX_CHAT_TEXT_BYTES:
        raise MessageTooLarge(
            f"message is {size} bytes; the limit is {wire.MAX_CHAT_TEXT_BYTES} bytes (4 KiB)"
        )
    if not text:
        raise ChatRejected("empty message")


class _Outbound:
    def __init__(self) -> None:
        self.lock = trio.Lock()
        self.stream: Any = None


class ChatService:
    def __init__(
        self,
        host: Any,
        hooks: ChatHooks,
        seq_floor: Callable[[str, str], int] | None = None,
        standing: Callable[[str], bool] | None = None,
    ) -> None:
        self.host = host
        self.hooks = hooks
        # Called before a stream to a peer is opened: the node teaches the peerstore the
        # peer's confirmed addresses, if it has any (engine/network/confirmed.py).
        self.before_dial: Callable[[str], Awaitable[None]] | None = None
        # Whether a peer is in good standing with us (the node's answer: an accepted chat, a
        # job or an escrow); without one, nobody is, and only the caps for strangers apply.
        self._standing = standing or (lambda peer_id: False)
        self.me = str(host.get_id())
        # Sequence numbers continue from what the node persisted (seq_floor), so a restart
        # never reuses one.
        self._seq_floor = seq_floor or (lambda peer, conversation: 0)
        self._seq: dict[tuple[str, str], int] = {}
        self._out: dict[str, _Outbound] = {}
        self.streams = ScopedStreamLimiter(
            STREAMS_PER_PEER,
            STREAMS_PER_ADDRESS,
            STREAMS_PER_SUBNET,
            STREAMS_TOTAL,
            STREAMS_RESERVED,
        )
        self._limiter = ScopedRateLimiter(RATE_PER_PEER, RATE_PER_ADDRESS, RATE_PER_SUBNET)
        self._requests = ScopedRateLimiter(
            REQUESTS_PER_PEER, REQUESTS_PER_ADDRESS, REQUESTS_PER_SUBNET
        )
        self._refused = ThrottledWarning(
            log,
            "chat: refused %d stream(s) or frame(s) over the limits in the last minute, "
            "the latest from %s at %s",
        )
        host.set_stream_handler(CHAT_PROTOCOL, self._handle)

    # --- sending --------------------------------------------------------------------------

    async def start(self, peer_id: str) -> str:
        """Send a chat request; returns the conversation id."""
        conversation = direct_conversation(self.me, peer_id)
        await self._exchange(peer_id, wire.ChatHello(conversation=conversation, request=True), 0)
        return conversation

    async def join(self, peer_id: str, conversation: str) -> None:
        await self._exchange(peer_id, wire.ChatJoin(conversation=conversation), 0)

    async def send(
        self, peer_id: str, text: str, conversation: str | None = None
    ) -> tuple[int, float]:
        """Deliver one message; returns (seq, at) once the peer acknowledged it."""
        check_text(text)
        conversation = conversation or direct_conversation(self.me, peer_id)
        key = (peer_id, conversation)
        out = self._out.setdefault(peer_id, _Outbound())
        async with out.lock:  # the seq is taken under the lock: order on the wire = seq order
            seq = max(self._seq.get(key, 0), self._seq_floor(peer_id, conversation)) + 1
            at = time.time()
            message = wire.ChatText(conversation=conversation, seq=seq, text=text, at=at)
            await self._exchange_locked(peer_id, out, message, seq)
            self._seq[key] = seq
        return seq, at

    async def _exchange(self, peer_id: str, message: wire.ChatFrame, seq: int) -> None:
        out = self._out.setdefault(peer_id, _Outbound())
        async with out.lock:
            await self._exchange_locked(peer_id, out, message, seq)

    async def _exchange_locked(
        self, peer_id: str, out: _Outbound, message: wire.ChatFrame, seq: int
    ) -> None:
        payload = wire.encode_chat(message)
        conversation = getattr(message, "conversation", "")
        # A cached stream may be dead (peer restarted): one retry on a fresh stream.
        for attempt in range(2):
            fresh = out.stream is None
            try:
                if out.stream is None:
                    out.stream = await self._open(peer_id)
                    await wire.write_frame(
                        out.stream,
                        wire.encode_chat(wire.ChatHello(conversation=conversation)),
                        wire.MAX_CHAT_FRAME_BYTES,
                    )
                    await self._await_ack(out.stream, conversation, 0)
                    if isinstance(message, wire.ChatHello) and not message.request:
                        return
                await wire.write_frame(out.stream, payload, wire.MAX_CHAT_FRAME_BYTES)
                await self._await_ack(out.stream, conversation, seq)
                return
            except ChatRejected:
                await _reset(out.stream)
                out.stream = None
                raise
            except (Exception, trio.TooSlowError) as exc:
                await _reset(out.stream)
                out.stream = None
                if fresh or attempt == 1:
                    raise PeerUnreachable(
                        f"peer {peer_id} is unreachable ({type(exc).__name__}: {exc}); "
                        "the message was not delivered"
                    ) from exc

    async def _open(self, peer_id: str) -> Any:
        with trio.fail_after(ACK_TIMEOUT_S):
            if self.before_dial is not None:
                await self.before_dial(peer_id)
            return await self.host.new_stream(peer_id_of(peer_id), [CHAT_PROTOCOL])

    async def _await_ack(self, stream: Any, conversation: str, seq: int) -> None:
        with trio.fail_after(ACK_TIMEOUT_S):
            data = await wire.read_frame(stream, wire.MAX_CHAT_FRAME_BYTES)
        if data is None:
            raise wire.Malformed("peer closed the chat stream")
        reply = wire.decode_chat(data)
        if isinstance(reply, wire.ChatError):
            raise ChatRejected(f"peer refused: {reply.code}: {reply.message[:200]}")
        if not isinstance(reply, wire.ChatAck) or reply.seq != seq:
            raise wire.Malformed(f"expected ack {seq}, got {type(reply).__name__}")

    async def close(self) -> None:
        for out in self._out.values():
            await _reset(out.stream)
            out.stream = None

    # --- receiving ------------------------------------------------------------------------

    async def _handle(self, stream: Any) -> None:
        peer_id = str(stream.muxed_conn.peer_id)
        host = remote_host(stream)
        lease = self.streams.acquire(peer_id, host, lambda: self._standing(peer_id))
        if lease is None:
            self._refused.note(peer_id, address_scopes(host)[0])
            await _reset(stream)
            return
        try:
            await self._serve(stream, peer_id, host)
        finally:
            self.streams.release(lease)

    async def _serve(self, stream: Any, peer_id: str, host: str | None) -> None:
        last_seq: dict[str, int] = {}  # per conversation, for this stream: drop replays
        try:
            first = True
            while True:
                trusted = self._standing(peer_id)  # the user may accept while it is open
                idle_s = FIRST_FRAME_S if first else IDLE_TIMEOUT_S if trusted else STRANGER_IDLE_S
                with trio.move_on_after(idle_s) as idle:
                    data = await wire.read_frame(stream, wire.MAX_CHAT_FRAME_BYTES)
                if idle.cancelled_caught:
                    await _reset(stream)  # silent or idle: nothing held for it any longer
                    return
                if data is None:
                    with contextlib.suppress(Exception), trio.move_on_after(1.0):
                        await stream.close()  # the peer closed its side: close ours too
                    return
                message = wire.decode_chat(data)
                # A stranger's stream may become a chat request the user sees (a row for
                # it): that is paced per address too, once per stream. One that names no
                # conversation we could take never becomes one: it is told so (_dispatch).
                conversation = getattr(message, "conversation", None)
                takeable = conversation is None or is_conversation_id(conversation)
                if (
                    first
                    and takeable
                    and not trusted
                    and not self._requests.allow(peer_id, host, False)
                ):
                    await self._refuse(stream, "rate_limited", "too many chat requests")
                    self._refused.note(peer_id, address_scopes(host)[0])
                    return
                first = False
                if not self._limiter.allow(peer_id, host, trusted):
                    await self._refuse(stream, "rate_limited", "too many chat messages")
                    self._refused.note(peer_id, address_scopes(host)[0])
                    return
                reply = self._dispatch(peer_id, message, last_seq)
                await wire.write_frame(stream, wire.encode_chat(reply), wire.MAX_CHAT_FRAME_BYTES)
        except wire.WireError as exc:
            log.warning("chat: rejected input from %s: %s", peer_id, exc)
            await self._refuse(stream, "malformed", str(exc))
        except Exception as exc:  # a broken peer stream must never take the node down
            log.info("chat stream from %s ended: %s", peer_id, exc)
            await _reset(stream)

    def _dispatch(
        self, peer_id: str, message: wire.ChatMessage, last_seq: dict[str, int]
    ) -> wire.ChatFrame:
        now = time.time()
        conversation = getattr(message, "conversation", None)
        if conversation is not None and not is_conversation_id(conversation):
            # Stored and shown as is: only the ids direct_conversation makes are taken.
            return wire.ChatError(
                code="bad_conversation",
                message="a conversation id is 16 lowercase hex digits",
            )
        if isinstance(message, wire.ChatHello):
            if message.request:
                self.hooks.on_chat_request(peer_id, message.conversation, now)
            return wire.ChatAck(conversation=message.conversation, seq=0)
        if isinstance(message, wire.ChatJoin):
            self.hooks.on_chat_join(peer_id, message.conversation, now)
            return wire.ChatAck(conversation=message.conversation, seq=0)
        if isinstance(message, wire.ChatText):
            if message.seq > last_seq.get(message.conversation, 0):
                # The hook persists before we ack: an ack means "stored on the other side".
                self.hooks.on_message(
                    peer_id, message.conversation, message.text, message.seq, message.at
                )
                last_seq[message.conversation] = message.seq
            return wire.ChatAck(conversation=message.conversation, seq=message.seq)
        return wire.ChatError(code="unexpected", message=f"unexpected {type(message).__name__}")

    async def _refuse(self, stream: Any, code: str, text: str) -> None:
        try:
            with trio.move_on_after(1.0):
                reply = wire.encode_chat(wire.ChatError(code=code, message=text[:500]))
                await wire.write_frame(stream, reply, wire.MAX_CHAT_FRAME_BYTES)
        except Exception:
            pass
        await _reset(stream)


async def _reset(stream: Any) -> None:
    if stream is None:
        return
    with contextlib.suppress(Exception):
        await stream.reset()
