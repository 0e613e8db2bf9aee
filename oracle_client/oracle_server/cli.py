"""``nunet-oracle serve``: run the reference oracle.

    nunet-oracle serve --db PATH --key-file PATH --ledger-url URL [--host 127.0.0.1] [--port N]

When it listens it prints one JSON line on stdout: {"url", "oracle_key", "network",
"escrow_address"}; scripts and tests read it to find the oracle (``--port 0`` picks a free
port). SIGTERM and SIGINT stop it cleanly.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from oracle_client.fields import Network


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nunet-oracle", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the oracle's HTTP API")
    serve.add_argument("--db", type=Path, required=True, help="SQLite store (created if absent)")
    serve.add_argument(
        "--key-file", type=Path, required=True, help="Ed25519 key, 0600 (created on first start)"
    )
    serve.add_argument(
        "--ledger-url", required=True, help="Blockfrost-compatible API base URL (chain backend)"
    )
    serve.add_argument("--project-id", default="local", help="Blockfrost project id")
    serve.add_argument("--network", choices=["testnet", "mainnet"], default="testnet")
    serve.add_argument(
        "--ntx-unit",
        default=None,
        metavar="UNIT",
        help="NTX in Blockfrost's spelling (policy id hex + asset name hex, as nunet-ledger "
        "prints it); locks must then hold the amount they name",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    # pycardano dumps whole builder states at WARNING; the oracle only reads UTxOs.
    logging.getLogger("PyCardano").setLevel(logging.ERROR)
    try:
        return _serve(args)
    except Exception as exc:  # a one-line reason, not a traceback, for startup problems
        print(f"nunet-oracle: {exc}", file=sys.stderr)
        return 1


def _serve(args: argparse.Namespace) -> int:
    # Imported here so `nunet-oracle --help` does not pay for pycardano.
    from pycardano import Network as CardanoNetwork

    from oracle_client.cardano.blockfrost import CanonicalBlockFrostContext
    from oracle_client.escrow.contract.artifact import escrow_address
    from oracle_client.oracle_server.keys import load_or_create_key
    from oracle_client.oracle_server.locks import ChainLockChecker
    from oracle_client.oracle_server.server import OracleServer
    from oracle_client.oracle_server.service import Oracle
    from oracle_client.oracle_server.store import Store

    network: Network = args.network
    address = str(
        escrow_address(CardanoNetwork.MAINNET if network == "mainnet" else CardanoNetwork.TESTNET)
    )
    key = load_or_create_key(args.key_file)
    store = Store(args.db)
    checker = ChainLockChecker(
        lambda: CanonicalBlockFrostContext(project_id=args.project_id, base_url=args.ledger_url),
        address,
        _ntx_asset(args.ntx_unit),
    )
    oracle = Oracle(key, store, checker, network, escrow_address=address)
    server = OracleServer(oracle, args.host, args.port)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        # The API has no TLS or authentication of its own: say so where an operator looks.
        print(
            f"nunet-oracle: listening on {args.host}: put it behind a TLS proxy to be public",
            file=sys.stderr,
        )
    ready = {
        "url": server.url,
        "oracle_key": oracle.oracle_key,
        "network": network,
        "escrow_address": address,
    }
    print(json.dumps(ready), flush=True)
    try:
        stop.wait()
    finally:
        server.close()
        store.close()
    return 0


def _ntx_asset(unit: str | None) -> tuple[bytes, bytes] | None:
    if unit is None:
        return None
    try:
        raw = bytes.fromhex(unit)
    except ValueError:
        raw = b""
    if not 28 <= len(raw) <= 28 + 32:
        raise ValueError("--ntx-unit is the 28-byte policy id and the asset name (<= 32), in hex")
    return raw[:28], raw[28:]


if __name__ == "__main__":
    sys.exit(main())
