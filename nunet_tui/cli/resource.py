"""``nunet-tui resource list | spec add|rm | custom add|rm | pool add|rm | group add|rm``:
what this provider sells (issue 12).

Each command asks the engine (engine/resources/commands.py), which checks it with the same
validator as the TUI's form (engine/domain/specs.py) and answers with the whole listing:
printed as a table, or as one JSON object with ``--json`` (amounts in base units,
``price_units_hour`` and ``min_charge_units``). Prices are typed in NTX ("2.4"), exactly.
"""

from __future__ import annotations

import argparse
from typing import Any

from engine import api
from engine.client import EngineClient
from nunet_tui.cli.output import show, show_json
from oracle_client.ntx import format_ntx, format_rate, parse_ntx


def _ntx(text: str) -> int:
    """An argparse type: an NTX amount to base units, exactly (never more than 6 decimals)."""
    try:
        return parse_ntx(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _whole(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text[:40]}")
    return value


def _indexes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r}: give detected GPU indexes like 0,1 (`nunet-tui capacity --full`)"
        ) from None


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    resource = sub.add_parser("resource", help="what this provider sells: specs, pools")
    kinds = resource.add_subparsers(
        dest="resource_command", metavar="RESOURCE_COMMAND", required=True
    )
    kinds.add_parser("list", parents=[common], help="system and custom resources, specs, pools")

    spec = kinds.add_parser("spec", help="resource specs: resources and a price per hour")
    spec_sub = spec.add_subparsers(dest="spec_command", metavar="SPEC_COMMAND", required=True)
    add = spec_sub.add_parser("add", parents=[common], help="define (or --replace) a spec")
    add.add_argument("name")
    add.add_argument("--cpu", type=_whole, required=True, metavar="CORES")
    add.add_argument("--ram", type=_whole, required=True, metavar="MB")
    add.add_argument("--disk", type=_whole, default=0, metavar="MB")
    add.add_argument("--gpus", type=_whole, default=0, metavar="N")
    add.add_argument("--gpu-resource", metavar="NAME", help="a custom resource's name")
    add.add_argument("--price", type=_ntx, required=True, metavar="NTX", help="NTX per hour")
    add.add_argument("--min-charge", type=_ntx, default=0, metavar="NTX")
    add.add_argument("--pool", default=api.DEFAULT_POOL, metavar="NAME")
    add.add_argument("--replace", action="store_true", help="edit the spec of this name")
    spec_sub.add_parser("rm", parents=[common], help="remove a spec").add_argument("name")

    custom = kinds.add_parser("custom", help="custom resources: GPUs regrouped or declared")
    custom_sub = custom.add_subparsers(
        dest="custom_command", metavar="CUSTOM_COMMAND", required=True
    )
    cadd = custom_sub.add_parser("add", parents=[common], help="name or declare resources")
    cadd.add_argument("name")
    cadd.add_argument("--kind", choices=("gpu", "accelerator"), default="gpu")
    cadd.add_argument("--from-gpus", type=_indexes, metavar="0,1", help="detected GPUs")
    cadd.add_argument("--count", type=_whole, metavar="N", help="how many (declared ones)")
    cadd.add_argument("--vram", type=_whole, default=0, metavar="MB")
    cadd.add_argument("--model", default="")
    cadd.add_argument("--replace", action="store_true")
    custom_sub.add_parser("rm", parents=[common], help="remove one").add_argument("name")

    for what, text in (("pool", "who may use a pool's specs"), ("group", "named consumers")):
        kind = kinds.add_parser(what, help=text)
        kind_sub = kind.add_subparsers(
            dest=f"{what}_command", metavar=f"{what.upper()}_COMMAND", required=True
        )
        made = kind_sub.add_parser("add", parents=[common], help=f"define (or --replace) a {what}")
        made.add_argument("name")
        made.add_argument("--member", action="append", default=[], metavar="PEER_ID")
        if what == "pool":
            made.add_argument("--group", action="append", default=[], metavar="NAME")
        made.add_argument("--replace", action="store_true")
        kind_sub.add_parser("rm", parents=[common], help=f"remove a {what}").add_argument("name")


def _list(args: argparse.Namespace, client: EngineClient) -> api.Resources:
    listing: api.Resources = client.call_blocking(api.ResourceList())
    return listing


def _spec(args: argparse.Namespace, client: EngineClient) -> api.Resources:
    if args.spec_command == "rm":
        return client.call_blocking(api.SpecRemove(name=args.name))
    spec = api.ResourceSpec(
        name=args.name,
        cpu_cores=args.cpu,
        ram_mb=args.ram,
        disk_mb=args.disk,
        gpus=args.gpus,
        gpu_resource=args.gpu_resource,
        price_units_hour=args.price,
        min_charge_units=args.min_charge,
        pool=args.pool,
    )
    return client.call_blocking(api.SpecAdd(spec=spec, replace=args.replace))


def _custom(args: argparse.Namespace, client: EngineClient) -> api.Resources:
    if args.custom_command == "rm":
        return client.call_blocking(api.CustomRemove(name=args.name))
    from_gpus = args.from_gpus
    count = args.count if args.count is not None else (len(from_gpus) if from_gpus else 1)
    custom = api.CustomResource(
        name=args.name,
        kind=args.kind,
        count=count,
        from_gpus=from_gpus,
        vram_mb=args.vram,
        model=args.model,
    )
    return client.call_blocking(api.CustomAdd(custom=custom, replace=args.replace))


def _pool(args: argparse.Namespace, client: EngineClient) -> api.Resources:
    if args.pool_command == "rm":
        return client.call_blocking(api.PoolRemove(name=args.name))
    pool = api.Pool(name=args.name, members=tuple(args.member), groups=tuple(args.group))
    return client.call_blocking(api.PoolAdd(pool=pool, replace=args.replace))


def _group(args: argparse.Namespace, client: EngineClient) -> api.Resources:
    if args.group_command == "rm":
        return client.call_blocking(api.GroupRemove(name=args.name))
    group = api.Group(name=args.name, members=tuple(args.member))
    return client.call_blocking(api.GroupAdd(group=group, replace=args.replace))


def text(listing: api.Resources) -> str:
    """``resource list`` for people."""
    system, onboarded = listing.system, listing.onboarded
    lines = [
        f"system:    {system.cpu_cores} cores, {system.memory_mb:,} MB RAM, "
        f"{system.disk_mb:,} MB disk, {len(system.gpus)} GPU(s)",
    ]
    lines += [f"  GPU {g.index}: {g.vendor} {g.name}, {g.vram_mb:,} MB" for g in system.gpus]
    lines.append(
        f"onboarded: {onboarded.cpu_cores} cores, {onboarded.memory_mb:,} MB RAM, "
        f"{len(onboarded.gpus)} GPU(s)"
    )
    if listing.customs:
        lines.append("custom resources:")
        for c in listing.customs:
            source = (
                f"GPUs {', '.join(map(str, c.from_gpus))}"
                if c.from_gpus is not None
                else "declared"
            )
            model = f" {c.model}" if c.model else ""
            lines.append(f"  {c.name}: {c.count} x {c.kind}{model}, {c.vram_mb:,} MB ({source})")
    heading = "specs (NuNet's tiers: none defined):" if listing.defaults else "specs:"
    lines.append(heading)
    for s in listing.specs:
        gpu = f" · {s.gpus} {s.gpu_resource or 'GPU'}" if s.gpus else ""
        charge = f", min {format_ntx(s.min_charge_units)}" if s.min_charge_units else ""
        pool = "" if s.pool == api.DEFAULT_POOL else f"  [pool {s.pool}]"
        lines.append(
            f"  {s.name}: {s.cpu_cores} CPU · {s.ram_mb:,} MB{gpu} — "
            f"{format_rate(s.price_units_hour)}{charge}{pool}"
        )
    for p in listing.pools:
        groups = f"; groups {', '.join(p.groups)}" if p.groups else ""
        lines.append(f"pool {p.name}: {len(p.members)} member(s){groups}")
    for g in listing.groups:
        lines.append(f"group {g.name}: {len(g.members)} member(s)")
    lines.append(f"kept in {listing.file}")
    return "\n".join(lines)


def _printing(runner: Any) -> Any:
    def run(args: argparse.Namespace, client: EngineClient) -> None:
        listing = runner(args, client)
        if getattr(args, "json", False):
            show_json(api.to_builtins(listing))
        else:
            show(text(listing))

    return run


RUNNERS = {
    "resource list": _printing(_list),
    "resource spec": _printing(_spec),
    "resource custom": _printing(_custom),
    "resource pool": _printing(_pool),
    "resource group": _printing(_group),
}
