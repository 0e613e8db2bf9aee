"""One job, live: its timeline, what it runs and costs, why it failed, and its log.

The log is a ``JobLogPanel`` (widgets/job_log_panel.py): it reads the backlog in pages, then
follows the ``JobLogEvent``s this screen hands it (on both sides of the market: a provider's
node emits them for the jobs it runs), and owns following, search and the line cap. The
facts' words are widgets/job_facts.py's.

On the provider side a GPU job gets its GPUs' load beside the log (``JobGpus``: shown only
while the job runs and the node reads a GPU). On both sides a running job shows its live CPU,
RAM and GPU use under the facts, from its provider's samples (``LiveUsage``: one line).

Keys: ``f`` follow/pause, ``/`` search (``n``/``N`` next/previous), ``x`` cancel (asks
first), ``o`` fetch the results into a folder and view them, ``t`` forward the job's ports to
127.0.0.1 (their URLs in the facts, the first copied), ``e`` a shell in the job (the app is
suspended until it exits; widgets/job_ports.py), ``ctrl+r`` resubmit a finished job (its
spec again as a new job, whose view replaces this one; screens/job_resubmit.py), ``F`` refund
now (a lock asked back on this node's word once the oracle can decide; until then the Refund
fact says when and why), Esc back.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import Footer, Static

from engine.api import (
    CancelJob,
    EscrowChanged,
    EscrowInfo,
    EscrowList,
    FetchJobResults,
    GetJob,
    JobChanged,
    JobInfo,
    JobLogEvent,
    JobResults,
    RewardList,
    RewardRefund,
    TunnelForward,
)
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import named_peer, safe
from nunet_tui.messages import OpenJob
from nunet_tui.screens import job_resubmit
from nunet_tui.screens.base import CapabilityScreen
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.viewmodels.money import amount
from nunet_tui.viewmodels.refund import refund_now
from nunet_tui.widgets import job_log_panel, job_ports
from nunet_tui.widgets.job_facts import (
    TAIL_LINES,
    cancel_text,
    traceback_tail,
)
from nunet_tui.widgets.job_facts import escrow_fact as _escrow_fact
from nunet_tui.widgets.job_facts import facts as _facts
from nunet_tui.widgets.job_gpus import JobGpus
from nunet_tui.widgets.job_log import JobLogView
from nunet_tui.widgets.job_log_panel import JobLogPanel, log_text
from nunet_tui.widgets.job_state import (
    FAILED_STATES,
    duration,
    hms,
    is_terminal,
    job_name,
    state_text,
    timeline,
)
from nunet_tui.widgets.job_usage import LiveUsage
from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.node_header import NodeHeader

REDRAW_S = 0.25  # the facts of a running job are redrawn at most this often


class JobDetailScreen(CapabilityScreen):
    CSS_PATH = "job_detail.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the list", id="job.back"),
        *job_log_panel.BINDINGS,  # f follow/pause, / search, n/N next/previous
        Binding(
            "x", "cancel_job", "Cancel job", tooltip="Stop the job (asks first)", id="job.cancel"
        ),
        Binding(
            "o", "results", "Results", tooltip="Fetch the results into a folder", id="job.results"
        ),
        # Not in the footer (it is full at 80 columns): the Ports fact names both keys.
        Binding("t", "forward_ports", "Ports", show=False, id="job.ports"),  # t: tunnel
        Binding("e", "shell", "Shell", show=False, id="job.shell"),  # e: enter the job
        *job_resubmit.BINDINGS,  # ^r: a finished job's spec again, as a new job
        # A lock asked back on this node's word, once the oracle can decide (viewmodels/
        # refund.py): at once instead of at the engine's next settle.
        Binding(
            "F",
            "refund_now",
            "Refund now",
            tooltip="Take the locked NTX back now",
            id="job.refund_now",
        ),
    ]

    def __init__(self, job_id: str, *, job: JobInfo | None = None) -> None:
        super().__init__()
        self.job_id = job_id
        self.job = job
        self.problem: str | None = None
        self.redraw_scheduled = False
        self._bindings_for: tuple[object, ...] = ()
        self.escrow: EscrowInfo | None = None  # paid jobs: the NTX locked for this job
        self.forwards: tuple[TunnelForward, ...] = ()  # its ports forwarded to 127.0.0.1

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with Vertical(id="job-top"):
            yield Static(id="job-title", markup=False)
            yield Static(id="job-timeline", markup=False)
            yield KeyTable(id="job-facts")
            yield LiveUsage(id="job-usage")  # CPU, RAM, GPU sparklines while it runs
            yield Static(id="job-failure", markup=False)
        with Horizontal(id="log-row"):
            yield JobLogPanel(self.job_id, id="log-panel")
            yield JobGpus(id="job-gpus")
        yield Footer()

    @property
    def log_panel(self) -> JobLogPanel:
        return self.query_one(JobLogPanel)

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#job-failure").display = False
        self.query_one(JobLogView).focus()
        if self.job is not None:
            self.show_job()
        self.set_interval(1.0, self._tick)
        self.load()

    # --- reading -------------------------------------------------------------------------

    def reload(self) -> None:
        """Back on top (a dialog closed): read the job again and any lines missed meanwhile."""
        self.load()

    @work(group="job-load")
    async def load(self) -> None:
        try:
            self.job = await self.nunet.client.call(GetJob(job_id=self.job_id))
            self.problem = None
        except EngineError as exc:
            self.problem = safe(exc.message)
        try:
            escrows: EscrowList = await self.nunet.client.call(RewardList())
        except EngineError:
            pass  # an unpaid job, or no payments here: no escrow line
        else:
            self.escrow = next((e for e in escrows.escrows if e.job_id == self.job_id), None)
        self.show_job()
        if (problem := await self.log_panel.catch_up()) is not None:
            self.problem = problem
            self.show_job()

    # --- events (the app hands the screen on top each one: EngineUpdate) -----------------

    @handles(JobLogEvent)
    def _log_lines(self, event: JobLogEvent) -> None:
        self.log_panel.take(event)

    @handles(EscrowChanged)
    def _escrow_changed(self, event: EscrowChanged) -> None:
        if event.escrow.job_id == self.job_id:
            self.escrow = event.escrow
            self.show_job()

    @handles(JobChanged)
    def _job_changed(self, event: JobChanged) -> None:
        if event.job.job_id != self.job_id:
            return
        previous = self.job
        self.job = event.job
        if previous is not None and previous.path and not event.job.path:
            self.job = msgspec.structs.replace(event.job, path=previous.path)
        if previous is None or previous.state != event.job.state:
            self.show_job()
            if is_terminal(event.job):
                self.log_panel.read_missing()  # the last lines, for sure
        elif not self.redraw_scheduled:
            # A running job changes with every batch of lines (its line count): redraw a
            # few times a second, not once per batch.
            self.redraw_scheduled = True
            self.set_timer(REDRAW_S, self._redraw)

    def _redraw(self) -> None:
        self.redraw_scheduled = False
        self.show_job()

    @on(JobLogPanel.Written)
    def _lines_written(self, event: JobLogPanel.Written) -> None:
        event.stop()
        if self.job is not None and self.job.state in FAILED_STATES:
            self._show_failure(self.job)

    # --- showing -------------------------------------------------------------------------

    def show_job(self) -> None:
        job = self.job
        title = self.query_one("#job-title", Static)
        if job is None:
            title.update(Content.styled(self.problem or f"job {self.job_id}", "bold"))
            return
        now = self.nunet.clock()
        where = "on" if job.role == "consumer" else "for"
        who = job.provider if job.role == "consumer" else job.consumer
        parts: list[Content | str | tuple[str, str]] = [
            (f"job {job.job_id}", "bold"),
            " · ",
            (job_name(job), "bold $text-accent"),
            " · ",
            state_text(job.state, mark=False),
            f" {where} {named_peer(getattr(self.app, 'peer_names', None), who)}",
        ]
        if path := path_part(job):
            parts.append(path)
        if job.started_at is not None:
            parts.append(f" · {hms(duration(job, now))}")
        if job.resumed_from:
            parts.append((f" · resumed from checkpoint {job.resumed_from}", "$text-warning"))
        title.update(Content.assemble(*parts))
        self.query_one("#job-timeline", Static).update(timeline(job))
        self.log_panel.job = job
        facts = _facts(job, self.escrow, now)
        if ports := job_ports.ports_row(job, self.forwards):
            facts.insert(3, ports)
        self.query_one("#job-facts", KeyTable).set_rows(facts)
        self._show_failure(job)
        self.log_panel.show_state()
        onboarding = self.nunet.onboarding
        self.query_one(JobGpus).follow(job, onboarding.gpus if onboarding is not None else ())
        self.query_one(LiveUsage).follow(job)
        # The footer is rebuilt on refresh_bindings: only when what x, o and F do changes.
        bindings_for = (job.role, job.state, bool(job.results_dir), self._refund_status())
        if bindings_for != self._bindings_for:
            self._bindings_for = bindings_for
            self.refresh_bindings()

    def _show_failure(self, job: JobInfo) -> None:
        panel = self.query_one("#job-failure", Static)
        failed = job.state in FAILED_STATES
        panel.display = failed
        if not failed:
            return
        # A short terminal keeps room for the log: fewer traceback lines there.
        tail = traceback_tail(self.log_panel.tail, TAIL_LINES if self.app.size.height >= 32 else 3)
        reason = safe(job.reason)
        shown = reason and not any(reason[:40] in line for line in tail)
        head = Content.assemble(
            ("✗ ", "bold $text-error"),
            (f"exit code {job.exit_code}" if job.exit_code is not None else job.state, "bold"),
            (f"  {reason}" if shown else "", "$text-error"),
        )
        panel.update(
            Content("\n").join([head, *(Content.styled(line, "$text-muted") for line in tail)])
        )

    def _tick(self) -> None:
        # A refund's countdown runs on, and its time may come: then F is offered.
        refund = self._refund_status()
        moved = refund is False or (refund,) != self._bindings_for[-1:]
        if self.job is not None and (moved or not is_terminal(self.job)) and self.is_current:
            self.show_job()

    # --- actions -------------------------------------------------------------------------

    def action_back(self) -> None:
        if self.log_panel.searching:
            self.log_panel.close_search(clear=True)
            return
        self.app.pop_screen()

    # f, /, n and N: the log panel's own (declared here for the footer's order).
    def action_follow(self) -> None:
        self.log_panel.toggle_follow()

    def action_search(self) -> None:
        self.log_panel.open_search()

    def action_find(self, backwards: bool) -> None:
        self.log_panel.find(backwards)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        job = self.job
        if action == "cancel_job":
            return job is not None and job.role == "consumer" and not is_terminal(job)
        if action == "results":
            return job is not None and job.role == "consumer" and bool(job.results_dir)
        if action == "forward_ports":
            return job_ports.can_forward(job)
        if action == "shell":
            return job_ports.can_shell(job)
        if (resubmit := job_resubmit.check(action, job)) is not None:
            return resubmit
        if action == "refund_now":
            return self._refund_status() is True
        return True

    @work(group="job-op", exclusive=True)
    async def action_forward_ports(self) -> None:
        job = self.job
        if job is None:
            return
        try:
            self.forwards = await job_ports.forward_all(self.nunet.client, job)
        except EngineError as exc:
            self.notify(safe(exc.message), title="Ports", severity="error", markup=False)
            return
        self.show_job()
        if self.forwards:
            self.app.copy_to_clipboard(self.forwards[0].url)
            urls = ", ".join(f.url for f in self.forwards)
            self.notify(f"{urls} (the first is copied)", title="Ports", markup=False)

    @work(group="job-op", exclusive=True)
    async def action_shell(self) -> None:
        job = self.job
        if job is None:
            return
        size = self.app.size
        try:
            session = await job_ports.open_session(self.nunet.client, job, size.height, size.width)
            with self.app.suspend():
                code = job_ports.run_in_terminal(session)
        except EngineError as exc:
            self.notify(safe(exc.message), title="Shell", severity="error", markup=False)
            return
        shown = "broke off" if code is None else f"exited with status {code}"
        self.notify(f"The shell in {job.job_id} {shown}", title="Shell", markup=False)

    @work(group="job-op", exclusive=True)
    async def action_resubmit(self) -> None:
        if self.job is None or (new := await job_resubmit.resubmit(self, self.job)) is None:
            return
        # The new job's view in place of this one (Esc goes back where this one came from).
        self.post_message(OpenJob(new.job_id, new, replace=True))

    def action_resubmit_refused(self) -> None:
        job_resubmit.say_refusal(self, self.job)

    def _refund_status(self) -> bool | None:
        """True: the lock can be asked back now; False: not yet (the view says when);
        None: no refund on this node's word."""
        status = refund_now(self.escrow, self.nunet.clock())
        return None if status is None else status.ready

    @work(group="job-op", exclusive=True)
    async def action_refund_now(self) -> None:
        try:
            escrow: EscrowInfo = await self.nunet.client.call(RewardRefund(job_id=self.job_id))
        except EngineError as exc:
            self.notify(safe(exc.message), title="Refund", severity="error", markup=False)
            return
        self.escrow = escrow
        self.show_job()
        status = refund_now(escrow, self.nunet.clock())
        if escrow.state == "refunded":
            shown = f"{amount(escrow.refunded_units or escrow.amount, 'refunded')} to you"
        elif status is not None:
            shown = status.text if not status.ready else f"not decided yet: {safe(escrow.error)}"
        else:
            shown = escrow.state
        self.notify(f"Job {self.job_id}: {shown}", title="Refund", markup=False)

    @work(group="job-op", exclusive=True)
    async def action_cancel_job(self) -> None:
        job = self.job
        if job is None:
            return
        confirmed = await self.app.push_screen_wait(
            ConfirmScreen(
                f"Cancel job {job.job_id}?",
                cancel_text(job, self.escrow, self.nunet.clock()),
                confirm_label="Cancel job",
                danger=True,
            )
        )
        if not confirmed:
            return
        self.notify(f"Cancelling {job.job_id}…", title="Cancel")
        try:
            self.job = await self.nunet.client.call(CancelJob(job_id=job.job_id))
        except EngineError as exc:
            self.notify(safe(exc.message), title="Cancel", severity="error", markup=False)
            return
        self.show_job()
        shown = self.job.state if is_terminal(self.job) else "the provider is stopping it"
        self.notify(f"Job {job.job_id}: {shown}", title="Cancel", markup=False)

    @work(group="job-op", exclusive=True)
    async def action_results(self) -> None:
        from nunet_tui.screens.job_results import (
            DEFAULT_RESULTS_DIR,
            ResultsDirScreen,
            ResultsScreen,
        )

        job = self.job
        if job is None:
            return
        folder = await self.app.push_screen_wait(ResultsDirScreen(DEFAULT_RESULTS_DIR))
        if not folder:
            return
        try:
            results: JobResults = await self.nunet.client.call(
                FetchJobResults(job_id=job.job_id, out_dir=folder)
            )
        except EngineError as exc:
            self.notify(safe(exc.message), title="Results", severity="error", markup=False)
            return
        self.notify(
            f"{len(results.files)} file(s) in {safe(results.directory)}",
            title="Results",
            markup=False,
        )
        await self.app.push_screen(ResultsScreen(results))


__all__ = [
    "JobDetailScreen",
    "_escrow_fact",
    "_facts",
    "cancel_text",
    "log_text",
    "traceback_tail",
]


def path_part(job: JobInfo) -> tuple[str, str] | None:
    """How this node reaches the other side of a job not ended (issue 24): " · via relay
    12D3KooW…MnsH" (a warning's colour: relays cap a circuit's time and data) or " · direct";
    None when not connected or ended."""
    if not job.path or is_terminal(job):
        return None
    return (f" · {job.path}", "$text-warning" if job.path.startswith("via") else "")
