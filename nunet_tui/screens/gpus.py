"""``g`` (provider mode): every GPU live, like nvitop, for the rig's owner.

A card per GPU with bars and 5-minute history of utilisation, memory, temperature and power;
temperature and power near their limits turn the card yellow, then red. Below, the processes
on the GPUs. The first read asks the engine for its history (GetGpuStatus(history=True)),
then one sample a second is appended. Without a GPU the screen says why and what to run.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Footer, Static

from engine.api import GetGpuStatus, GpuSnapshot, GpuStatusReply
from engine.errors import EngineError
from nunet_tui.format import safe, table_cell, thousands
from nunet_tui.screens.base import TABLE_BINDINGS, CapabilityScreen
from nunet_tui.screens.gpu_doctor import GpuDoctorScreen
from nunet_tui.screens.ml_images import MlImagesScreen
from nunet_tui.widgets.gpu_card import GpuCard, GpuFeed
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.sortable_table import Row, SortableTables, TableSort


class GpuScreen(SortableTables, CapabilityScreen):
    CSS_PATH = "gpus.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the dashboard", id="gpus.back"),
        Binding(
            "d",
            "doctor",
            "Doctor",
            tooltip="GPU doctor: what is missing and how to fix it",
            id="gpus.doctor",
        ),
        Binding(
            "i",
            "ml_images",
            "ML images",
            tooltip="Pre-pull the ML framework images",
            id="gpus.ml_images",
        ),
        *TABLE_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.feed = GpuFeed()
        self.problem: str | None = None
        self._has_history = False
        self._timer_started = False
        self.gpus: tuple[GpuSnapshot, ...] = ()  # the last sample's, for the process table
        # The processes by the GPU memory they hold (the cell's MB), most first.
        self.sorters = {"process-table": TableSort((("memory", "GPU memory"),))}

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with VerticalScroll(id="gpu-body", can_focus=False):
            yield Static(id="gpu-facts", markup=False)
            yield Grid(id="gpu-cards")
            with Vertical(id="no-gpu", classes="panel") as panel:
                panel.border_title = "No GPU"
                yield Static(id="no-gpu-text", markup=False)
            with Vertical(id="processes", classes="panel") as panel:
                panel.border_title = "Processes on the GPUs"
                yield self.filter_box()
                table: DataTable[Text] = DataTable(
                    id="process-table", cursor_type="row", zebra_stripes=True
                )
                for key, label in (
                    ("gpu", "GPU"),
                    ("pid", "PID"),
                    ("name", "Process"),
                    ("memory", "GPU memory"),
                ):
                    table.add_column(label, key=key)
                yield table
        yield Footer()

    def action_doctor(self) -> None:
        self.app.push_screen(GpuDoctorScreen())

    def action_ml_images(self) -> None:
        self.app.push_screen(MlImagesScreen())

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#no-gpu").display = False
        self.query_one("#processes").display = False

    def reload(self) -> None:
        self.sample()

    def _tick(self) -> None:
        if self.is_current:
            self.sample()

    @work(exclusive=True, group="refresh")
    async def sample(self) -> None:
        try:
            reply: GpuStatusReply = await self.nunet.client.call(
                GetGpuStatus(history=not self._has_history)
            )
        except EngineError as exc:
            self.problem = safe(exc.message)
            self.show(None)
            return
        self.problem = None
        self._has_history = True
        self.feed.take(reply)
        self.show(reply)
        if not self._timer_started:
            self._timer_started = True
            self.set_interval(reply.interval_s or 1.0, self._tick)

    def show(self, reply: GpuStatusReply | None) -> None:
        cards = self.query_one("#gpu-cards", Grid)
        facts = self.query_one("#gpu-facts", Static)
        no_gpu = self.query_one("#no-gpu")
        processes = self.query_one("#processes")
        gpus = reply.gpus if reply is not None else ()
        no_gpu.display = not gpus
        cards.display = bool(gpus)
        processes.display = bool(gpus)
        facts.display = bool(gpus)
        if not gpus:
            reason = self.problem or (reply.reason if reply is not None else None) or "unknown"
            self.query_one("#no-gpu-text", Static).update(_no_gpu(reason))
            return

        first = gpus[0]
        versions = []
        if first.driver_version:
            versions.append(f"driver {safe(first.driver_version)}")
        if first.cuda_version:
            versions.append(f"CUDA {safe(first.cuda_version)}")
        if first.rocm_version:
            versions.append(f"ROCm {safe(first.rocm_version)}")
        total_vram = sum(g.memory_total_mb or 0 for g in gpus)
        facts.update(
            Content.assemble(
                (f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}", "bold"),
                f" · {thousands(total_vram)} MB VRAM",
                (" · " + " · ".join(versions) if versions else "", ""),
                (
                    f"   sampled every {self.feed.interval_s:g} s · history: last 5 min",
                    "$text-muted",
                ),
            )
        )

        existing = {card.gpu.uuid: card for card in cards.query(GpuCard)}
        wanted = [g.uuid for g in gpus]
        if list(existing) != wanted:
            cards.remove_children()
            cards.mount_all(GpuCard(self.feed, gpu) for gpu in gpus)
        else:
            for gpu in gpus:
                existing[gpu.uuid].update_gpu(gpu)

        self.gpus = gpus
        self.show_processes()

    def redraw_table(self, table_id: str) -> None:
        self.show_processes()

    def show_processes(self) -> None:
        processes = self.query_one("#processes")
        table: DataTable[Text] = self.query_one("#process-table", DataTable)
        rows = []
        for gpu in self.gpus:
            for proc in gpu.processes:
                memory = (
                    "n/a" if proc.used_memory_mb is None else f"{thousands(proc.used_memory_mb)} MB"
                )
                cells = [
                    Content.styled(str(gpu.index), "bold"),
                    Content(str(proc.pid)),
                    Content(safe(proc.name)),
                    Content(memory),
                ]
                rows.append(Row(f"{gpu.index}:{proc.pid}", [table_cell(c) for c in cells]))
        sorter = self.sorters["process-table"]
        shown = sorter.fill(table, rows)
        filtered = sorter.query.strip()
        count = f"{len(shown)} of {len(rows)} shown" if filtered else f"{len(rows)} running"
        processes.border_subtitle = count + sorter.sort_label() if rows else "none running"
        table.display = bool(shown)


def _no_gpu(reason: str) -> Content:
    return Content.assemble(
        ("No GPU found on this machine.\n", "bold"),
        ("Why: ", "bold"),
        (safe(reason), "$text-warning"),
        "\n\n",
        ("What to do: ", "bold"),
        "run ",
        ("nunet-tui gpu doctor", "bold $text-accent"),
        " in a terminal. It checks the driver, the GPU devices and the container runtime, "
        "and prints the exact commands that fix what is missing (Debian/Ubuntu). "
        "CPU-only jobs need no GPU: this machine can still be onboarded without one.",
    )


__all__ = ["GpuScreen"]
