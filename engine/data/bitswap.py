"""Bitswap 1.2.0 (and 1.1.0), the block exchange of IPFS, over our network's streams (issue 26).

Both sides of the protocol are here, in our own bounded handler (py-libp2p 0.8.1's client
keeps every peer's wantlist and answers from a nursery per message with no per-peer bound;
only its protobuf schema is used). As in go-bitswap and Helia, a message goes one way: a
wantlist is answered with blocks and presences on a stream the answering peer opens.

Serving: a want is answered now or never (no wantlist is kept for later, so a peer cannot
park wants in our memory): a block we hold, HAVE for a want-have, DONT_HAVE where asked. What
a peer may take is bounded per peer, per address and per subnet (streams at once, and blocks
per second), as every protocol of ours is (engine/domain/ratelimit.py); a message is at most
4 MiB and 1,024 entries; a stream that says nothing for 30 s is closed.

Fetching: a block is asked of one peer at a time (want-block, send-dont-have), the next one
after a DONT_HAVE or ``BLOCK_WAIT_S``. A block is taken only when the CID it hashes to is one
we want: its bytes are verified by construction. A peer that sends blocks nobody asked for
(junk, or a block under another CID) gets a strike each; at ``STRIKES`` it is dropped from
every fetch of this node and counted (``bad_peers``).
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import trio
from libp2p.bitswap.pb.bitswap_pb2 import Message
from libp2p.utils.varint import encode_varint_prefixed, read_varint_prefixed_bytes_limited

from engine.data.blockstore import BlockCorrupt, BlockMissing, Blockstore
from engine.domain.cid import CODECS, DIGEST_BYTES, SHA2_256, Cid, CidError, read_varint, varint
from engine.domain.ratelimit import ScopedRateLimiter, ScopedStreamLimiter, remote_host
from engine.ports import PeerLink

log = logging.getLogger("nunet.data.bitswap")

PROTOCOL_120 = "/ipfs/bitswap/1.2.0"
PROTOCOL_110 = "/ipfs/bitswap/1.1.0"
PROTOCOLS = (PROTOCOL_120, PROTOCOL_110)
MAX_MESSAGE = 4 << 20  # go-bitswap's and Helia's limit
MAX_ENTRIES = 1024
READ_IDLE_S = 30.0
SEND_S = 30.0  # opening a stream and writing one message, through a relay included
BLOCK_WAIT_S = 15.0  # one peer's answer to one want
STRIKES = 8
RECENT = 4096  # CIDs fetched lately: a late copy of one (a slow peer's) is no strike
# Serving bounds: streams at once, and blocks sent a second (burst), per peer, address and
# subnet. 400 blocks of 256 KiB is 100 MB/s: a fetch from us is never slowed by these.
STREAMS = (4, 8, 16, 64, 8)  # per peer, per address, per subnet, total, reserved
BLOCK_RATE = ((400.0, 800.0), (400.0, 800.0), (800.0, 1600.0))


@dataclass
class Figures:
    served_blocks: int = 0
    served_bytes: int = 0
    received_blocks: int = 0
    unwanted_blocks: int = 0
    refused: int = 0  # wants over a peer's or an address's bounds
    bad_peers: set[str] = field(default_factory=set)


class BlockUnavailable(LookupError):
    def __init__(self, cid: Cid, asked: int) -> None:
        who = f"none of the {asked} peers asked has it" if asked != 1 else "the peer asked has not"
        super().__init__(f"block {cid}: {who}" if asked else f"block {cid}: no peer could be asked")
        self.cid = cid


class Bitswap:
    """``blocks``: what we serve, and where fetched blocks go."""

    def __init__(self, blocks: Blockstore) -> None:
        self.blocks = blocks
        self.link: PeerLink | None = None
        self.figures = Figures()
        self._streams = ScopedStreamLimiter(*STREAMS)
        self._rate = ScopedRateLimiter(*BLOCK_RATE)
        self._waiting: dict[Cid, trio.Event] = {}
        self.last_peer = ""
        self._got: dict[Cid, tuple[bytes, str]] = {}
        self._dont_have: dict[Cid, set[str]] = {}
        self._strikes: dict[str, int] = {}
        self._recent: collections.OrderedDict[Cid, None] = collections.OrderedDict()

    def attach(self, link: PeerLink) -> None:
        self.link = link
        for protocol in PROTOCOLS:
            link.set_stream_handler(protocol, self._handle)

    # -- fetching ------------------------------------------------------------------------------

    async def get_blocks(self, cids: Sequence[Cid], peers: Sequence[str]) -> dict[Cid, bytes]:
        """The blocks of ``cids`` (at most ``MAX_ENTRIES``), asked of ``peers`` in turn: all of
        them of the first peer in one wantlist, what it lacked (DONT_HAVE, or no answer in
        ``BLOCK_WAIT_S`` since its last block) of the next. Raises BlockUnavailable naming the
        first block no peer had. ``self.last_peer``: the peer that sent the last block."""
        wanted = list(dict.fromkeys(cids))[:MAX_ENTRIES]
        event = trio.Event()
        for cid in wanted:
            self._waiting[cid] = event
        got: dict[Cid, bytes] = {}
        asked = 0
        try:
            for peer in peers:
                missing = [c for c in wanted if c not in got]
                if not missing:
                    break
                if peer in self.figures.bad_peers:
                    continue
                asked += 1
                try:
                    await self._send(peer, _wants(missing))
                except Exception as exc:  # unreachable, or no bitswap: the next one
                    log.debug("bitswap: wants to %s not sent: %s", peer, exc)
                    continue
                while True:
                    with trio.move_on_after(BLOCK_WAIT_S) as waited:
                        await event.wait()
                    event = trio.Event()
                    for cid in wanted:
                        self._waiting[cid] = event
                        if cid in self._got and cid not in got:
                            got[cid], self.last_peer = self._got.pop(cid)
                    lacking = [c for c in wanted if c not in got]
                    told = self._dont_have
                    if not lacking or waited.cancelled_caught:
                        break
                    if all(peer in told.get(c, ()) for c in lacking):
                        break
                    if peer in self.figures.bad_peers:
                        break  # struck out while we waited on it: the next one
            lacking = [c for c in wanted if c not in got]
            if lacking:
                raise BlockUnavailable(lacking[0], asked)
            return got
        finally:
            for cid in wanted:
                self._recent[cid] = None
                self._got.pop(cid, None)
                self._dont_have.pop(cid, None)
                self._waiting.pop(cid, None)
            while len(self._recent) > RECENT:
                self._recent.popitem(last=False)

    def _wake(self, cid: Cid) -> None:
        event = self._waiting.get(cid)
        if event is not None:
            event.set()

    # -- the one handler: wants to serve, blocks and presences to take -------------------------

    async def _handle(self, stream: Any) -> None:
        peer = str(stream.muxed_conn.peer_id)
        host = remote_host(stream)
        lease = self._streams.acquire(peer, host, lambda: False)
        if lease is None:
            self.figures.refused += 1
            with contextlib.suppress(Exception):
                await stream.reset()
            return
        protocol = str(stream.get_protocol() or PROTOCOL_120)
        try:
            while True:
                with trio.fail_after(READ_IDLE_S):
                    data = await read_varint_prefixed_bytes_limited(stream, MAX_MESSAGE)
                if not data:
                    return
                msg = Message()
                msg.ParseFromString(data)
                self._take(peer, msg)
                if len(msg.wantlist.entries) > 0:
                    await self._serve(peer, host, protocol, msg)
        except Exception as exc:  # a hostile or broken peer: its stream ends, nothing else
            log.debug("bitswap stream from %s ended: %s", peer, exc)
        finally:
            self._streams.release(lease)
            with contextlib.suppress(Exception):
                await stream.close()

    def _take(self, peer: str, msg: Message) -> None:
        for presence in list(msg.blockPresences)[:MAX_ENTRIES]:
            with contextlib.suppress(CidError):
                cid = Cid.from_bytes(presence.cid)
                if presence.type == Message.DontHave and cid in self._waiting:
                    self._dont_have.setdefault(cid, set()).add(peer)
                    self._wake(cid)
        unwanted = len(msg.blocks)  # bitswap 1.0.0's blocks: CIDv0 only, never ours
        for block in list(msg.payload)[:MAX_ENTRIES]:
            got = _payload_cid(block.prefix, block.data)
            if got is None or got not in self._waiting:
                unwanted += got is None or got not in self._recent
                continue
            self.figures.received_blocks += 1
            self._got[got] = (block.data, peer)
            self._wake(got)
        if unwanted:
            self.figures.unwanted_blocks += unwanted
            strikes = self._strikes[peer] = self._strikes.get(peer, 0) + unwanted
            if strikes >= STRIKES and peer not in self.figures.bad_peers:
                self.figures.bad_peers.add(peer)
                log.warning("bitswap: %s sent %d blocks nobody asked for: dropped", peer, strikes)

    async def _serve(self, peer: str, host: str | None, protocol: str, msg: Message) -> None:
        answer = Message()
        size = 0
        seen: set[Cid] = set()
        for entry in list(msg.wantlist.entries)[:MAX_ENTRIES]:
            if entry.cancel:
                continue
            try:
                cid = Cid.from_bytes(entry.block)
            except CidError:
                continue
            if cid in seen:
                continue  # one answer a CID: a want repeated is no order for copies
            seen.add(cid)
            if not self._rate.allow(peer, host, False):
                self.figures.refused += 1
                break  # over its bounds: the rest of this message goes unanswered
            block = self._read(cid)
            have = block is not None
            if entry.wantType == Message.Wantlist.Block and block is not None:
                if size + len(block) > MAX_MESSAGE - 64 * 1024:
                    await self._send(peer, answer, protocol)
                    answer, size = Message(), 0
                answer.payload.add(prefix=_prefix(cid), data=block)
                size += len(block)
                self.figures.served_blocks += 1
                self.figures.served_bytes += len(block)
            elif have and protocol == PROTOCOL_120:
                answer.blockPresences.add(cid=cid.binary, type=Message.Have)
            elif entry.sendDontHave and protocol == PROTOCOL_120:
                answer.blockPresences.add(cid=cid.binary, type=Message.DontHave)
        if len(answer.payload) or len(answer.blockPresences):
            await self._send(peer, answer, protocol)

    def _read(self, cid: Cid) -> bytes | None:
        try:
            return self.blocks.get(cid)
        except (BlockMissing, BlockCorrupt):
            return None

    async def _send(self, peer: str, msg: Message, protocol: str = PROTOCOL_120) -> None:
        """One message on a stream of its own, as go-bitswap and Helia send them."""
        if self.link is None:
            raise BlockUnavailable(Cid(0x55, bytes(32)), 0)
        with trio.fail_after(SEND_S):
            stream = await self.link.open_stream(peer, protocol)
            try:
                await stream.write(encode_varint_prefixed(msg.SerializeToString()))
            finally:
                with contextlib.suppress(Exception):
                    await stream.close()


def _wants(cids: Sequence[Cid]) -> Message:
    msg = Message()
    for cid in cids:
        msg.wantlist.entries.add(
            block=cid.binary, priority=1, wantType=Message.Wantlist.Block, sendDontHave=True
        )
    return msg


def _prefix(cid: Cid) -> bytes:
    """A payload's CID prefix: version, codec, hash function and digest length."""
    return varint(1) + varint(cid.codec) + varint(SHA2_256) + varint(DIGEST_BYTES)


def _payload_cid(prefix: bytes, data: bytes) -> Cid | None:
    """The CID a payload block hashes to under its prefix (None for a prefix we don't take)."""
    try:
        version, pos = read_varint(prefix, 0)
        codec, pos = read_varint(prefix, pos)
        hash_code, pos = read_varint(prefix, pos)
        length, pos = read_varint(prefix, pos)
    except CidError:
        return None
    if (version, hash_code, length, pos) != (1, SHA2_256, DIGEST_BYTES, len(prefix)):
        return None
    return Cid.of(codec, data) if codec in CODECS else None
