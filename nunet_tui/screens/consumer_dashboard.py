"""Consumer mode's home: who this node is and what it can do now.

The jobs issue adds the job list, the submit form and the wallet to this grid.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Footer

from engine.api import JobChanged
from nunet_tui.events import handles
from nunet_tui.format import mb, mhz, safe
from nunet_tui.screens.base import NodeScreen
from nunet_tui.viewmodels.node import NodeView
from nunet_tui.widgets.job_panels import RecentJobs
from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.node_header import NodeHeader


class ConsumerDashboard(NodeScreen):
    CSS_PATH = "dashboard.tcss"

    def compose(self) -> ComposeResult:
        yield NodeHeader("consumer")
        with VerticalScroll(id="panels", can_focus=False):
            with Vertical(id="identity", classes="panel") as panel:
                panel.border_title = "This node"
                yield KeyTable(id="identity-detail")
            with Vertical(id="next", classes="panel") as panel:
                panel.border_title = "What you can do now"
                yield KeyTable(id="next-detail", keys=True)
            yield RecentJobs(id="recent")
        yield Footer()

    @handles(JobChanged)
    def _job_changed(self, event: JobChanged) -> None:
        self.query_one(RecentJobs).job_changed(event.job)

    def on_screen_resume(self) -> None:
        self.query_one(RecentJobs).reload()

    def show_node(self, node: NodeView) -> None:
        info = node.info
        onboarding = node.onboarding
        channel = onboarding.channel if onboarding is not None else info.channel
        rows: list[tuple[str, Content]] = [
            ("Peer id", Content(safe(info.peer_id))),
            ("Channel", Content(safe(channel))),
            (
                "Engine",
                Content(
                    f"{'daemon' if info.daemon else 'embedded'} · version {safe(info.version)}"
                ),
            ),
            (
                "Machine",
                Content(
                    f"{safe(info.machine.hostname)} · {info.machine.cpu_cores} cores · "
                    f"{mb(node.full.memory_mb)} RAM"
                ),
            ),
        ]
        if onboarding is not None:
            rows.append(
                (
                    "Providing",
                    Content(
                        f"{mb(onboarding.memory_mb)} · {mhz(onboarding.cpu_mhz)} "
                        f"({'paused' if onboarding.state == 'paused' else 'accepting jobs'})"
                    ),
                )
            )
        self.query_one("#identity-detail", KeyTable).set_rows(rows)
        provide = (
            "switch to provider mode to see or change what it offers"
            if onboarding is not None
            else "switch to provider mode and onboard this machine to earn NTX"
        )
        actions: list[tuple[str, str]] = [
            ("s", "submit an ML job: see its price and who can run it as you type"),
            ("j", "your jobs: live logs, results, cancel"),
            ("w", "your wallet: NTX balance, address, funds locked in escrow"),
            ("a", "your account: what each job paid and got back"),
            ("m", provide),
            ("ctrl+p", "command palette: every command by name"),
            ("?", "all keys"),
        ]
        self.query_one("#next-detail", KeyTable).set_rows(actions)
