"""Provider mode's home: the jobs it runs, this machine against what it offers, its state,
and ML readiness.

Panels sit in a grid: two columns when the terminal is wide, one when it is narrow. The jobs
come first, across the whole width: a job running for someone is what a provider watches
(and at 80x24 it is what fits above the fold). They stay hidden until this machine has run
a job, so a new provider sees its machine first. Later issues add their panels (rewards) to
the same grid. While the network is up, the onboarding panel says in one line whether
consumers can reach this node (the connectivity doctor, ``NetworkDoctor``).
"""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Footer, Static

from engine.api import JobChanged, JobLogEvent, NetworkDoctor, NetworkDoctorReport, Onboarding
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import (
    TIMES,
    check_row,
    mb,
    mhz,
    node_state,
    safe,
    short_peer_id,
)
from nunet_tui.screens.base import NodeScreen
from nunet_tui.viewmodels.node import NodeView
from nunet_tui.viewmodels.reachability import consumers_line
from nunet_tui.widgets.gpu_card import GpuSummary
from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.meter import Meter
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.provider_jobs import ProviderJobs

REACH_REFRESH_S = 15.0


class ProviderDashboard(NodeScreen):
    CSS_PATH = "dashboard.tcss"
    # Each pair is one key, one of the two enabled at a time (check_action): one id, so
    # that `[keys]` moves both (Textual drops a key's other bindings when it moves one).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "o",
            "app.onboard",
            "Onboard",
            tooltip="Onboard this machine: offer RAM, CPU",
            id="provider.onboard",
        ),
        Binding(
            "o",
            "app.resources",
            "Resources",
            tooltip="Change the onboarded RAM and CPU",
            id="provider.onboard",
        ),
        Binding(
            "space",
            "app.pause",
            "Pause",
            tooltip="Stop accepting jobs, keep onboarding",
            id="provider.pause",
        ),
        Binding("space", "app.resume", "Resume", tooltip="Accept jobs again", id="provider.pause"),
        Binding(
            "x", "app.offboard", "Offboard", tooltip="Remove the onboarding", id="provider.offboard"
        ),
    ]

    def compose(self) -> ComposeResult:
        yield NodeHeader("provider")
        with VerticalScroll(id="panels", can_focus=False):
            yield ProviderJobs(id="provider-jobs")
            with Vertical(id="machine", classes="panel") as panel:
                panel.border_title = "This machine"
                yield Static(id="machine-line", markup=False)
                yield Meter("CPU", "MHz", id="cpu-meter")
                yield Meter("RAM", "MB", id="ram-meter")
                yield Meter("Disk", "MB", id="disk-meter")
                yield KeyTable(id="no-gpu")
                yield Static(id="node-state", markup=False)
            with Vertical(id="gpus", classes="panel") as panel:
                panel.border_title = "GPUs"
                panel.border_subtitle = "g for detail"
                yield GpuSummary(id="gpu-summary")
            with Vertical(id="offer", classes="panel") as panel:
                panel.border_title = "Onboarding"
                yield Static(id="offer-hint", markup=False)
                yield KeyTable(id="offer-table")
                yield Static(id="reach-line", markup=False)
            with Vertical(id="readiness", classes="panel") as panel:
                panel.border_title = "ML readiness"
                yield KeyTable(id="readiness-checks")
        yield Footer()

    @handles(JobChanged)
    def _job_changed(self, event: JobChanged) -> None:
        self.query_one(ProviderJobs).job_changed(event.job)

    @handles(JobLogEvent)
    def _job_log(self, event: JobLogEvent) -> None:
        self.query_one(ProviderJobs).log_lines(event.job_id, event.lines)

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#reach-line").display = False
        self.set_interval(REACH_REFRESH_S, self._reach_tick)

    def _reach_tick(self) -> None:
        if self.is_current:
            self.load_reach()

    @work(exclusive=True, group="reach")
    async def load_reach(self) -> None:
        try:
            report: NetworkDoctorReport | None = await self.nunet.client.call(NetworkDoctor())
        except EngineError:
            report = None  # an engine without the doctor: no line
        self.show_reach(report)

    def show_reach(self, report: NetworkDoctorReport | None) -> None:
        line = self.query_one("#reach-line", Static)
        onboarded = self.nunet.node is not None and self.nunet.node.onboarding is not None
        line.display = report is not None and report.online and onboarded
        if report is None or not line.display:
            return
        style = {"direct": "$text-success", "relayed": "$text-warning", "no": "$text-error"}
        text = consumers_line(report)
        line.update(
            Content.assemble(
                ("Reach: ", "bold"),
                (text[:1].upper() + text[1:], style.get(report.consumers_reach, "$text-muted")),
                (f" · fix: {safe(report.fix)}" if report.fix else "", "$text-muted"),
            )
        )

    def on_screen_resume(self) -> None:
        # Back from a job's detail (or any screen): what changed meanwhile, read afresh.
        self.query_one(ProviderJobs).reload()
        self.load_reach()

    def show_node(self, node: NodeView) -> None:
        info, full, onboarded = node.info, node.full, node.onboarded
        machine = info.machine
        self.query_one("#machine-line", Static).update(
            Content.assemble(
                (safe(machine.cpu_model), "bold"),
                " · ",
                (safe(machine.hostname), "italic"),
                f"\n{machine.cpu_cores} {TIMES} {mhz(machine.cpu_mhz_per_core)} · ",
                f"{safe(machine.os)} · {safe(machine.kernel)} {safe(machine.arch)}",
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

        # GPUs get their own panel (the GPU issue adds telemetry there); none: one line.
        self.query_one("#gpus").display = bool(full.gpus)
        self.query_one("#no-gpu").display = not full.gpus
        if full.gpus:
            self.query_one("#gpu-summary", GpuSummary).set_gpus(full.gpus)
        else:
            self.query_one("#no-gpu", KeyTable).set_rows(
                [
                    (
                        "GPU",
                        Content.assemble(
                            "none",
                            (
                                f" · {safe(full.gpu_reason)}" if full.gpu_reason else "",
                                "$text-muted",
                            ),
                        ),
                    )
                ]
            )

        onboarding = node.onboarding
        hint = self.query_one("#offer-hint", Static)
        table = self.query_one("#offer-table", KeyTable)
        hint.display = onboarding is None or onboarding.state == "paused"
        table.display = onboarding is not None
        if onboarding is None:
            hint.update(
                Content.assemble(
                    "Not onboarded yet. Press ",
                    ("o", "bold $text-accent"),
                    " to offer part of this machine to a channel and earn NTX "
                    "for the jobs it runs.",
                )
            )
        else:
            if onboarding.state == "paused":
                hint.update(
                    Content.assemble(
                        ("Paused: ", "bold $text-warning"),
                        "no new jobs start here. Press ",
                        ("space", "bold $text-accent"),
                        " to resume.",
                    )
                )
            table.set_rows(_offer_rows(onboarding))

        readiness = info.readiness
        self.load_reach()
        self.query_one("#readiness-checks", KeyTable).set_rows(
            [
                check_row("Docker engine", readiness.docker),
                check_row("GPU driver", readiness.gpu_driver),
                check_row("GPU container runtime", readiness.gpu_runtime),
            ]
        )
        self.refresh_bindings()


def _offer_rows(onboarding: Onboarding) -> list[tuple[str, Content]]:
    count = len(onboarding.gpus)
    gpus = f"{count} GPU{'s' if count != 1 else ''}" if count else "no GPU"
    return [
        ("Offering", Content(f"{mb(onboarding.memory_mb)} · {mhz(onboarding.cpu_mhz)} · {gpus}")),
        ("Channel", Content(safe(onboarding.channel))),
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


def _flag(on: bool, label: str) -> Content:
    return Content.assemble(("✓ " if on else "✗ ", "$text-success" if on else "$text-muted"), label)


__all__ = ["ProviderDashboard"]
