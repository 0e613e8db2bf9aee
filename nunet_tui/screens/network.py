"""``n``: NuNet's network-status dashboard for this node's channel.

From the heartbeats this node has heard (GetNetworkStatus): how many providers, how much CPU,
RAM, GPUs and VRAM they onboarded and how much of it is free, the load as bars, and one row
per peer with its latest heartbeat. Refreshed every few seconds and when a peer changes.

While the network is up, the "Reachability" panel is the connectivity doctor
(``NetworkDoctor``, ``nunet-tui network doctor``): whether peers can dial this node (AutoNAT's
verdict and who found it), how consumers reach it, the one fix when they cannot, its
addresses, relay reservations and each connection's path.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Footer, Static

from engine.api import (
    GetNetworkStatus,
    NetworkDoctor,
    NetworkDoctorReport,
    NetworkStatus,
    Peer,
    PeerChanged,
)
from engine.domain.peer_names import TABLE_NAME_WIDTH, peer_label
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import (
    DASH,
    ago,
    safe,
    short_addr,
    short_peer_id,
    table_cell,
    thousands,
)
from nunet_tui.screens.base import TABLE_BINDINGS, CapabilityScreen
from nunet_tui.viewmodels.reachability import VERDICT, consumers_line, evidence_line
from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.meter import Meter
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.sortable_table import AUTO, Row, SortableTables, TableSort
from oracle_client.ntx import format_ntx

REFRESH_S = 3.0
SHOWN_CONNECTIONS = 6  # connection rows in the panel; the CLI lists them all


class NetworkScreen(SortableTables, CapabilityScreen):
    CSS_PATH = "network.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the dashboard", id="network.back"),
        Binding(
            "r", "reload", "Refresh", tooltip="Read the network status again", id="network.reload"
        ),
        *TABLE_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.status: NetworkStatus | None = None
        self.doctor: NetworkDoctorReport | None = None
        sorts = (
            ("cpu", "free CPU"),
            ("ram", "free RAM"),
            ("gpu", "free GPUs"),
            ("vram", "free VRAM"),
            ("beat", "heartbeat"),
        )
        self.sorters = {"beats-table": TableSort(sorts, _sort_value)}

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with VerticalScroll(id="network-body", can_focus=False):
            with Vertical(id="totals", classes="panel") as panel:
                panel.border_title = "Channel"
                yield KeyTable(id="channel-facts")
                yield Meter("CPU", "MHz in use", id="net-cpu", label_width=6, value_width=26)
                yield Meter("RAM", "MB in use", id="net-ram", label_width=6, value_width=26)
                yield Meter("GPUs", "in use", id="net-gpu", label_width=6, value_width=26)
                yield Meter("VRAM", "MB in use", id="net-vram", label_width=6, value_width=26)
                yield Static(id="network-note", markup=False)
            with Vertical(id="reachability", classes="panel") as panel:
                panel.border_title = "Reachability"
                panel.border_subtitle = "nunet-tui network doctor"
                yield KeyTable(id="doctor-facts")
            with Vertical(id="beats", classes="panel") as panel:
                panel.border_title = "Recent heartbeats"
                yield self.filter_box()
                table: DataTable[Text] = DataTable(
                    id="beats-table", cursor_type="row", zebra_stripes=True
                )
                for key, label in (
                    ("peer", "Peer"),
                    ("cpu", "CPU MHz free/total"),
                    ("ram", "RAM MB free/total"),
                    ("gpu", "GPUs free/total"),
                    ("vram", "VRAM MB free"),
                    ("jobs", "Jobs"),
                    ("up", "Uptime"),
                    ("beat", "Heartbeat"),
                ):
                    table.add_column(label, key=key)
                yield table
                yield Static(id="beats-note", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.set_interval(REFRESH_S, self._tick)

    def _tick(self) -> None:
        if self.is_current:
            self.load()

    def reload(self) -> None:
        self.load()

    def action_reload(self) -> None:
        self.load()

    @work(exclusive=True, group="refresh")
    async def load(self) -> None:
        status = await self.nunet.call(GetNetworkStatus(), title="Network")
        if status is not None:
            self.status = status
            self.show(status)
        try:
            report: NetworkDoctorReport | None = await self.nunet.client.call(NetworkDoctor())
        except EngineError:
            report = None  # an engine without the doctor: no panel, no error every refresh
        self.show_doctor(report)

    def show_doctor(self, report: NetworkDoctorReport | None) -> None:
        self.doctor = report
        panel = self.query_one("#reachability")
        panel.display = report is not None and report.online
        if report is None or not report.online:
            return
        self.query_one("#doctor-facts", KeyTable).set_rows(doctor_rows(report, self.nunet.clock()))

    @handles(PeerChanged)
    def _peer_changed(self, event: PeerChanged) -> None:
        self.load()

    def show(self, status: NetworkStatus) -> None:
        self.status = status
        totals = status.totals
        self.query_one("#totals").border_title = (
            f"Channel · {safe(status.channel)}" if status.channel else "Channel"
        )
        network_off = getattr(self.app, "network", None) is not None and (
            self.nunet.network.state == "off"
        )
        if status.online:
            state = Content.assemble(("● ", "$success"), "online")
        elif network_off:
            state = Content.assemble(("○ ", "$text-muted"), "network off")
        else:
            state = Content.assemble(("○ ", "$warning"), "offline")
        listen = short_addr(status.listen_addrs[0]) if status.listen_addrs else DASH
        self.query_one("#channel-facts", KeyTable).set_rows(
            [
                ("Network", Content.assemble(state, f" · {status.connected_peers} connected")),
                ("Listening", Content(listen)),
                (
                    "Providers",
                    Content(
                        f"{totals.providers} onboarded · {totals.running_jobs} job"
                        f"{'s' if totals.running_jobs != 1 else ''} running"
                    ),
                ),
                (
                    "Free now",
                    Content(
                        f"{thousands(totals.free_cpu_mhz)} MHz · "
                        f"{thousands(totals.free_memory_mb)} MB RAM · "
                        f"{totals.free_gpus} GPU{'s' if totals.free_gpus != 1 else ''} · "
                        f"{thousands(totals.free_vram_mb)} MB VRAM"
                    ),
                ),
                (
                    "NTX paid",
                    Content(
                        f"{format_ntx(totals.paid_units)} to providers · this node "
                        f"earned {format_ntx(status.claimed_units)}, spent "
                        f"{format_ntx(status.paid_out_units)}"
                    ),
                ),
            ]
        )
        self.query_one("#net-cpu", Meter).set_values(
            totals.cpu_mhz - totals.free_cpu_mhz, totals.cpu_mhz
        )
        self.query_one("#net-ram", Meter).set_values(
            totals.memory_mb - totals.free_memory_mb, totals.memory_mb
        )
        self.query_one("#net-gpu", Meter).set_values(totals.gpus - totals.free_gpus, totals.gpus)
        self.query_one("#net-vram", Meter).set_values(
            totals.vram_mb - totals.free_vram_mb, totals.vram_mb
        )
        note = self.query_one("#network-note", Static)
        note.display = not status.online or totals.providers == 0
        if network_off:
            note.update(
                Content.assemble(
                    ("This engine runs without the network. ", "bold"),
                    "It was started for one command, or for tests, and hears no heartbeats. "
                    "Open nunet-tui normally (or start `nunet-tui daemon`) to see the channel.",
                )
            )
        elif not status.online:
            note.update(
                Content.assemble(
                    ("Not on the network. ", "bold $text-warning"),
                    "The totals come from the heartbeats this node hears on its channel; "
                    "they appear once the node is online (see the header).",
                )
            )
        elif totals.providers == 0:
            note.update(
                Content.styled(
                    "No provider has sent a heartbeat on this channel yet.", "$text-muted"
                )
            )

        self.show_beats()

    def redraw_table(self, table_id: str) -> None:
        self.show_beats()

    def show_beats(self) -> None:
        if self.status is None:
            return
        now = self.nunet.clock()
        table: DataTable[Text] = self.query_one("#beats-table", DataTable)
        beating = [p for p in self.status.peers if p.last_heartbeat is not None]
        rows = [
            Row(peer.peer_id, [table_cell(c) for c in _beat_row(peer, now)], peer, peer.peer_id)
            for peer in beating
        ]
        sorter = self.sorters["beats-table"]
        shown = sorter.fill(table, rows)
        table.display = bool(shown)
        beats_note = self.query_one("#beats-note", Static)
        beats_note.display = not shown
        if not beating:
            beats_note.update(Content.styled("No heartbeats heard yet.", "$text-muted"))
        elif not shown:
            beats_note.update(
                Content.assemble("No peer matches ", (repr(sorter.query.strip()), "bold"))
            )
        self.query_one("#beats").border_subtitle = (
            sorter.caption(len(shown), len(rows), "peer") if beating else ""
        )


_VERDICT_STYLE = {"public": "$success", "private": "$warning", "unknown": "$text-muted"}


def doctor_rows(report: NetworkDoctorReport, now: float) -> list[tuple[str, Content]]:
    verdict = report.reachability
    checked = f" · checked {ago(report.checked_at, now)}" if report.checked_at else ""
    rows: list[tuple[str, Content]] = [
        (
            "Reachable",
            Content.assemble(
                (f"{verdict}", f"bold {_VERDICT_STYLE[verdict]}"),
                f": {VERDICT[verdict]}",
                (checked, "$text-muted"),
            ),
        ),
        ("Reach", Content(_capitalised(consumers_line(report)))),
    ]
    if report.fix:
        rows.append(("Fix", Content.styled(safe(report.fix), "bold $text-warning")))
    for i, e in enumerate(report.evidence):
        line = f"{short_peer_id(e.peer_id)} {evidence_line(e.outcome, e.addr, e.detail)}"
        rows.append(("Evidence" if i == 0 else "", Content(safe(line))))
    rows.append(
        ("Listening", Content(", ".join(short_addr(a) for a in report.listen_addrs) or DASH))
    )
    rows.append(("Seen as", Content(", ".join(safe(a) for a in report.observed_addrs) or DASH)))
    if not report.reservations:
        rows.append(("Relays", Content.styled("no reservation", "$text-muted")))
    for i, r in enumerate(report.reservations):
        left = max(0.0, r.expires_at - now)
        rows.append(
            (
                "Relays" if i == 0 else "",
                Content(
                    f"{short_peer_id(r.relay_peer_id)} at {short_addr(r.circuit_addr)} · "
                    f"reserved, expires in {left / 60:.0f} min"
                ),
            )
        )
    rows.append(("Forward", Content(safe(report.upnp))))
    conns = report.connections
    direct = sum(1 for c in conns if c.path == "direct")
    rows.append(("Connections", Content(f"{direct} direct · {len(conns) - direct} relayed")))
    for c in conns[:SHOWN_CONNECTIONS]:
        via = f" via {short_peer_id(c.via_relay)}" if c.via_relay else ""
        rows.append(
            (
                "",
                Content(
                    f"{short_peer_id(c.peer_id)} {c.path} · {safe(c.transport)}{via} · "
                    f"{short_addr(c.remote_addr)}"
                ),
            )
        )
    if len(conns) > SHOWN_CONNECTIONS:
        rows.append(("", Content.styled(f"+{len(conns) - SHOWN_CONNECTIONS} more", "$text-muted")))
    return rows


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def _sort_value(peer: Peer, key: str) -> Any:
    """Free resources, most first; the newest heartbeat first; else the cell's text."""
    res = peer.resources
    if key == "beat":
        return peer.last_heartbeat
    if key not in ("cpu", "ram", "gpu", "vram"):
        return AUTO
    if res is None:
        return None
    free = {
        "cpu": res.free_cpu_mhz,
        "ram": res.free_memory_mb,
        "gpu": res.free_gpus,
        "vram": res.free_vram_mb,
    }
    return free[key]


def _beat_row(peer: Peer, now: float) -> tuple[Content, ...]:
    res = peer.resources
    if res is None:
        blank = Content.styled(DASH, "$text-muted")
        return (
            Content(peer_label(peer.peer_id, peer.display_name, name_width=TABLE_NAME_WIDTH)),
            blank,
            blank,
            blank,
            blank,
            blank,
            blank,
            Content(ago(peer.last_heartbeat, now)),
        )

    def pair(free: int | None, total: int) -> Content:
        left = "?" if free is None else thousands(free)
        return Content.assemble(left, ("/", "$text-muted"), thousands(total))

    uptime = res.uptime_s
    return (
        Content.styled(
            peer_label(peer.peer_id, peer.display_name, name_width=TABLE_NAME_WIDTH), "bold"
        ),
        pair(res.free_cpu_mhz, res.cpu_mhz),
        pair(res.free_memory_mb, res.memory_mb),
        pair(res.free_gpus, len(res.gpus)),
        Content("?" if res.free_vram_mb is None else thousands(res.free_vram_mb)),
        Content("?" if res.running_jobs is None else str(res.running_jobs)),
        Content(_duration(uptime) if uptime is not None else DASH),
        Content(ago(peer.last_heartbeat, now)),
    )


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86_400:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 86_400} d {seconds % 86_400 // 3600} h"


__all__ = ["NetworkScreen"]
