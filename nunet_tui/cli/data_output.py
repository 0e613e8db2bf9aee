"""``nunet-tui data add PATH | get CID | ls | pin CID | unpin CID | rm CID``: files and folders
by content id (issue 26; engine/data/). ``data add`` prints the CID that ``ipfs add
--cid-version 1`` gives for the same bytes. Paths are made absolute here: the engine that
reads or writes them runs on this machine (the daemon, or this process)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from engine import api
from engine.client import EngineClient


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    data = sub.add_parser("data", help="files and folders by content id (IPFS UnixFS CIDs)")
    data_sub = data.add_subparsers(dest="data_command", metavar="DATA_COMMAND", required=True)
    add = data_sub.add_parser("add", parents=[common], help="add a file or folder; print its CID")
    add.add_argument("path", metavar="PATH")
    add.add_argument("--hidden", action="store_true", help="a folder's dot files too")
    add.add_argument("--no-pin", action="store_true", help="keep it unpinned (may be removed)")
    get = data_sub.add_parser("get", parents=[common], help="write a CID's file or folder out")
    get.add_argument("cid", metavar="CID")
    get.add_argument("-o", "--output", default=".", metavar="DIR", help="folder to write into")
    ask = "a peer to ask first (repeatable); then the DHT's providers and our connections"
    get.add_argument("--from", dest="peers", action="append", default=[], metavar="PEER", help=ask)
    data_sub.add_parser("ls", parents=[common], help="what this node keeps, by CID")
    pin = data_sub.add_parser("pin", parents=[common], help="keep a CID (fetched if not here)")
    pin.add_argument("cid", metavar="CID")
    pin.add_argument("--from", dest="peers", action="append", default=[], metavar="PEER", help=ask)
    for verb, text in (
        ("unpin", "let a CID be removed to make room"),
        ("rm", "remove a CID and the blocks no other CID holds"),
    ):
        data_sub.add_parser(verb, parents=[common], help=text).add_argument("cid", metavar="CID")


def _add(args: argparse.Namespace, client: EngineClient) -> api.DataRoot:
    path = os.path.abspath(os.path.expanduser(args.path))
    root: api.DataRoot = client.call_blocking(
        api.DataAdd(path=path, hidden=args.hidden, pin=not args.no_pin), timeout=3600
    )
    return root


def _get(args: argparse.Namespace, client: EngineClient) -> api.DataExported:
    out = str(Path(args.output).expanduser().resolve())
    command = api.DataGet(cid=args.cid, out=out, peers=tuple(args.peers))
    done: api.DataExported = client.call_blocking(command, timeout=3600)
    return done


RUNNERS = {
    "data add": _add,
    "data get": _get,
    "data ls": lambda a, c: c.call_blocking(api.DataList()),
    "data pin": lambda a, c: c.call_blocking(
        api.DataPin(cid=a.cid, peers=tuple(a.peers)), timeout=3600
    ),
    "data unpin": lambda a, c: c.call_blocking(api.DataUnpin(cid=a.cid)),
    "data rm": lambda a, c: c.call_blocking(api.DataRemove(cid=a.cid)),
}


def _root(root: api.DataRoot) -> str:
    pinned = "pinned" if root.pinned else "not pinned"
    return (
        f"{root.cid}\n  {root.kind} {root.name!r}, {root.size:,} bytes in {root.blocks:,} "
        f"blocks ({root.dag_bytes:,} on disk), {pinned}"
    )


def _roots(listing: api.DataRoots) -> str:
    x = listing.exchange
    exchange = (
        f"bitswap: {x.served_blocks:,} blocks ({x.served_bytes:,} bytes) served, "
        f"{x.received_blocks:,} received, {x.unwanted_blocks:,} unasked, {x.refused:,} refused"
        + (f", {len(x.bad_peers)} peers dropped" if x.bad_peers else "")
    )
    if not listing.roots:
        return f"nothing kept yet: `nunet-tui data add PATH`\n{exchange}"
    now = time.time()
    lines = []
    for root in listing.roots:
        pin = "pinned" if root.pinned else "      "
        days = max(0, int((now - root.added_at) // 86400))
        lines.append(
            f"{root.cid}  {pin}  {root.size:>14,} B  {root.kind:<9}  {root.name!r}  ({days} d)"
        )
    lines.append(
        f"{len(listing.roots)} kept; {listing.blocks:,} blocks, {listing.bytes:,} bytes on disk"
    )
    lines.append(exchange)
    return "\n".join(lines)


TEXT: dict[type, Any] = {
    api.DataRoot: _root,
    api.DataRoots: _roots,
    api.DataExported: lambda d: f"{d.path}  ({d.size:,} bytes, {d.cid})",
    api.DataRemoved: lambda d: f"removed {d.cid}: {d.blocks:,} blocks, {d.bytes:,} bytes freed",
}
