"""``nunet-tui fleet``: every rig of config.toml's ``[fleet]`` at once (engine/fleet.py).

``--json`` prints one snapshot of every rig and exits; ``fleet pause RIG`` / ``fleet resume
RIG`` act on one rig; plain ``fleet`` opens the fleet screen (nunet_tui/fleet_app.py, Textual
imported only then). No engine of this home is opened: the rigs are other daemons.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import msgspec

from engine.config import FleetRig, Paths, Settings, load_settings
from engine.errors import EngineError
from engine.fleet import LiveRigs, RigSnapshot, act, poll
from nunet_tui.cli import output
from oracle_client.ntx import PAID, format_ntx


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    fleet = sub.add_parser(
        "fleet",
        parents=[common],
        help="every rig of [fleet] in config.toml at once (the fleet screen; --json: one snapshot)",
    )
    fleet.add_argument(
        "action", nargs="?", choices=("pause", "resume"), help="pause or resume one rig"
    )
    fleet.add_argument("rig", nargs="?", help="the rig's name in [fleet] rigs")


def run_fleet(paths: Paths, args: argparse.Namespace, dashboard: Callable[[Paths], int]) -> int:
    """``dashboard(paths)``: the app attached to the daemon of that home (main.py's)."""
    settings = load_settings(paths, addresses=False)
    source = LiveRigs(settings.fleet, paths.config_dir)
    if args.action is not None:
        return _act(source, settings, args)
    if not getattr(args, "json", False):
        return _run_app(source, settings, dashboard)
    if not settings.fleet.rigs:
        raise EngineError("no_rigs", _NO_RIGS.format(file=paths.config_file))
    shots = poll(source, settings.fleet.timeout_s, time.time())
    output.show_json({"rigs": [snapshot_json(shot) for shot in shots]})
    return 0


_NO_RIGS = (
    'no rigs in [fleet] of {file}: add rigs = [{{ name = "rig-1", home = "/path" }}, '
    '{{ name = "rig-2", socket = "/path/control.sock" }}, {{ name = "rig-3", url = '
    '"http://127.0.0.1:9999", token_file = "/path/state/api-token" }}]'
)


def snapshot_json(shot: RigSnapshot) -> dict[str, Any]:
    """A rig's snapshot with its paid-today figure also in words (``1.5 NTX paid``)."""
    data: dict[str, Any] = msgspec.to_builtins(shot)
    data["paid_today"] = format_ntx(shot.paid_today_units, PAID)
    return data


def _rig(settings: Settings, name: str | None, action: str) -> FleetRig:
    names = ", ".join(rig.name for rig in settings.fleet.rigs) or "none"
    if name is None:
        raise EngineError("usage", f"name the rig: nunet-tui fleet {action} RIG (rigs: {names})")
    for rig in settings.fleet.rigs:
        if rig.name == name:
            return rig
    raise EngineError("no_rig", f"no rig {name!r} in [fleet] rigs (there: {names})")


def _act(source: LiveRigs, settings: Settings, args: argparse.Namespace) -> int:
    rig = _rig(settings, args.rig, args.action)
    try:
        onboarding = act(source, rig, args.action)
    except EngineError as exc:  # the rig's own words ("not onboarded"): say whose they are
        raise EngineError(exc.code, f"{rig.name}: {exc.message}") from None
    if getattr(args, "json", False):
        output.show_json({"rig": rig.name, "state": onboarding.state})
    else:
        output.show(f"{rig.name}: {onboarding.state}")
    return 0


def _run_app(source: LiveRigs, settings: Settings, dashboard: Callable[[Paths], int]) -> int:
    """The fleet screen; Enter on a rig of this machine opens its dashboard (the app attached
    to its daemon) and, once that is quit, the fleet again."""
    from nunet_tui.fleet_app import FleetApp

    while True:
        home = FleetApp(
            source,
            timeout=settings.fleet.timeout_s,
            refresh_s=settings.fleet.refresh_s,
            keys=settings.keys,
            attach=True,
        ).run()
        if not home:
            return 0
        dashboard(Paths.for_home(home))
