"""The app ``nunet-tui fleet`` runs: the fleet screen alone, no engine of its own (it talks
to each rig's daemon through engine/fleet.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType

from engine.fleet import RigSource
from nunet_tui.screens.fleet import FleetScreen


class FleetApp(App[str]):
    """Ends with the home of the rig whose dashboard to open (Enter, ``attach``), or None."""

    TITLE = "nunet-tui fleet"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True, id="fleet_app.quit"),
    ]

    def __init__(
        self,
        source: RigSource,
        *,
        timeout: float = 5.0,
        refresh_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        keys: Mapping[str, str] | None = None,
        attach: bool = False,
    ) -> None:
        super().__init__()
        self.attach = attach
        self.source = source
        self.timeout = timeout
        self.refresh_s = refresh_s
        self.clock = clock
        self.keys = dict(keys or {})

    def on_mount(self) -> None:
        if self.keys:
            from nunet_tui.keymap import check_remaps

            self.keys, problems = check_remaps(self.keys)
            self.set_keymap(self.keys)
            for problem in problems:
                self.notify(problem, severity="warning")
        self.push_screen(
            FleetScreen(self.source, self.timeout, self.refresh_s, self.clock, self.attach)
        )
