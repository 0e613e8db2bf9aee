"""The command palette (ctrl+p): every node command by name, offered when it applies."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from textual.command import DiscoveryHit, Hit, Hits, Provider


class NodeCommands(Provider):
    """Switch mode, onboard, resources, pause, resume, offboard, screens, help, quit."""

    def _commands(self) -> Iterator[tuple[str, str, Callable[[], Any]]]:
        app: Any = self.app
        mode = getattr(app, "mode", None)
        node = getattr(app, "node", None)
        onboarding = node.info.onboarded if node is not None else None
        if mode is not None:
            other = "consumer" if mode == "provider" else "provider"
            yield (
                f"Switch to {other} mode",
                f"Show the {other} screens (key m); the choice is remembered",
                partial(app.action_use_mode, other),
            )
        if node is not None and mode is not None:
            if onboarding is None:
                yield (
                    "Onboard this machine",
                    "Offer memory, CPU and GPUs to the network (like nunet onboard)",
                    app.action_onboard,
                )
            else:
                yield (
                    "Change resources",
                    "Offer a different amount of memory and CPU (like resource-config)",
                    app.action_resources,
                )
                if onboarding.state == "active":
                    yield ("Pause", "Stop accepting jobs, keep the onboarding", app.action_pause)
                else:
                    yield ("Resume", "Accept jobs again", app.action_resume)
                yield ("Offboard", "Remove this machine's onboarding", app.action_offboard)
        if node is not None and mode is not None:
            if mode == "provider":
                yield (
                    "Resources",
                    "Specs priced per machine-hour, custom resources, pools (e)",
                    partial(app.action_open, "resources"),
                )
                yield (
                    "GPUs",
                    "Live GPU load, memory, temperature and power (g)",
                    partial(app.action_open, "gpus"),
                )
            yield (
                "Peers",
                "Peers on this channel and what they offer (p)",
                partial(app.action_open, "peers"),
            )
            yield ("Chat", "Conversations and chat requests (c)", partial(app.action_open, "chat"))
            yield (
                "Network status",
                "The channel's resources, load and heartbeats (n)",
                partial(app.action_open, "network"),
            )
            yield (
                "Jobs",
                "Jobs you bought and jobs this machine runs: logs, results (j)",
                partial(app.action_open, "jobs"),
            )
            yield (
                "Data",
                "Files and folders by content id: add, get, pin, remove (d)",
                partial(app.action_open, "data"),
            )
            yield (
                "Wallet",
                "Address, NTX and ADA balance, escrow transactions; new or import (w)",
                partial(app.action_open, "wallet"),
            )
            yield (
                "Rewards",
                "Claim what paid jobs earned, see locks and refunds ($)",
                partial(app.action_open, "rewards"),
            )
            if mode == "consumer":
                yield (
                    "Account",
                    "Recharges, what each job paid and got back, the balance (a)",
                    partial(app.action_open, "account"),
                )
                yield (
                    "Submit a job",
                    "Describe an ML job, see its price and who can run it (s)",
                    partial(app.action_open, "submit"),
                )
                yield (
                    "Notebooks",
                    "JupyterLab on a provider: new, open, stop, delete (b)",
                    partial(app.action_open, "notebooks"),
                )
        yield ("Help", "Show every key (?)", app.action_help)
        yield ("Quit", "Leave nunet-tui (q)", app.action_quit)

    async def discover(self) -> Hits:
        for name, help_text, callback in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, callback in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
