"""Bitswap against hostile peers (issue 26 §1; engine/data/bitswap.py): a peer that answers
wants with blocks nobody asked for is dropped and counted, and the fetch completes from an
honest peer; a wantlist naming one block a thousand times gets it once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from libp2p.bitswap.pb.bitswap_pb2 import Message
from libp2p.utils.varint import encode_varint_prefixed, read_varint_prefixed_bytes_limited

from engine.data.bitswap import PROTOCOL_120, STRIKES
from engine.domain.cid import Cid
from engine.network.host import peer_id_of
from tests.adversarial.hostile import HostilePeer
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons, wait_for
from tests.data.fixtures import make, pattern

JUNK_PREFIX = bytes((1, 0x55, 0x12, 32))  # CIDv1, raw, sha2-256: the bytes are what lie


def _serve_junk(peer: HostilePeer, sent: list[int]) -> None:
    """Every wantlist is answered with junk blocks under a raw prefix, never the block."""

    async def handle(stream: Any) -> None:
        data = await read_varint_prefixed_bytes_limited(stream, 4 << 20)
        wants = Message()
        wants.ParseFromString(data)
        answer = Message()
        for i in range(len(wants.wantlist.entries) + STRIKES):
            answer.payload.add(prefix=JUNK_PREFIX, data=b"junk %d" % i)
        back = await peer.host.new_stream(stream.muxed_conn.peer_id, [PROTOCOL_120])
        await back.write(encode_varint_prefixed(answer.SerializeToString()))
        await back.close()
        sent.append(len(answer.payload))

    async def install() -> None:
        peer.host.set_stream_handler(PROTOCOL_120, handle)

    peer.call(install)


@pytest.mark.timeout(120)
def test_a_peer_sending_junk_blocks_is_dropped_and_the_fetch_completes_elsewhere(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer], tmp_path: Path
) -> None:
    holder = daemons("holder", 81)
    fetcher = daemons("fetcher", 82, bootstrap=holder.addrs()[0])
    liar = hostile(bootstrap=[holder.addrs()[0]])
    liar.connect(fetcher.addrs()[0])
    sent: list[int] = []
    _serve_junk(liar, sent)
    source = tmp_path / "weights.bin"
    source.write_bytes(pattern(1_000_000, "weights"))
    cid = holder.cli("data", "add", str(source))["cid"]

    out = tmp_path / "out"
    out.mkdir()
    # The liar is asked first; its junk gets it dropped, and the holder is asked next.
    result = run_cli(
        "data", "get", cid, "-o", str(out), "--from", liar.peer_id, "--from", holder.peer_id,
        "--json", home=fetcher.home, timeout=90,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (out / json.loads(result.stdout)["path"].rsplit("/", 1)[1]).read_bytes() == (
        source.read_bytes()
    )
    assert sent, "the liar was never asked"
    exchange = fetcher.cli("data", "ls")["exchange"]
    assert exchange["bad_peers"] == [liar.peer_id]
    assert exchange["unwanted_blocks"] >= STRIKES
    # Dropped for good: a second fetch never asks it again.
    before = len(sent)
    fetcher.cli("data", "rm", cid)
    again = tmp_path / "again"
    again.mkdir()
    result = run_cli(
        "data", "get", cid, "-o", str(again), "--from", liar.peer_id, "--from", holder.peer_id,
        "--json", home=fetcher.home, timeout=90,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(sent) == before


@pytest.mark.timeout(120)
def test_a_block_wanted_a_thousand_times_in_one_wantlist_is_sent_once(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer], tmp_path: Path
) -> None:
    holder = daemons("holder", 83)
    make(tmp_path, ("three-chunks.bin",))
    root = Cid.parse(holder.cli("data", "add", str(tmp_path / "three-chunks.bin"))["cid"])
    asker = hostile(bootstrap=[holder.addrs()[0]])
    asker.connect(holder.addrs()[0])
    received: list[int] = []

    async def collect(stream: Any) -> None:
        with trio.move_on_after(10):
            while True:
                data = await read_varint_prefixed_bytes_limited(stream, 4 << 20)
                msg = Message()
                msg.ParseFromString(data)
                received.append(len(msg.payload))

    async def ask() -> None:
        asker.host.set_stream_handler(PROTOCOL_120, collect)
        wants = Message()
        for _ in range(1000):
            wants.wantlist.entries.add(block=root.binary, wantType=Message.Wantlist.Block)
        stream = await asker.host.new_stream(
            peer_id_of(holder.peer_id),
            [PROTOCOL_120],
        )
        await stream.write(encode_varint_prefixed(wants.SerializeToString()))
        await stream.close()

    asker.call(ask)
    wait_for(lambda: sum(received) >= 1, "the holder never answered the wantlist", 20)
    served = holder.cli("data", "ls")["exchange"]["served_blocks"]
    assert sum(received) == 1 and served == 1


__all__ = ["daemons"]  # the fixture, imported for pytest
