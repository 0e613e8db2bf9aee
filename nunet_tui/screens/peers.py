"""``p``: the peers this node knows on its channel, with what they offer and how they are.

One row per peer: its short id (after its name, when its advert has one), first address,
direct or relayed, latency, channel, CPU/RAM/GPU offered (signed advert) and free (last
heartbeat), last seen. ``/`` filters on any column's text; rows change live as PeerChanged
events arrive; Enter opens a chat with the peer; ``d`` asks the DHT for the channel's
providers first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import DataTable, Footer, Static

from engine.api import ListPeers, Peer, PeerChanged, PeerList
from engine.domain.peer_names import TABLE_NAME_WIDTH, peer_label
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import (
    DASH,
    ago,
    latency,
    safe,
    short_addr,
    table_cell,
    thousands,
)
from nunet_tui.screens.base import TABLE_BINDINGS, FilteredTableScreen
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.sortable_table import AUTO, Row
from nunet_tui.widgets.table_columns import fit
from nunet_tui.widgets.table_rows import selected_key

COLUMNS = (
    ("peer", "Peer"),
    ("addr", "Address"),
    ("route", "Route"),
    ("latency", "Latency"),
    ("channel", "Channel"),
    ("cpu", "CPU MHz"),
    ("ram", "RAM MB"),
    ("gpu", "GPUs"),
    ("seen", "Last seen"),
)
# Each column's usual widest cell, and which go first when the terminal is narrow: what a
# consumer picks a provider by (free CPU, RAM, GPUs) before where it is.
WIDTHS = {
    "peer": 13,
    "addr": 21,
    "route": 7,
    "latency": 7,
    "channel": 14,
    "cpu": 11,
    "ram": 11,
    "gpu": 16,
    "seen": 9,
}
KEPT_FIRST = ("peer", "cpu", "ram", "gpu", "latency", "seen", "route", "channel", "addr")
# The panel's margin, border and padding around the table (peers.tcss), both sides together.
PANEL_CHROME = 6


class PeersScreen(FilteredTableScreen):
    TABLE_ID = "peers-table"
    # Vast.ai's offer search: by price, free CPU, RAM, GPUs, latency (best first), last seen.
    SORTS = (
        ("price", "price (low tier)"),
        ("cpu", "free CPU"),
        ("ram", "free RAM"),
        ("gpu", "free GPUs"),
        ("latency", "latency"),
        ("seen", "last seen"),
    )
    CSS_PATH = "peers.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the dashboard", id="peers.back"),
        Binding("enter", "chat", "Chat", tooltip="Chat with the selected peer", id="peers.chat"),
        Binding(
            "d",
            "lookup",
            "DHT lookup",
            tooltip="Ask the DHT for the channel's providers",
            id="peers.lookup",
        ),
        Binding("r", "reload", "Refresh", tooltip="Read the list again", id="peers.reload"),
        *TABLE_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.peers: dict[str, Peer] = {}
        self.channel: str | None = None
        self.problem: Content | None = None
        self.loaded = False
        self.columns: tuple[str, ...] = ()  # shown now: those that fit (on_resize)

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with Vertical(id="peers-panel", classes="panel") as panel:
            panel.border_title = "Peers"
            yield self.filter_box()
            yield Static(id="peers-note", markup=False)
            table: DataTable[Text] = DataTable(
                id="peers-table", cursor_type="row", zebra_stripes=True
            )
            yield table
        yield Footer()

    def on_resize(self, event: events.Resize) -> None:
        columns = fit([k for k, _ in COLUMNS], WIDTHS, KEPT_FIRST, event.size.width - PANEL_CHROME)
        if columns == self.columns:
            return
        self.columns = columns
        table: DataTable[Text] = self.query_one("#peers-table", DataTable)
        table.clear(columns=True)
        labels = dict(COLUMNS)
        for key in columns:
            table.add_column(labels[key], key=key)
        if self.loaded:
            self.show()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#peers-table", DataTable).focus()
        self.set_interval(1.0, self._tick_ages)

    # --- reading -------------------------------------------------------------------------

    def reload(self) -> None:
        self.load(dht=False)

    @work(exclusive=True, group="refresh")
    async def load(self, dht: bool = False) -> None:
        try:
            reply: PeerList = await self.nunet.client.call(ListPeers(dht=dht))
        except EngineError as exc:
            self.problem = _explain(exc)
            self.peers = {}
        else:
            self.problem = None
            self.channel = reply.channel
            self.peers = {peer.peer_id: peer for peer in reply.peers}
        self.loaded = True
        self.show()

    @handles(PeerChanged)
    def _peer_changed(self, event: PeerChanged) -> None:
        if event.peer is None:
            self.peers.pop(event.peer_id, None)
        else:
            self.peers[event.peer_id] = event.peer
        if self.loaded and self.problem is None:
            self.show()

    # --- showing -------------------------------------------------------------------------

    def show(self) -> None:
        if not self.columns:
            return  # before the first layout: on_resize shows them
        table: DataTable[Text] = self.query_one("#peers-table", DataTable)
        note = self.query_one("#peers-note", Static)
        panel = self.query_one("#peers-panel")
        now = self.nunet.clock()
        keys = [key for key, _ in COLUMNS]
        at = [keys.index(key) for key in self.columns]
        rows = [
            Row(
                peer.peer_id,
                [table_cell(cell) for i, cell in enumerate(_row(peer, now)) if i in at],
                peer,
                " ".join([peer.peer_id, peer.display_name, *peer.addrs]),
            )
            for peer in _ordered(self.peers.values())
        ]
        shown = self.sorter.fill(table, rows)
        query = self.sorter.query.strip()

        panel.border_title = f"Peers · {safe(self.channel)}" if self.channel else "Peers"
        panel.border_subtitle = (
            self.sorter.caption(len(shown), len(rows), "peer") + " · CPU, RAM, GPUs: free/offered"
        )
        table.display = bool(shown)
        note.display = not shown
        if self.problem is not None:
            note.update(self.problem)
        elif not rows:
            note.update(
                Content.assemble(
                    ("No peers yet. ", "bold"),
                    "Peers appear as they announce themselves on this channel (adverts and "
                    "heartbeats). Press ",
                    ("d", "bold $text-accent"),
                    " to ask the DHT now.",
                )
            )
        elif not shown:
            note.update(Content.assemble("No peer matches ", (repr(query), "bold"), "."))

    def _tick_ages(self) -> None:
        """Keep "last seen" honest without re-reading anything."""
        if not self.is_current or not self.peers:
            return
        table: DataTable[Text] = self.query_one("#peers-table", DataTable)
        now = self.nunet.clock()
        for peer_id, peer in self.peers.items():
            if peer_id in table.rows and "seen" in self.columns:
                table.update_cell(peer_id, "seen", table_cell(Content(ago(peer.last_seen, now))))

    # --- actions -------------------------------------------------------------------------

    def action_reload(self) -> None:
        self.load(dht=False)

    def action_lookup(self) -> None:
        self.notify("Asking the DHT for this channel's providers…", title="Peers")
        self.load(dht=True)

    def action_chat(self) -> None:
        peer_id = selected_key(self.query_one("#peers-table", DataTable))
        if peer_id is not None:
            self.nunet.open_screen("chat", peer_id=peer_id)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.nunet.open_screen("chat", peer_id=event.row_key.value)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "chat":
            return bool(self.peers)
        return super().check_action(action, parameters)

    def sort_value(self, item: Any, key: str) -> Any:
        peer: Peer = item
        res = peer.resources
        if key == "latency":
            return None if peer.latency_ms is None else -peer.latency_ms  # fastest first
        if key == "seen":
            return peer.last_seen
        if key == "price":
            low = res.price_units.get("low") if res is not None else None
            return None if low is None else -low  # cheapest first
        if key not in ("cpu", "ram", "gpu"):
            return AUTO
        if res is None:
            return None
        free = {"cpu": res.free_cpu_mhz, "ram": res.free_memory_mb, "gpu": res.free_gpus}
        offered = {"cpu": res.cpu_mhz, "ram": res.memory_mb, "gpu": len(res.gpus)}
        value = free.get(key)
        return offered.get(key) if value is None else value


def _ordered(peers: Iterable[Peer]) -> list[Peer]:
    return sorted(peers, key=lambda p: (-(p.last_seen or 0), p.peer_id))


def _row(peer: Peer, now: float) -> tuple[Content, ...]:
    res = peer.resources
    muted = "$text-muted"
    if res is None:
        cpu = ram = Content.styled(DASH, muted)
        gpus = Content.styled(DASH, muted)
    else:
        cpu = _free_of(res.free_cpu_mhz, res.cpu_mhz)
        ram = _free_of(res.free_memory_mb, res.memory_mb)
        if res.gpus:
            models = ", ".join(sorted({safe(g.model) for g in res.gpus}))
            free = "?" if res.free_gpus is None else str(res.free_gpus)
            gpus = Content(f"{free}/{len(res.gpus)} {models}")
        else:
            gpus = Content.styled("none", muted)
    return (
        Content.styled(
            peer_label(peer.peer_id, peer.display_name, name_width=TABLE_NAME_WIDTH), "bold"
        ),
        Content(short_addr(peer.addrs[0]) if peer.addrs else DASH),
        Content.styled("relayed", "$text-warning") if peer.relayed else Content("direct"),
        Content(latency(peer.latency_ms)),
        Content(safe(peer.channel) or DASH),
        cpu,
        ram,
        gpus,
        Content(ago(peer.last_seen, now)),
    )


def _free_of(free: int | None, offered: int) -> Content:
    if not offered:
        return Content.styled(DASH, "$text-muted")
    left = "?" if free is None else thousands(free)
    return Content.assemble(left, ("/", "$text-muted"), thousands(offered))


def _explain(exc: EngineError) -> Content:
    if exc.code == "no_network":
        return Content.assemble(
            ("This engine runs without the network. ", "bold"),
            "It was started for one command, or for tests, and does not join a channel. "
            "Open nunet-tui normally (or start `nunet-tui daemon`) to see peers.",
        )
    if exc.code == "offline":
        return Content.assemble(
            ("Not on the network yet. ", "bold $text-warning"),
            "The node is still starting its network or cannot listen; the header says when it "
            "is online. Press r to try again.",
        )
    return Content(safe(exc.message))


__all__ = ["PeersScreen"]
