"""``d`` on the GPU screen: the GPU doctor's findings and the commands that would fix them.

The engine runs the doctor (``GpuDoctor``: vendor, driver and kernel modules, GPU devices,
Docker and the container GPU runtime, Secure Boot, WSL) and replies with a ``DoctorReport``.
Each finding is a ✓ or ✗ row with its summary and detail; a problem lists its exact fix
commands (Debian/Ubuntu). All the fix commands together sit in a read-only text area to
select and copy (``y`` copies them). Nothing runs from here: applying fixes needs root and a
typed confirmation, so it is ``nunet-tui gpu doctor --fix`` in a terminal. ``r`` checks again.
"""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Footer, Static, TextArea

from engine.api import DoctorFinding, DoctorReport, GpuDoctor
from engine.errors import EngineError
from nunet_tui.format import plural, safe
from nunet_tui.screens.base import CapabilityScreen
from nunet_tui.widgets.node_header import NodeHeader

FIX_IN_TERMINAL = "nunet-tui gpu doctor --fix"


class GpuDoctorScreen(CapabilityScreen):
    CSS_PATH = "gpu_doctor.tcss"
    TITLE_TEXT = "the GPU doctor"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "escape", "app.pop_screen", "Back", tooltip="Back to the GPU view", id="gpu_doctor.back"
        ),
        Binding(
            "r",
            "recheck",
            "Check again",
            tooltip="Run the GPU doctor again",
            id="gpu_doctor.recheck",
        ),
        Binding(
            "y",
            "copy_fixes",
            "Copy fixes",
            tooltip="Copy the fix commands",
            id="gpu_doctor.copy_fixes",
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.report: DoctorReport | None = None
        self.problem: str | None = None
        self._started = False

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with VerticalScroll(id="doctor-body", can_focus=False):
            yield Static("running the GPU doctor…", id="doctor-facts")
            with Vertical(id="doctor-findings", classes="panel") as panel:
                panel.border_title = "Findings"
            with Vertical(id="doctor-fixes", classes="panel") as panel:
                panel.border_title = "Fix commands (Debian/Ubuntu)"
                yield TextArea(
                    id="fix-commands",
                    read_only=True,
                    soft_wrap=False,
                    show_line_numbers=False,
                )
                yield Static(_how_to_fix(), id="fix-note")
            yield Static(id="doctor-verdict")
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        for selector in ("#doctor-findings", "#doctor-fixes", "#doctor-verdict"):
            self.query_one(selector).display = False

    def reload(self) -> None:
        # Called on every resume: the doctor runs on opening, then only when asked (r).
        if not self._started:
            self._started = True
            self.examine()

    def action_recheck(self) -> None:
        self.examine()

    def action_copy_fixes(self) -> None:
        fixes = self.report.fixes if self.report is not None else ()
        if not fixes:
            self.notify("Nothing to copy: no fix commands.", title="GPU doctor")
            return
        self.app.copy_to_clipboard("\n".join(fixes) + "\n")
        self.notify(
            f"Copied {plural(len(fixes), 'command')}. Run `{FIX_IN_TERMINAL}` in a terminal "
            "to apply them after confirming.",
            title="GPU doctor",
            markup=False,
        )

    @work(exclusive=True, group="doctor")
    async def examine(self) -> None:
        facts = self.query_one("#doctor-facts", Static)
        facts.update("running the GPU doctor…")
        try:
            report: DoctorReport = await self.nunet.client.call(GpuDoctor())
        except EngineError as exc:
            self.problem = safe(exc.message)
        else:
            self.problem = None
            self.report = report
        self.show()

    def show(self) -> None:
        facts = self.query_one("#doctor-facts", Static)
        findings = self.query_one("#doctor-findings", Vertical)
        fixes_panel = self.query_one("#doctor-fixes", Vertical)
        verdict = self.query_one("#doctor-verdict", Static)
        report = self.report
        if self.problem is not None or report is None:
            facts.update(
                Content.assemble(
                    ("The GPU doctor could not run: ", "bold $text-error"),
                    self.problem or "no answer",
                )
            )
            for widget in (findings, fixes_panel, verdict):
                widget.display = False
            return

        vendors = ", ".join(report.vendors) or "none found"
        facts.update(
            Content.assemble(
                ("GPU doctor", "bold"),
                f" · {safe(report.distro)} · GPU vendors: {safe(vendors)}",
            )
        )
        findings.display = True
        findings.remove_children()
        findings.mount_all(_finding_row(finding) for finding in report.findings)
        problems = sum(1 for finding in report.findings if not finding.ok)
        findings.border_subtitle = (
            f"{plural(problems, 'problem')} of {len(report.findings)} checks"
            if problems
            else f"all {len(report.findings)} checks pass"
        )

        fixes = report.fixes
        fixes_panel.display = bool(fixes)
        area = self.query_one("#fix-commands", TextArea)
        area.load_text("\n".join(fixes))
        area.styles.height = min(len(fixes), 12) + 3  # the border and a horizontal scrollbar

        verdict.display = True
        verdict.set_class(not report.ok, "-problems")
        if report.ok:
            verdict.update(
                Content.assemble(
                    ("All good: ", "bold $text-success"),
                    "this machine is ready for GPU jobs.",
                )
            )
        elif fixes:
            verdict.update(
                Content.assemble(
                    ("Problems found. ", "bold $text-error"),
                    "Select and copy the commands above (or press ",
                    ("y", "bold $text-accent"),
                    "), or run ",
                    (FIX_IN_TERMINAL, "bold $text-accent"),
                    " in a terminal to apply them after confirming. Some fixes need a reboot.",
                )
            )
        else:
            verdict.update(
                Content.assemble(
                    ("Problems found; ", "bold $text-error"),
                    "none has a command that fixes it here: see each problem's detail.",
                )
            )


def _finding_row(finding: DoctorFinding) -> Static:
    mark = ("✓ ", "bold $text-success") if finding.ok else ("✗ ", "bold $text-error")
    parts: list[Content | str | tuple[str, str]] = [mark, safe(finding.summary)]
    if finding.detail:
        parts += ["\n  ", (safe(finding.detail), "$text-muted")]
    if not finding.ok:
        for command in finding.fix:
            parts += ["\n  ", ("$ ", "$text-muted"), (safe(command), "$text-accent")]
    row = Static(Content.assemble(*parts), classes="finding")
    row.tooltip = finding.check
    row.set_class(finding.ok, "-ok")
    row.set_class(not finding.ok, "-problem")
    return row


def _how_to_fix() -> Content:
    return Content.assemble(
        "Nothing runs from this screen. Run ",
        (FIX_IN_TERMINAL, "bold $text-accent"),
        " in a terminal to apply them after confirming: it shows the commands again and runs "
        "them (with sudo) only after you type yes.",
    )


__all__ = ["GpuDoctorScreen"]
