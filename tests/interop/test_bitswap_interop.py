"""Bitswap with a stock IPFS implementation (issue 26 §3): Helia's bitswap over js-libp2p
(tests/interop/js/bitswap_peer.mjs) fetches, block by block, a file a real daemon added, and
the daemon fetches a file Helia's side imported; the bytes agree both ways. scripts/test.sh
installs the JS side (`npm ci`); nothing is downloaded here."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.daemon_harness import Daemon, daemons
from tests.data.fixtures import pattern
from tests.interop.test_network_interop import JS, node_binary


@pytest.mark.timeout(120)
def test_helia_fetches_what_a_daemon_added(daemons: Callable[..., Daemon], tmp_path: Path) -> None:
    daemon = daemons("ours", 91, env={"NUNET_NETWORK_LISTEN": "/ip4/127.0.0.1/tcp/0"})
    source = tmp_path / "model.bin"
    source.write_bytes(pattern(3_000_000, "model"))  # 12 chunks and a File node
    cid = daemon.cli("data", "add", str(source))["cid"]
    done = subprocess.run(
        [node_binary(), str(JS / "bitswap_peer.mjs"), "fetch", daemon.addrs()[0], cid],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["ok"], got
    assert got["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert got["size"] == 3_000_000 and got["blocks"] == 13
    assert daemon.cli("data", "ls")["exchange"]["served_blocks"] == 13


@pytest.mark.timeout(120)
def test_a_daemon_fetches_what_helia_serves(daemons: Callable[..., Daemon], tmp_path: Path) -> None:
    daemon = daemons("ours", 92, env={"NUNET_NETWORK_LISTEN": "/ip4/127.0.0.1/tcp/0"})
    source = tmp_path / "dataset.bin"
    source.write_bytes(pattern(2_500_000, "dataset"))
    helia = subprocess.Popen(
        [node_binary(), str(JS / "bitswap_peer.mjs"), "serve", str(source), daemon.addrs()[0]],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert helia.stdout is not None
        line = helia.stdout.readline()
        served = json.loads(line)
        out = tmp_path / "out"
        out.mkdir()
        result = run_cli(
            "data", "get", served["cid"], "-o", str(out), "--from", served["peer_id"], "--json",
            home=daemon.home, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        written = Path(json.loads(result.stdout)["path"])
        assert written.read_bytes() == source.read_bytes()
    finally:
        if helia.stdin is not None:
            helia.stdin.close()
        helia.wait(10)


__all__ = ["daemons"]  # the fixture, imported for pytest
