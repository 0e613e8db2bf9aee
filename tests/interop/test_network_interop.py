"""Interoperability with js-libp2p on the standard protocols: multistream-select, Noise, yamux,
identify and ping, both ways, on 127.0.0.1.

The JS peer is tests/interop/js/interop.mjs with the exact versions of package-lock.json;
scripts/test.sh installs them (`npm ci`). Nothing is downloaded here: without node_modules
the tests fail and say so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
from libp2p.custom_types import TProtocol
from libp2p.identity.identify.identify import ID as IDENTIFY_PROTOCOL
from libp2p.identity.identify.pb.identify_pb2 import Identify
from libp2p.utils.varint import read_length_prefixed_protobuf
from nacl.signing import SigningKey

from engine.config import NetworkSettings
from engine.identity import Identity
from engine.network import host as hostmod
from engine.network.service import NetworkService
from tests.conftest import make_home
from tests.daemons.test_network_daemons import Daemon
from tests.engine.test_network_service import Hooks

JS = Path(__file__).resolve().parent / "js"
SCRIPT = JS / "interop.mjs"
STANDARD = {"/ipfs/id/1.0.0", "/ipfs/ping/1.0.0"}


def node_binary() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node.js (>= 20) is needed for the js-libp2p interop tests; install it")
    if not (JS / "node_modules" / "libp2p").is_dir():
        pytest.fail(
            f"{JS}/node_modules is missing: run scripts/test.sh (it runs `npm ci` there) "
            "before these tests; they never download anything themselves"
        )
    return node


def js_dial(addr: str, pings: int = 5) -> dict[str, Any]:
    result = subprocess.run(
        [node_binary(), str(SCRIPT), "dial", addr, str(pings)],
        cwd=JS,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout, result.stderr
    answer: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    assert answer["ok"], answer.get("error")
    return answer


def test_js_libp2p_dials_pings_and_identifies_our_daemon(tmp_path: Path) -> None:
    node_binary()
    daemon = Daemon(make_home(tmp_path / "home"), {}).start()
    try:
        addr = daemon.addrs()[0]
        answer = js_dial(addr)
        assert answer["peer_id"] == daemon.peer_id
        assert answer["encryption"] == "/noise"
        assert answer["multiplexer"] == "/yamux/1.0.0"
        assert len(answer["rtt_ms"]) == 5 and all(0 <= r < 1000 for r in answer["rtt_ms"])
        assert answer["agent"].startswith("py-libp2p/")
        assert set(answer["protocols"]) >= STANDARD
        assert {"/meshsub/1.1.0", "/ipfs/kad/1.0.0"} <= set(answer["protocols"])
        assert any(addr.startswith(a) for a in answer["listen_addrs"])
    finally:
        daemon.stop()
    print("js -> py ping rtt (ms):", answer["rtt_ms"])


class LineReader:
    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.buffer = b""

    async def line(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("the JS peer exited")
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        event: dict[str, Any] = json.loads(line)
        return event


async def identify(service: NetworkService, peer_id: str) -> Any:
    """Ask the peer for its identify record ourselves (/ipfs/id/1.0.0)."""
    stream = await service.host.new_stream(
        hostmod.peer_id_of(peer_id), [TProtocol(str(IDENTIFY_PROTOCOL))]
    )
    try:
        data = await read_length_prefixed_protobuf(stream, use_varint_format=True)
    finally:
        await stream.close()
    message = Identify()
    message.ParseFromString(data)
    return message


def test_our_node_pings_and_identifies_a_js_libp2p_node() -> None:
    node = node_binary()
    figures: dict[str, Any] = {}

    async def main() -> None:
        settings = NetworkSettings(listen=["/ip4/127.0.0.1/tcp/0"])
        ours = NetworkService(Identity(SigningKey.generate()), settings, None, Hooks())
        async with trio.open_nursery() as nursery:
            await nursery.start(ours.run)
            process = await trio.lowlevel.open_process(
                [node, str(SCRIPT), "listen"],
                cwd=JS,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            try:
                assert process.stdout is not None and process.stdin is not None
                reader = LineReader(process.stdout)
                with trio.fail_after(30):
                    listening = await reader.line()
                assert listening["event"] == "listening"
                js_peer, js_addr = listening["peer_id"], listening["addrs"][0]

                with trio.fail_after(10):
                    await hostmod.connect(ours.host, hostmod.parse_peer_addr(js_addr))
                    figures["rtt_ms"] = [await ours.ping(js_peer) for _ in range(5)]
                    record = await identify(ours, js_peer)
                    # The JS side identified us too, on the same connection.
                    seen = await reader.line()
                figures["agent"] = record.agent_version
                figures["protocols"] = set(record.protocols)
                figures["seen"] = seen
                await process.stdin.aclose()  # the JS peer stops when stdin closes
                with trio.fail_after(10):
                    await process.wait()
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert all(0 < r < 1000 for r in figures["rtt_ms"]), figures
    assert figures["agent"].startswith("js-libp2p/"), figures
    assert figures["protocols"] >= STANDARD, figures
    seen = figures["seen"]
    assert seen["event"] == "identify" and seen["agent"].startswith("py-libp2p/"), seen
    assert seen["encryption"] == "/noise" and seen["multiplexer"] == "/yamux/1.0.0", seen
    assert set(seen["protocols"]) >= STANDARD, seen
    print("py -> js ping rtt (ms):", [round(r, 2) for r in figures["rtt_ms"]])
