"""A bare network node for tests, benchmarks and demos: ``python -m engine.network.standalone``.

No store, no UI: it advertises fixed figures, prints events as JSON lines on stdout and takes
JSON-line commands on stdin (``peers``, ``send``, ``start``, ``ping``, ``withdraw``,
``advertise``, ``quit``). The multi-process tests drive real nodes through it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

import msgspec
import trio
from nacl.signing import SigningKey

from engine.config import NetworkSettings
from engine.domain import wire
from engine.domain.peer_info import PeerInfo
from engine.identity import Identity
from engine.network.heartbeat import HeartbeatFigures


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
    sys.stdout.flush()


class Callbacks:
    def __init__(self, cpu_mhz: int) -> None:
        self.providing = True
        self.cpu_mhz = cpu_mhz

    def advert(self) -> wire.Advert | None:
        if not self.providing:
            return None
        return wire.Advert(
            peer_id="",
            channel="",
            cpu_mhz=self.cpu_mhz,
            ram_mb=4096,
            disk_mb=10240,
            gpus=(wire.Gpu(vendor="nvidia", model="double", vram_mb=8192),),
            prices={"basic": 0.5, "gpu": 2.0},
            executors=("docker",),
            frameworks=("pytorch",),
            version="standalone",
        )

    def in_good_standing(self, peer_id: str) -> bool:
        return False

    def heartbeat(self) -> HeartbeatFigures | None:
        return HeartbeatFigures(cpu_mhz=self.cpu_mhz, free_cpu_mhz=self.cpu_mhz, ram_mb=4096)

    def on_peer_changed(self, peer_id: str, info: PeerInfo | None) -> None:
        emit(
            "peer",
            peer_id=peer_id,
            present=info is not None,
            advert=bool(info and info.advert),
            heartbeat=bool(info and info.heartbeat),
        )

    def on_chat_request(self, peer_id: str, conversation: str, at: float) -> None:
        emit("chat_request", peer_id=peer_id, conversation=conversation)

    def on_chat_join(self, peer_id: str, conversation: str, at: float) -> None:
        emit("chat_join", peer_id=peer_id, conversation=conversation)

    def on_message(self, peer_id: str, conversation: str, text: str, seq: int, at: float) -> None:
        emit("message", peer_id=peer_id, conversation=conversation, text=text, seq=seq, at=at)


async def serve(args: argparse.Namespace) -> None:
    from engine.network.service import NetworkService  # libp2p import: ~1 s, after parsing

    key = SigningKey(bytes.fromhex(args.seed)) if args.seed else SigningKey.generate()
    identity = Identity(key)
    settings = NetworkSettings(
        listen=[args.listen], bootstrap=args.bootstrap, heartbeat_interval_s=args.heartbeat
    )
    callbacks = Callbacks(args.cpu_mhz)
    callbacks.providing = not args.consumer
    service = NetworkService(identity, settings, args.channel, callbacks)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        emit("listening", peer_id=identity.peer_id, addrs=service.listen_addrs())
        await commands(service, callbacks, nursery)
        nursery.cancel_scope.cancel()
    emit("stopped")


async def commands(service: Any, callbacks: Callbacks, nursery: trio.Nursery) -> None:
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    buffer = b""
    while True:
        data = await stdin.receive_some(65536)
        if not data:
            return
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if not line.strip():
                continue
            command = json.loads(line)
            if command["cmd"] == "quit":
                return
            nursery.start_soon(run_command, service, callbacks, command)


async def run_command(service: Any, callbacks: Callbacks, command: dict[str, Any]) -> None:
    from engine.network.chat import ChatFailure

    cmd, ref = command["cmd"], command.get("ref")
    try:
        if cmd == "peers":
            peers = [msgspec.to_builtins(p) for p in service.peers()]
            emit("peers", ref=ref, peers=peers, connected=service.connected_peers())
        elif cmd == "send":
            started = time.perf_counter()
            seq, at = await service.send_chat(command["peer"], command["text"])
            rtt = (time.perf_counter() - started) * 1000
            emit("sent", ref=ref, seq=seq, at=at, rtt_ms=rtt)
        elif cmd == "start":
            conversation = await service.start_chat(command["peer"])
            emit("started", ref=ref, conversation=conversation)
        elif cmd == "ping":
            emit("pong", ref=ref, rtt_ms=await service.ping(command["peer"]))
        elif cmd == "withdraw":
            callbacks.providing = False
            service.republish_advert()
            emit("ok", ref=ref)
        elif cmd == "advertise":
            callbacks.providing = True
            service.republish_advert()
            emit("ok", ref=ref)
        else:
            emit("error", ref=ref, kind="unknown", message=f"unknown command {cmd!r}")
    except ChatFailure as exc:
        emit("error", ref=ref, kind=type(exc).__name__, message=str(exc))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m engine.network.standalone")
    parser.add_argument("--listen", default="/ip4/127.0.0.1/tcp/0")
    parser.add_argument("--bootstrap", action="append", default=[])
    parser.add_argument("--channel", default="nunet-test")
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--cpu-mhz", type=int, default=2000)
    parser.add_argument("--consumer", action="store_true", help="advertise nothing")
    parser.add_argument("--seed", help="hex Ed25519 seed, for a stable peer id")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)  # libp2p logs noisily at WARNING
    trio.run(serve, args)


if __name__ == "__main__":
    main()
