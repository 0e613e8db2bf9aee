"""Bitswap throughput against a raw libp2p stream (issue 26 §3): one process, two of our
network services on 127.0.0.1 (Noise, yamux, our guards), the same bytes both ways.

1. raw: the holder writes the file's bytes on one stream of a protocol of its own, the
   fetcher reads them to the end (the ceiling: transport, encryption and muxer only);
2. bitswap: the holder has added the file (UnixFS, 256 KiB raw leaves, engine/data); the
   fetcher's ``NodeData`` fetches the DAG from it (wantlists of 64, every block hashed).

Prints MB/s for each and bitswap's as a ratio of raw's, best of N rounds each.

Usage: python bench/data_fetch.py [MB] [ROUNDS]      (default 100 MB, 3 rounds)
"""

from __future__ import annotations

import contextlib
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio
from libp2p.network.stream.exceptions import StreamEOF
from nacl.signing import SigningKey

from engine import api
from engine.config import NetworkSettings
from engine.data.service import NodeData
from engine.domain.cid import Cid
from engine.identity import Identity
from tests.adversarial.hostile import _Callbacks

RAW = "/nunet-bench/raw/1.0.0"


async def _service(nursery: trio.Nursery, seed: int) -> Any:
    from engine.network.service import NetworkService  # libp2p: imported where used

    identity = Identity(SigningKey(bytes([seed]) * 32))
    settings = NetworkSettings(listen=["/ip4/127.0.0.1/tcp/0"])
    service = NetworkService(identity, settings, "nunet-bench", _Callbacks(None))
    await nursery.start(service.run)
    return service


async def main(megabytes: int, rounds: int) -> None:
    from engine.network.host import parse_peer_addr

    size = megabytes * 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        payload = root / "payload.bin"
        rng = random.Random(26)  # no two chunks alike: every block is fetched
        with payload.open("wb") as handle:
            while handle.tell() < size:
                handle.write(rng.randbytes(min(1 << 20, size - handle.tell())))
        async with trio.open_nursery() as nursery:
            holder, fetcher = await _service(nursery, 1), await _service(nursery, 2)
            await fetcher.host.connect(parse_peer_addr(holder.listen_addrs()[0]))

            async def serve_raw(stream: Any) -> None:
                with payload.open("rb") as handle:
                    while chunk := handle.read(1 << 20):
                        await stream.write(chunk)
                await stream.close()

            holder.set_stream_handler(RAW, serve_raw)
            holding = NodeData(root / "holder")
            holding.attach(holder)
            added = await holding.add(api.DataAdd(path=str(payload)))
            print(f"{megabytes} MB, {added.blocks} blocks, CID {added.cid}")

            raw_s = []
            for _ in range(rounds):
                began = time.perf_counter()
                stream = await fetcher.open_stream(holder.identity.peer_id, RAW)
                got = 0
                with contextlib.suppress(StreamEOF):
                    while chunk := await stream.read(1 << 20):
                        got += len(chunk)
                raw_s.append(time.perf_counter() - began)
                assert got == size, got

            bitswap_s = []
            # One fetcher (its bitswap owns the streams the holder answers on), emptied
            # before each round.
            fetching = NodeData(root / "fetcher")
            fetching.attach(fetcher)
            for _ in range(rounds):
                shutil.rmtree(fetching.blocks.root, ignore_errors=True)
                began = time.perf_counter()
                await fetching._fetch(Cid.parse(added.cid), [holder.identity.peer_id])
                bitswap_s.append(time.perf_counter() - began)
            best_raw, best_bitswap = min(raw_s), min(bitswap_s)
            print(f"raw stream: {size / best_raw / 1e6:8.1f} MB/s  (best of {rounds})")
            print(f"bitswap:    {size / best_bitswap / 1e6:8.1f} MB/s  (best of {rounds})")
            print(f"bitswap / raw: {best_raw / best_bitswap:.2f}")
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(
        main,
        int(sys.argv[1]) if len(sys.argv) > 1 else 100,
        int(sys.argv[2]) if len(sys.argv) > 2 else 3,
    )
