"""``nunet-tui fleet``: every rig of ``[fleet]`` on one screen (engine/fleet.py reads them).

One row per rig: its state (online, offline, unreachable), mode, onboarded or paused, GPUs
(count, the hottest, mean load), running jobs, NTX paid to it today, and its alerts; below the
table, the selected rig's details (the reason it is unreachable, its alerts, how to open its
dashboard). Each rig is polled in its own thread worker, so a slow or dead one holds up
neither the others nor the keys; ``r`` polls them all again, space pauses or resumes the
selected rig, Enter says how to open its dashboard.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from engine.config import FleetRig
from engine.errors import EngineError
from engine.fleet import RigSnapshot, RigSource, act, describe, local_home, snapshot
from nunet_tui.format import DASH, safe
from nunet_tui.widgets.table_columns import fit
from oracle_client.ntx import PAID, format_ntx

COLUMNS = (
    ("rig", "Rig"),
    ("state", "State"),
    ("mode", "Mode"),
    ("node", "Node"),
    ("gpus", "GPUs · hottest · load"),
    ("jobs", "Jobs"),
    ("paid", "Paid today"),
    ("alerts", "Alerts"),
)
# Each column's usual widest cell, and which go first when the terminal is narrow: what needs
# a look (state: paused shows there too, GPUs, alerts) and what a rig earns, then the rest.
WIDTHS = {
    "rig": 7,
    "state": 11,
    "mode": 8,
    "node": 13,
    "gpus": 21,
    "jobs": 4,
    "paid": 13,
    "alerts": 6,
}
KEPT_FIRST = ("rig", "state", "gpus", "jobs", "paid", "alerts", "node", "mode")
PANEL_CHROME = 6  # the panel's margin, border and padding (fleet.tcss), both sides
STATE_STYLE = {"online": "green", "offline": "yellow", "unreachable": "red", "polling": "dim"}


class FleetScreen(Screen[None]):
    """The rigs of a ``RigSource``; ``clock`` is the time "today" is counted from."""

    CSS_PATH = "fleet.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "space",
            "toggle_pause",
            "Pause/Resume",
            tooltip="Pause the selected rig (it takes no new jobs), or resume it",
            id="fleet.pause",
        ),
        Binding(
            "enter",
            "open_rig",
            "Dashboard",
            tooltip="Open the selected rig's dashboard (or say how, for a rig elsewhere)",
            id="fleet.open",
            priority=True,  # before the table's own Enter, so the footer names it
        ),
        Binding("r", "refresh", "Refresh", tooltip="Poll every rig again", id="fleet.refresh"),
        Binding(
            "question_mark", "help", "Help", key_display="?", tooltip="This help", id="fleet.help"
        ),
        Binding("q", "app.quit", "Quit", tooltip="Quit", id="fleet.quit"),
    ]

    def __init__(
        self,
        source: RigSource,
        timeout: float = 5.0,
        refresh_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        attach: bool = False,
    ) -> None:
        """``attach``: Enter on a rig of this machine ends the app with its home (the command
        line then attaches the dashboard to it); else, and for other rigs, it shows how."""
        super().__init__()
        self.attach = attach
        self.source = source
        self.timeout = timeout
        self.refresh_s = refresh_s
        self.clock = clock
        self.rigs: list[FleetRig] = list(source.rigs)
        self.snapshots: dict[str, RigSnapshot] = {}
        self.polling: set[str] = set()  # the rigs whose poll is out now
        # What Enter said, for the rig it was said about (shown while that rig is selected).
        self.note: tuple[str, Content] | None = None
        self.columns: tuple[str, ...] = ()  # shown now: those that fit (on_resize)

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-title", markup=False)
        with Vertical(id="fleet-panel", classes="panel") as panel:
            panel.border_title = "Fleet"
            yield DataTable(id="fleet-table", cursor_type="row", zebra_stripes=True)
        with Vertical(id="fleet-detail", classes="panel") as detail:
            detail.border_title = "Selected rig"
            yield Static(id="fleet-detail-text")
        yield Footer()

    def on_resize(self, event: events.Resize) -> None:
        columns = fit([k for k, _ in COLUMNS], WIDTHS, KEPT_FIRST, event.size.width - PANEL_CHROME)
        if columns == self.columns:
            return
        self.columns = columns
        table: DataTable[Text] = self.query_one("#fleet-table", DataTable)
        table.clear(columns=True)
        labels = dict(COLUMNS)
        for key in columns:
            table.add_column(labels[key], key=key)
        self.show()

    def on_mount(self) -> None:
        self.query_one("#fleet-table", DataTable).focus()
        self.show()
        self.action_refresh()
        if self.refresh_s:
            self.set_interval(self.refresh_s, self.action_refresh)

    # --- polling: one thread worker per rig ----------------------------------------------

    def action_refresh(self) -> None:
        for rig in self.rigs:
            self.poll_rig(rig)

    def poll_rig(self, rig: FleetRig) -> None:
        # A rig still answering the last poll is not asked again: a slow one would gather a
        # thread per refresh.
        if rig.name not in self.polling:
            self.polling.add(rig.name)
            self._poll(rig)

    @work(thread=True, group="fleet")
    def _poll(self, rig: FleetRig) -> None:
        shot = snapshot(self.source, rig, self.clock())
        self.app.call_from_thread(self._got, shot)

    def _got(self, shot: RigSnapshot) -> None:
        self.polling.discard(shot.name)
        self.snapshots[shot.name] = shot
        self.show()

    # --- actions -------------------------------------------------------------------------

    def selected(self) -> FleetRig | None:
        table: DataTable[Text] = self.query_one("#fleet-table", DataTable)
        if not self.rigs or table.row_count == 0:
            return None
        return self.rigs[min(table.cursor_row, len(self.rigs) - 1)]

    def action_toggle_pause(self) -> None:
        rig = self.selected()
        if rig is None:
            return
        shot = self.snapshots.get(rig.name)
        if shot is None or shot.state == "unreachable" or not shot.onboarded:
            why = "it is unreachable" if shot and shot.state == "unreachable" else "not onboarded"
            self.notify(f"{rig.name}: nothing to pause or resume ({why})", severity="warning")
            return
        self.act_on(rig, "resume" if shot.paused else "pause")

    @work(thread=True, group="fleet-act")
    def act_on(self, rig: FleetRig, action: Any) -> None:
        try:
            act(self.source, rig, action)
        except (EngineError, OSError) as exc:
            message = exc.message if isinstance(exc, EngineError) else str(exc)
            self.app.call_from_thread(
                self.notify, f"{rig.name}: {action} failed: {safe(message)}", severity="error"
            )
            return
        done = "paused" if action == "pause" else "resumed"
        self.app.call_from_thread(self.notify, f"{rig.name}: {done}")
        self.app.call_from_thread(self.poll_rig, rig)

    def action_open_rig(self) -> None:
        rig = self.selected()
        if rig is None:
            return
        shot = self.snapshots.get(rig.name)
        if self.attach and (home := local_home(rig, shot)) is not None:
            self.app.exit(home)  # the command line opens the app on it, then the fleet again
            return
        self.note = (rig.name, Content(open_command(rig, shot)))
        self.show()

    def action_help(self) -> None:
        from nunet_tui.screens.fleet_help import FleetHelpScreen

        self.app.push_screen(FleetHelpScreen(self))

    def on_data_table_row_selected(self, _event: DataTable.RowSelected) -> None:
        self.action_open_rig()

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self.show_detail()

    # --- showing -------------------------------------------------------------------------

    def show(self) -> None:
        table: DataTable[Text] = self.query_one("#fleet-table", DataTable)
        cursor = table.cursor_row
        table.clear()
        keys = [key for key, _ in COLUMNS]
        at = [keys.index(key) for key in self.columns]
        for rig in self.rigs if self.columns else ():
            cells = _row(rig, self.snapshots.get(rig.name))
            table.add_row(*[cells[i] for i in at], key=rig.name)
        if self.rigs and self.columns:
            table.move_cursor(row=min(cursor, len(self.rigs) - 1))
        counts = {state: 0 for state in ("online", "offline", "unreachable")}
        for shot in self.snapshots.values():
            counts[shot.state] += 1
        alerts = sum(len(shot.alerts) for shot in self.snapshots.values())
        title = self.query_one("#fleet-title", Static)
        title.update(
            f"nunet-tui fleet · {len(self.rigs)} rigs: {counts['online']} online, "
            f"{counts['offline']} offline, {counts['unreachable']} unreachable · {alerts} alerts"
        )
        panel = self.query_one("#fleet-panel")
        panel.border_subtitle = "Paid today: NTX paid to the rig since midnight"
        self.show_detail()

    def show_detail(self) -> None:
        text = self.query_one("#fleet-detail-text", Static)
        rig = self.selected()
        if rig is None:
            text.update(
                Content.assemble(
                    ("No rigs. ", "bold"),
                    'List them in config.toml: [fleet] rigs = [{ name = "rig-1", home = '
                    '"/path" }, { name = "rig-2", socket = "/path/control.sock" }, { name = '
                    '"rig-3", url = "http://127.0.0.1:9999", token_file = "…" }]',
                )
            )
            return
        shot = self.snapshots.get(rig.name)
        lines = [Content.assemble((rig.name, "bold"), f"  {safe(describe(rig))}")]
        if shot is None:
            lines.append(Content("polling…"))
        else:
            if shot.peer_id:
                lines.append(Content(f"peer {shot.peer_id}"))
            if shot.state == "unreachable":
                lines.append(Content.assemble(("unreachable: ", "bold red"), shot.reason))
            else:
                lines.extend(
                    Content.assemble(("⚠ ", "bold yellow"), alert) for alert in shot.alerts
                )
                if not shot.alerts:
                    lines.append(Content("no alerts"))
        if self.note is not None and self.note[0] == rig.name:
            lines.append(self.note[1])
        text.update(Content("\n").join(lines))


def open_command(rig: FleetRig, shot: RigSnapshot | None) -> str:
    """The command that opens ``rig``'s dashboard (the app attached to its daemon)."""
    if rig.home:
        return f"Open its dashboard: nunet-tui --home {shlex.quote(rig.home)} --attach"
    home = shlex.quote(shot.home) if shot is not None and shot.home else "<its home>"
    return (
        f"Open its dashboard on the host that runs it: nunet-tui --home {home} --attach "
        "(the app attaches by home, not by a forwarded socket or URL)"
    )


def _row(rig: FleetRig, shot: RigSnapshot | None) -> list[Text]:
    """The cells of COLUMNS for ``rig``."""
    if shot is None:
        return [Text(rig.name), Text("polling…", style="dim"), *[Text(DASH)] * 6]
    if shot.state == "unreachable":
        state = Text(shot.state, style=STATE_STYLE[shot.state])
        return [Text(rig.name), state, *[Text(DASH)] * 5, Text(str(len(shot.alerts)), "red")]
    # A paused rig that answers says so where the eye goes first (the node column may not fit).
    shown = "paused" if shot.paused and shot.state == "online" else shot.state
    state = Text(shown, style="yellow" if shown == "paused" else STATE_STYLE[shot.state])
    node = "paused" if shot.paused else "onboarded" if shot.onboarded else "not onboarded"
    gpus = Text(str(shot.gpu_count))
    if shot.gpu_hottest_c is not None:
        hot = any(alert.startswith("GPU") for alert in shot.alerts)
        gpus.append(" · ")
        gpus.append(f"{shot.gpu_hottest_c:.0f} °C", "bold red" if hot else "")
    if shot.gpu_utilization is not None:
        gpus.append(f" · {shot.gpu_utilization:.0f} %")
    return [
        Text(rig.name),
        state,
        Text(shot.mode or DASH),
        Text(node, "yellow" if shot.paused else ""),
        gpus,
        Text(str(shot.running_jobs)),
        Text(format_ntx(shot.paid_today_units, PAID)),
        Text(str(len(shot.alerts)), "bold yellow" if shot.alerts else ""),
    ]
