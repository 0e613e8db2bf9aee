"""Provider mode's home: this machine against what it offers, its state, and ML readiness.

Panels sit in a grid: two columns when the terminal is wide, one when it is narrow. Later
issues add their panels (running job, recent jobs, GPU telemetry, rewards) to the same grid.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Footer, Static

from engine.api import Onboarding
from nunet_tui.format import (
    TIMES,
    check_line,
    gpu_line,
    mb,
    mhz,
    node_state,
    short_peer_id,
)
from nunet_tui.screens.base import NodeScreen, NodeView
from nunet_tui.widgets.meter import Meter
from nunet_tui.widgets.node_header import NodeHeader


class ProviderDashboard(NodeScreen):
    CSS_PATH = "dashboard.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("o", "app.onboard", "Onboard", tooltip="Onboard this machine: offer RAM, CPU"),
        Binding("o", "app.resources", "Resources", tooltip="Change the onboarded RAM and CPU"),
        Binding("space", "app.pause", "Pause", tooltip="Stop accepting jobs, keep onboarding"),
        Binding("space", "app.resume", "Resume", tooltip="Accept jobs again"),
        Binding("x", "app.offboard", "Offboard", tooltip="Remove the onboarding"),
    ]

    def compose(self) -> ComposeResult:
        yield NodeHeader("provider")
        with VerticalScroll(id="panels", can_focus=False):
            with Vertical(id="machine", classes="panel") as panel:
                panel.border_title = "This machine"
                yield Static(id="machine-line", markup=False)
                yield Meter("CPU", "MHz", id="cpu-meter")
                yield Meter("RAM", "MB", id="ram-meter")
                yield Meter("Disk", "MB", id="disk-meter")
                yield Static(id="node-state", markup=False)
            with Vertical(id="gpus", classes="panel") as panel:
                panel.border_title = "GPUs"
                yield Static(id="gpu-list", markup=False)
            with Vertical(id="offer", classes="panel") as panel:
                panel.border_title = "Onboarding"
                yield Static(id="offer-detail", markup=False)
            with Vertical(id="readiness", classes="panel") as panel:
                panel.border_title = "ML readiness"
                yield Static(id="readiness-checks", markup=False)
        yield Footer()

    def show_node(self, node: NodeView) -> None:
        info, full, onboarded = node.info, node.full, node.onboarded
        machine = info.machine
        self.query_one("#machine-line", Static).update(
            Content.assemble(
                (machine.cpu_model, "bold"),
                f"\n{machine.cpu_cores} {TIMES} {mhz(machine.cpu_mhz_per_core)} · ",
                f"{machine.os} {machine.kernel} {machine.arch} · ",
                (machine.hostname, "italic"),
            )
        )
        self.query_one("#cpu-meter", Meter).set_values(
            onboarded.cpu_mhz if onboarded else 0, full.cpu_mhz
        )
        self.query_one("#ram-meter", Meter).set_values(
            onboarded.memory_mb if onboarded else 0, full.memory_mb
        )
        self.query_one("#disk-meter", Meter).set_values(
            onboarded.disk_mb if onboarded else 0, full.disk_mb
        )
        self.query_one("#node-state", Static).update(node_state(node.onboarding))
        self.query_one("#machine", Vertical).border_subtitle = (
            "onboarded / total" if onboarded else "total"
        )

        gpus = self.query_one("#gpu-list", Static)
        if full.gpus:
            gpus.update(Content("\n").join(gpu_line(gpu) for gpu in full.gpus))
        else:
            gpus.update(
                Content.assemble(
                    ("No GPU found", "bold"),
                    (f" · {full.gpu_reason}" if full.gpu_reason else "", "$text-muted"),
                    ("\nCPU jobs only.", "$text-muted"),
                )
            )

        self.query_one("#offer-detail", Static).update(_offer(node.onboarding, node))

        readiness = info.readiness
        self.query_one("#readiness-checks", Static).update(
            Content("\n").join(
                [
                    check_line("Docker engine", readiness.docker),
                    check_line("GPU driver", readiness.gpu_driver),
                    check_line("GPU container runtime", readiness.gpu_runtime),
                ]
            )
        )
        self.refresh_bindings()


def _offer(onboarding: Onboarding | None, node: NodeView) -> Content:
    if onboarding is None:
        return Content.assemble(
            "Not onboarded yet. Press ",
            ("o", "bold $accent"),
            " to offer part of this machine's ",
            f"{mb(node.full.memory_mb)} and {mhz(node.full.cpu_mhz)} ",
            "to a channel and earn NTX for the jobs it runs.",
        )
    gpus = (
        f"{len(onboarding.gpus)} GPU{'s' if len(onboarding.gpus) != 1 else ''}"
        if onboarding.gpus
        else "no GPU"
    )
    rows: list[tuple[str, Content]] = [
        (
            "Offering",
            Content(f"{mb(onboarding.memory_mb)} · {mhz(onboarding.cpu_mhz)} · {gpus}"),
        ),
        ("Channel", Content(onboarding.channel)),
        ("Address", Content(short_peer_id(onboarding.address, head=14, tail=8))),
        (
            "Options",
            Content.assemble(
                _flag(onboarding.local_discovery, "local discovery (-l)"),
                "  ",
                _flag(onboarding.cardano_node, "Cardano node (-C)"),
            ),
        ),
    ]
    if onboarding.state == "paused":
        rows.append(("Paused", Content.assemble("press ", ("space", "bold $accent"), " to resume")))
    return Content("\n").join(
        Content.assemble((label.ljust(9), "bold"), value) for label, value in rows
    )


def _flag(on: bool, label: str) -> Content:
    return Content.assemble(("✓ " if on else "· ", "$success" if on else "$text-muted"), label)


__all__ = ["ProviderDashboard"]
