"""nunet-ledger: serve the local ledger, fund addresses from its faucet, show its NTX unit.

    nunet-ledger serve --db ledger.db [--host 127.0.0.1] [--port 3000] [--slot-offset S] [--dev]
    nunet-ledger faucet ADDRESS --ada 100 --ntx 50 --db ledger.db
    nunet-ledger info --db ledger.db

`serve` prints one JSON line ({"url": ..., "ntx_unit": ...}) once it accepts connections, so
scripts and tests can wait for it. The faucet writes to the same SQLite file directly (safe
beside a running server: both write in IMMEDIATE transactions).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from oracle_client.ledger.clock import LedgerClock
from oracle_client.ledger.server import Ledger, LedgerServer

DEFAULT_DB = "nunet-ledger.db"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nunet-ledger", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the Blockfrost-compatible API")
    serve.add_argument("--db", default=DEFAULT_DB, help="SQLite file (created if missing)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=3000, help="0 picks a free port")
    serve.add_argument(
        "--slot-offset", type=float, default=0.0, help="seconds added to the wall clock"
    )
    serve.add_argument("--project-id", default=None, help="require this project_id header")
    serve.add_argument(
        "--dev",
        action="store_true",
        help="also serve POST /ledger/faucet and POST /ledger/clock (tests, demos)",
    )
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="permit a non-loopback --host (the ledger has no authentication)",
    )

    faucet = sub.add_parser("faucet", help="create ADA and NTX at an address")
    faucet.add_argument("address")
    faucet.add_argument("--db", default=DEFAULT_DB)
    faucet.add_argument("--ada", default="0", help="ADA, up to 6 decimals")
    faucet.add_argument("--ntx", default="0", help="NTX, up to 6 decimals")
    faucet.add_argument("--note", default="cli", help="recorded in the audit table")

    info = sub.add_parser("info", help="print the ledger's NTX unit and time origin")
    info.add_argument("--db", default=DEFAULT_DB)
    return p


def _print(obj: Any) -> None:
    print(json.dumps(obj), flush=True)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _serve(args: argparse.Namespace) -> int:
    if not _is_loopback(args.host) and not args.allow_remote:
        print(
            f"nunet-ledger: refusing to listen on {args.host} without --allow-remote",
            file=sys.stderr,
        )
        return 2
    if not 0 <= args.port <= 65535:
        print("nunet-ledger: --port must be within 0..65535", file=sys.stderr)
        return 2
    server = LedgerServer(
        args.db,
        host=args.host,
        port=args.port,
        slot_offset=args.slot_offset,
        project_id=args.project_id,
        dev=args.dev,
    )
    # SIGTERM ends serve_forever like Ctrl-C does, so the socket and the DB close cleanly.
    signal.signal(signal.SIGTERM, _interrupt)
    _print({"url": server.url, "ntx_unit": server.ntx_unit, "db": str(Path(args.db).resolve())})
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _ledger(db: str) -> Ledger:
    from oracle_client.ledger.state import LedgerState

    state = LedgerState(db)
    return Ledger(state, LedgerClock(state.system_start))


def main(argv: list[str] | None = None) -> int:
    logging.getLogger("PyCardano").setLevel(logging.ERROR)
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "faucet":
        try:
            tx_hash, lovelace, ntx = _ledger(args.db).faucet(
                args.address, ada=args.ada, ntx=args.ntx, note=args.note
            )
        except ValueError as exc:
            print(f"nunet-ledger faucet: {exc}", file=sys.stderr)
            return 2
        _print({"tx_hash": tx_hash, "address": args.address, "lovelace": lovelace, "ntx": ntx})
        return 0
    _print(_ledger(args.db).info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
