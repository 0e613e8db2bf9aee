"""``nunet-tui overlay join | leave | status``: a job's private network across providers
(issue 25 §2; docs/cluster-overlay.md), set by hand until the gang scheduling sends the same.

    nunet-tui overlay join JOB_ID --container C --subnet 10.7.1.0/24 --address 10.7.1.1 \\
        --member PEER_ID=10.7.1.1 --member OTHER_PEER_ID=10.7.1.2

Each provider of the job runs it with its own container and address and the same members;
``status`` prints what each overlay carried (metered bytes) and refused."""

from __future__ import annotations

import argparse
from typing import Any

from engine import api
from engine.client import EngineClient
from nunet_tui.cli.output import show, show_json


def _member(text: str) -> api.OverlayMember:
    """An argparse type: PEER_ID=ADDRESS."""
    peer_id, sep, address = text.partition("=")
    if not sep or not peer_id or not address:
        raise argparse.ArgumentTypeError(
            f"{text[:60]!r}: give a member as PEER_ID=ADDRESS, like 12D3KooW...=10.7.1.2"
        )
    return api.OverlayMember(peer_id=peer_id.strip(), address=address.strip())


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    overlay = sub.add_parser("overlay", help="a job's private network across providers")
    kinds = overlay.add_subparsers(dest="overlay_command", metavar="OVERLAY_COMMAND", required=True)
    join = kinds.add_parser("join", parents=[common], help="give a container the job's network")
    join.add_argument("job_id")
    join.add_argument("--container", required=True, help="a running container, id or name")
    join.add_argument("--subnet", required=True, metavar="10.X.Y.0/24")
    join.add_argument("--address", required=True, metavar="10.X.Y.N", help="this replica's")
    join.add_argument(
        "--member",
        type=_member,
        action="append",
        required=True,
        metavar="PEER_ID=ADDRESS",
        help="every replica, this one included (repeat)",
    )
    kinds.add_parser("leave", parents=[common], help="remove a job's network").add_argument(
        "job_id"
    )
    status = kinds.add_parser("status", parents=[common], help="what each overlay carried")
    status.add_argument("job_id", nargs="?", default="")


def text(overlays: tuple[api.OverlayStats, ...]) -> str:
    if not overlays:
        return "no overlay on this node"
    lines = []
    for o in overlays:
        state = "carrying" if o.carrying else "ended"
        lines.append(
            f"{o.job_id}: {o.address} in {o.subnet}, {len(o.members)} members, "
            f"{o.peers_connected} connected ({state})"
        )
        lines.append(
            f"  metered: {o.bytes_out:,} bytes out ({o.packets_out:,} packets), "
            f"{o.bytes_in:,} bytes in ({o.packets_in:,} packets)"
        )
        lines.append(
            f"  refused: {o.dropped_out:,} packets out, {o.dropped_in:,} in, "
            f"{o.strangers_refused:,} strangers' streams"
        )
    return "\n".join(lines)


def _print(args: argparse.Namespace, overlays: tuple[api.OverlayStats, ...]) -> None:
    if getattr(args, "json", False):
        show_json([api.to_builtins(o) for o in overlays])
    else:
        show(text(overlays))


def _join(args: argparse.Namespace, client: EngineClient) -> None:
    stats: api.OverlayStats = client.call_blocking(
        api.OverlayJoin(
            job_id=args.job_id,
            container=args.container,
            subnet=args.subnet,
            address=args.address,
            members=tuple(args.member),
        )
    )
    _print(args, (stats,))


def _leave(args: argparse.Namespace, client: EngineClient) -> None:
    done: api.Done = client.call_blocking(api.OverlayLeave(job_id=args.job_id))
    if getattr(args, "json", False):
        show_json(api.to_builtins(done))
    else:
        show(done.message)


def _status(args: argparse.Namespace, client: EngineClient) -> None:
    reply: api.OverlayStatusReply = client.call_blocking(api.OverlayStatus(job_id=args.job_id))
    _print(args, reply.overlays)


RUNNERS = {"overlay join": _join, "overlay leave": _leave, "overlay status": _status}
