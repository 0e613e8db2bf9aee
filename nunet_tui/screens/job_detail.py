"""One job, live: its timeline, what it runs and costs, why it failed, and its log.

The log is a ``JobLogView`` (Textual's line-virtualised ``Log``): the backlog comes in pages
of ``GetJobLogs``, then live lines arrive as ``JobLogEvent``s. Those come from the engine's
thread through ``post_message``, possibly hundreds a second; this screen only collects their
lines and writes them to the log in one batch per frame (``FLUSH_S``), so the UI does the
same small amount of work whether a job prints ten lines a second or ten thousand. Lines are
numbered by the provider: a gap (events missed while a dialog was on top) is filled from the
engine, and nothing is shown twice. A provider's node gets no log events for the jobs it
runs, so there the screen reads new lines twice a second instead.

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

import time
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import Footer, Input, Static

from engine.api import (
    CancelJob,
    EscrowChanged,
    EscrowInfo,
    EscrowList,
    FetchJobResults,
    GetJob,
    GetJobLogs,
    JobChanged,
    JobInfo,
    JobLogEvent,
    JobLogLine,
    JobLogs,
    JobResults,
    RewardList,
    RewardRefund,
    TunnelForward,
)
from engine.errors import EngineError
from nunet_tui.format import named_peer, safe, thousands
from nunet_tui.messages import EngineUpdate
from nunet_tui.screens import job_resubmit
from nunet_tui.screens.base import CapabilityScreen
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.viewmodels.money import (
    amount,
    cancel_split,
    job_figures,
    machine_time,
    price_text,
    settle_tx,
    summary,
)
from nunet_tui.viewmodels.refund import refund_now
from nunet_tui.widgets import escrow_view, job_ports
from nunet_tui.widgets.job_gpus import JobGpus
from nunet_tui.widgets.job_log import MAX_LINES, JobLogView, clean_line
from nunet_tui.widgets.job_state import (
    FAILED_STATES,
    duration,
    hms,
    is_terminal,
    job_name,
    runs_as,
    state_text,
    timeline,
)
from nunet_tui.widgets.job_usage import LiveUsage
from nunet_tui.widgets.key_table import KeyTable
from nunet_tui.widgets.node_header import NodeHeader
from oracle_client.ntx import format_ntx

FLUSH_S = 1 / 30  # live lines are written at most this often
FRAME_LINES = 10_000  # at most this many per write: each frame's work stays small
PAGE = 20_000  # lines per GetJobLogs call
POLL_S = 0.5  # provider side: how often to read new lines
REDRAW_S = 0.25  # the facts of a running job are redrawn at most this often
TAIL_LINES = 8  # of a traceback, under the facts


def log_text(line: JobLogLine) -> str:
    return f"» {line.text}" if line.stream == "system" else line.text


class JobDetailScreen(CapabilityScreen):
    CSS_PATH = "job_detail.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the list", id="job.back"),
        Binding(
            "f",
            "follow",
            "Follow/pause",
            tooltip="Follow new lines, or hold the view",
            id="job.follow",
        ),
        Binding(
            "slash",
            "search",
            "Search",
            key_display="/",
            tooltip="Find text in the log",
            id="job.search",
        ),
        Binding("n", "find(False)", "Next", show=False, id="job.find_next"),
        Binding("N", "find(True)", "Previous", show=False, id="job.find_previous"),
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
        self.last_seq = -1
        self.pending: list[JobLogLine] = []
        self.loaded = False  # the backlog is in: live lines may be written
        self.catching_up = False
        self.flush_scheduled = False
        self.tail: list[str] = []  # the newest lines (for the traceback panel)
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
            with Vertical(id="log-panel") as panel:
                panel.border_title = "Log"
                yield JobLogView(id="job-log")
                yield Input(placeholder="search the log (Enter: done, Esc: clear)", id="log-search")
            yield JobGpus(id="job-gpus")
        yield Footer()

    @property
    def log_view(self) -> JobLogView:
        return self.query_one("#job-log", JobLogView)

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#log-search", Input).display = False
        self.query_one("#job-failure").display = False
        self.log_view.focus()
        if self.job is not None:
            self.show_job()
        self.set_interval(1.0, self._tick)
        self.set_interval(POLL_S, self._poll)
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
        await self.catch_up()

    async def catch_up(self) -> None:
        """Read the lines after ``last_seq`` in pages (the backlog, or a gap)."""
        if self.catching_up:
            return
        self.catching_up = True
        try:
            after = self.last_seq
            if not self.loaded and self.job is not None and self.job.log_lines > MAX_LINES:
                # Only the newest lines fit: start there (the CLI prints the whole log).
                after = self.job.log_lines - MAX_LINES - 1
                self.log_view.dropped = after + 1
                self.log_view.total = after + 1
            while True:
                try:
                    page: JobLogs = await self.nunet.client.call(
                        GetJobLogs(job_id=self.job_id, after_seq=after, limit=PAGE)
                    )
                except EngineError as exc:
                    if not self.loaded:
                        self.problem = safe(exc.message)
                        self.show_job()
                    break
                self._write(page.lines)
                after = max(after, page.next_seq)
                if len(page.lines) < PAGE:
                    break
        finally:
            self.catching_up = False
            self.loaded = True
        self._flush()

    def _poll(self) -> None:
        """Provider side (no log events there): read new lines while the job runs."""
        job = self.job
        if job is None or job.role != "provider" or not self.loaded or self.catching_up:
            return
        if not is_terminal(job) or job.log_lines > self.last_seq + 1:
            self.poll_lines()

    @work(group="job-poll", exclusive=True)
    async def poll_lines(self) -> None:
        await self.catch_up()

    def on_engine_update(self, message: EngineUpdate) -> None:
        event = message.event
        if isinstance(event, JobLogEvent) and event.job_id == self.job_id:
            self.pending.extend(event.lines)
            if not self.flush_scheduled:
                self.flush_scheduled = True
                self.set_timer(FLUSH_S, self._flush)
        elif isinstance(event, EscrowChanged) and event.escrow.job_id == self.job_id:
            self.escrow = event.escrow
            self.show_job()
        elif isinstance(event, JobChanged) and event.job.job_id == self.job_id:
            previous = self.job
            self.job = event.job
            if previous is None or previous.state != event.job.state:
                self.show_job()
                if is_terminal(event.job):
                    self.poll_lines()  # the last lines, for sure
            elif not self.redraw_scheduled:
                # A running job changes with every batch of lines (its line count): redraw
                # a few times a second, not once per batch.
                self.redraw_scheduled = True
                self.set_timer(REDRAW_S, self._redraw)

    def _redraw(self) -> None:
        self.redraw_scheduled = False
        self.show_job()

    # --- writing the log -----------------------------------------------------------------

    def _flush(self) -> None:
        self.flush_scheduled = False
        if not self.loaded or self.catching_up or not self.pending:
            return
        pending = self.pending
        if len(pending) > MAX_LINES:
            # Far behind (the UI was starved): only the newest lines could be kept anyway.
            skipped = len(pending) - MAX_LINES
            self.log_view.dropped += skipped
            self.log_view.total += skipped
            self.last_seq = pending[skipped - 1].seq
            del pending[:skipped]
        lines, self.pending = pending[:FRAME_LINES], pending[FRAME_LINES:]
        if self.pending:
            self.flush_scheduled = True
            self.set_timer(FLUSH_S, self._flush)
        if lines[0].seq != self.last_seq + 1:
            lines = [line for line in lines if line.seq > self.last_seq]
            if lines and lines[0].seq > self.last_seq + 1:
                self.pending = lines + self.pending
                self.poll_lines()  # a gap: read it from the engine, then these
                return
        self._write(lines)

    def _write(self, lines: tuple[JobLogLine, ...] | list[JobLogLine]) -> None:
        last = self.last_seq
        if lines and lines[0].seq <= last:
            lines = [line for line in lines if line.seq > last]
        if not lines:
            return
        self.last_seq = lines[-1].seq
        texts = [ln.text if ln.stream != "system" else f"» {ln.text}" for ln in lines]
        self.log_view.add_lines(texts)
        self.tail = (self.tail + texts[-200:])[-200:]
        self._show_log_state()
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
        if job.started_at is not None:
            parts.append(f" · {hms(duration(job, now))}")
        if job.resumed_from:
            parts.append((f" · resumed from checkpoint {job.resumed_from}", "$text-warning"))
        title.update(Content.assemble(*parts))
        self.query_one("#job-timeline", Static).update(timeline(job))
        facts = _facts(job, self.escrow, now)
        if ports := job_ports.ports_row(job, self.forwards):
            facts.insert(3, ports)
        self.query_one("#job-facts", KeyTable).set_rows(facts)
        self._show_failure(job)
        self._show_log_state()
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
        tail = traceback_tail(self.tail, TAIL_LINES if self.app.size.height >= 32 else 3)
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

    def _show_log_state(self) -> None:
        view = self.log_view
        panel = self.query_one("#log-panel", Vertical)
        count = thousands(view.total)
        if view.dropped:
            count += f" (newest {thousands(len(view.lines))})"
        mode = "following" if view.following else "paused · f to follow"
        panel.border_title = f"Log · {mode}"
        panel.border_subtitle = f"{count} lines"
        if view.search:
            panel.border_subtitle += f" · /{safe(view.search)}"

    def _tick(self) -> None:
        # A refund's countdown runs on, and its time may come: then F is offered.
        refund = self._refund_status()
        moved = refund is False or (refund,) != self._bindings_for[-1:]
        if self.job is not None and (moved or not is_terminal(self.job)) and self.is_current:
            self.show_job()

    # --- actions -------------------------------------------------------------------------

    def action_back(self) -> None:
        field = self.query_one("#log-search", Input)
        if field.display:
            self._close_search(clear=True)
            return
        self.app.pop_screen()

    def action_follow(self) -> None:
        view = self.log_view
        view.following = not view.following
        self._show_log_state()

    def action_search(self) -> None:
        field = self.query_one("#log-search", Input)
        field.display = True
        field.focus()

    def action_find(self, backwards: bool) -> None:
        view = self.log_view
        if view.search and view.find(view.search, backwards=backwards, again=True) is None:
            self.notify(f"no more {view.search!r}", title="Search", markup=False)
        self._show_log_state()

    @on(Input.Changed, "#log-search")
    def _search_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.log_view.find(event.value)
        self._show_log_state()

    @on(Input.Submitted, "#log-search")
    def _search_done(self, event: Input.Submitted) -> None:
        event.stop()
        self._close_search(clear=False)

    def _close_search(self, *, clear: bool) -> None:
        field = self.query_one("#log-search", Input)
        if clear:
            field.value = ""
            self.log_view.find("")
        field.display = False
        self.log_view.focus()
        self._show_log_state()

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
        self.app.call_later(self.app.switch_screen, JobDetailScreen(new.job_id, job=new))

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


def traceback_tail(lines: list[str], limit: int = TAIL_LINES) -> list[str]:
    """The end of the last Python traceback in ``lines`` (else the last lines)."""
    start = None
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith("Traceback (most recent call last)"):
            start = index
            break
    chosen = lines[start:] if start is not None else lines
    return [clean_line(line) for line in chosen[-limit:]]


def cancel_text(job: JobInfo, escrow: EscrowInfo | None, now: float) -> Content:
    """What cancelling now means, money first: paid for the machine time so far, the rest of
    the lock refunded (a job that never started pays nothing)."""
    head = Content.assemble("The provider stops ", (job_name(job), "bold"), " now. ")
    split = cancel_split(job, escrow, now)
    if split is None:
        return Content.assemble(head, "What it has printed and metered so far is kept.")
    paid, refunded = split
    if job.started_at is None:
        return Content.assemble(
            head,
            "It has not started: nothing is paid, and ",
            (format_ntx(refunded, "refunded"), "bold"),
            " to you.",
        )
    elapsed = max(int(now * 1000) - int(job.started_at * 1000), 0)
    price = price_text(job)
    return Content.assemble(
        head,
        f"For the {machine_time(elapsed)} it ran" + (f" at {price}" if price else "") + ": ",
        (format_ntx(paid, "paid"), "bold $text-warning"),
        " to the provider, ",
        (format_ntx(refunded, "refunded"), "bold $text-success"),
        f" to you (of {format_ntx(paid + refunded, 'locked')}; the provider's signed machine "
        "time decides the last base units). Its output so far is kept.",
    )


def _facts(
    job: JobInfo, escrow: EscrowInfo | None = None, now: float | None = None
) -> list[tuple[str, Content | str]]:
    rows: list[tuple[str, Content | str]] = []
    if job.role == "consumer":
        rows.append(("Provider", safe(job.provider) or "not chosen yet"))
    else:
        rows.append(("Consumer", safe(job.consumer)))
    rows.append(("Runs as", runs_as(job)))
    script = job.spec.script_url or (job.spec.git.url if job.spec.git else "")
    rows.append(("Script", safe(script)))
    if price := price_text(job):
        rows.append(("Price", price))
    if money := summary(job_figures(job, escrow, now)):
        rows.append(("NTX", money))
    if escrow is not None:
        rows.append(("Escrow", _escrow_fact(escrow)))
        if refund := escrow_view.refund_row(escrow, now or time.time(), "F"):
            rows.append(refund)
    m = job.metering
    if m is not None:
        rows.append(
            (
                "Metering",
                f"{m.wall_s:.1f} s wall · {m.mticks:,.0f} MTicks CPU ({m.cpu_s:.1f} s) · "
                f"{m.ram_mb_s:,.0f} MB·s RAM (peak {m.peak_ram_mb:,.0f} MB)",
            )
        )
    if job.state not in FAILED_STATES:
        if job.reason:
            rows.append(("Reason", safe(job.reason)))
        if job.exit_code is not None and job.state != "completed":
            rows.append(("Exit code", str(job.exit_code)))
    if job.results_sha256:
        where = (
            Content.assemble("fetched · ", ("o", "bold $text-accent"), " to unpack and view")
            if job.results_dir
            else Content("on the provider, being fetched")
        )
        rows.append(
            (
                "Results",
                Content.assemble(
                    f"{thousands(job.results_size)} bytes · sha256 {job.results_sha256[:12]}… · ",
                    where,
                ),
            )
        )
    return rows


__all__ = ["JobDetailScreen", "log_text", "traceback_tail"]


def _escrow_fact(escrow: EscrowInfo) -> Content:
    """``✓ paid · lock 6fee1b3d…b7b6 · settle 91ac…``: where the money is."""
    parts: list[Content | str] = [
        escrow_view.state_text(escrow),
        f" · lock {escrow_view.short_hash(escrow.lock_tx)}",
    ]
    if tx := settle_tx(escrow):
        parts.append(f" · settle {escrow_view.short_hash(tx)}")
    if escrow.error:
        parts.append(Content.styled(f" · {escrow_view.one_line(escrow.error)}", "$text-warning"))
    return Content.assemble(*parts)
