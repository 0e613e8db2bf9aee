"""``b``: your JupyterLab notebooks (consumer mode): create, open, stop, delete.

One row per notebook (engine/api/notebooks.py: a service job running JupyterLab): its id,
state, name, local URL (while forwarded) and provider. ``n`` starts one (the demo's
launcher, or a URL you give), ``o`` forwards it to 127.0.0.1, copies the URL with its token
and opens it in the browser, ``s`` stops it (its notebooks/ come back as results), ``d``
deletes its files on the provider (asks first). Rows change live as ``JobChanged`` arrives.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Footer, Input, Static

from engine import api
from engine.api import notebooks as nb
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import safe, table_cell
from nunet_tui.screens.base import FILTER_BINDING, HELP_BINDING, FilteredTableScreen
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.widgets.job_state import peer_short, state_text
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.sortable_table import Row
from nunet_tui.widgets.table_rows import selected_key

COLUMNS = (
    ("job", "Notebook"),
    ("state", "State"),
    ("name", "Name"),
    ("url", "Local URL"),
    ("peer", "Provider"),
)


class LauncherUrlScreen(ModalScreen[str | None]):
    """Where the notebook launcher (examples/jobs/notebook/notebook.py) is served from."""

    ALLOW_MODE_SWITCH = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss_none", "Cancel", id="notebook_url.cancel")
    ]
    DEFAULT_CSS = """
    LauncherUrlScreen {
        align: center middle;
        #dialog { width: 72; max-width: 100%; height: auto; border: round $primary;
                  background: $surface; padding: 1 2; }
        #buttons { height: auto; margin-top: 1; align-horizontal: right; }
        #buttons Button { margin-left: 1; }
    }
    """

    def __init__(self, url: str = "") -> None:
        super().__init__()
        self.url = url

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(
                "The notebook launcher's URL (examples/jobs/notebook/notebook.py, served over "
                "http; the demo serves it):",
                markup=False,
            )
            yield Input(self.url, placeholder="https://…/notebook.py", id="launcher-url")
            with Horizontal(id="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Create", id="create", variant="primary")
        yield Footer()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "create":
            self.dismiss(self.query_one("#launcher-url", Input).value.strip() or None)
        else:
            self.dismiss(None)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


class NotebooksScreen(FilteredTableScreen):
    TABLE_ID = "notebooks-table"
    TITLE_TEXT = "the notebooks"
    CSS_PATH = "jobs.tcss"  # the jobs list's panel and table
    DEFAULT_CSS = """
    NotebooksScreen #notebooks-table { height: 1fr; }
    NotebooksScreen #notebook-detail {
        height: auto; max-height: 3; padding: 0 1; color: $text-muted;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the dashboard", id="notebooks.back"),
        Binding(
            "n",
            "new",
            "New",
            tooltip="Start a notebook (JupyterLab) on a provider",
            id="notebooks.new",
        ),
        Binding(
            "o",
            "open_notebook",
            "Open",
            tooltip="Forward it, copy and open its URL",
            id="notebooks.open",
        ),
        Binding(
            "s",
            "stop",
            "Stop",
            tooltip="Stop it: its notebooks come back as results",
            id="notebooks.stop",
        ),
        Binding(
            "d",
            "delete",
            "Delete",
            tooltip="Delete its files on the provider (asks)",
            id="notebooks.delete",
        ),
        Binding("r", "reload", "Refresh", tooltip="Read the list again", id="notebooks.reload"),
        HELP_BINDING,
        FILTER_BINDING,
        # o opens a notebook here, so O is the next sort; a click on a header sorts too.
        Binding(
            "O",
            "sort_next",
            "Sort",
            tooltip="Sort by the next column (click a header)",
            id="notebooks.sort_next",
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[str, api.JobInfo] = {}
        self.forwards: tuple[api.TunnelForward, ...] = ()
        self.problem: str | None = None
        self.loaded = False

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with Vertical(id="jobs-panel") as panel:
            panel.border_title = "Notebooks"
            yield self.filter_box()
            yield Static(id="jobs-note", markup=False)
            table: DataTable[Text] = DataTable(
                id="notebooks-table", cursor_type="row", zebra_stripes=True
            )
            for key, label in COLUMNS:
                table.add_column(label, key=key)
            yield table
            yield Static(id="notebook-detail", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#notebooks-table", DataTable).focus()

    # --- reading -------------------------------------------------------------------------

    def reload(self) -> None:
        self.load()

    @work(exclusive=True, group="refresh")
    async def load(self) -> None:
        try:
            jobs: api.JobList = await self.nunet.client.call(api.ListJobs())
            forwards: api.ForwardList = await self.nunet.client.call(api.ListForwards())
        except EngineError as exc:
            self.problem = _message(exc)
        else:
            self.problem = None
            self.jobs = {job.job_id: job for job in jobs.jobs}
            self.forwards = forwards.forwards
        self.loaded = True
        self.show()

    @handles(api.JobChanged)
    def _job_changed(self, event: api.JobChanged) -> None:
        if nb.is_notebook(event.job):
            self.jobs[event.job.job_id] = event.job
            if self.loaded:
                self.show()

    @property
    def notebooks(self) -> list[nb.Notebook]:
        return nb.notebooks(self.jobs.values(), self.forwards)

    # --- showing -------------------------------------------------------------------------

    def show(self) -> None:
        table: DataTable[Text] = self.query_one("#notebooks-table", DataTable)
        note = self.query_one("#jobs-note", Static)
        panel = self.query_one("#jobs-panel", Vertical)
        found = self.notebooks
        rows = [Row(n.job_id, [table_cell(c) for c in notebook_row(n)], n) for n in found]
        shown = self.sorter.fill(table, rows)
        running = sum(1 for n in found if n.state == "running")
        panel.border_subtitle = self.sorter.caption(len(shown), len(found), "notebook") + (
            f" · {running} running" if running else ""
        )
        table.display = bool(shown)
        note.display = not shown
        self.refresh_bindings()  # o, s and d need a notebook
        self._detail()
        if self.problem is not None:
            note.update(self.problem)
        elif not found:
            note.update(
                Content.assemble(
                    ("No notebooks yet. ", "bold"),
                    "Press n to start JupyterLab on a provider; o opens it here.",
                )
            )
        elif not shown:
            note.update(Content.assemble("No notebook matches ", (repr(self.sorter.query), "bold")))

    def _detail(self) -> None:
        """What the selected notebook is doing, in words (the provider's reason as it is)."""
        detail = self.query_one("#notebook-detail", Static)
        job = self._selected() if self.jobs else None
        detail.display = job is not None
        if job is None:
            return
        if job.state == "running":
            text = "running: o opens its JupyterLab here, s stops it"
        elif job.state in api.TERMINAL_STATES:
            why = f" ({safe(job.reason)})" if job.reason else ""
            files = "its files are back: job results " + job.job_id if job.results_dir else ""
            text = f"{job.state}{why}" + (f"; {files}" if files else "")
        else:
            text = f"{job.state}: waiting for the provider to start it"
        detail.update(f"{job.job_id} {text}")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail()

    # --- actions -------------------------------------------------------------------------

    def _selected(self) -> api.JobInfo | None:
        job_id = selected_key(self.query_one("#notebooks-table", DataTable))
        return self.jobs.get(job_id) if job_id is not None else None

    def action_reload(self) -> None:
        self.load()

    def _launcher_url(self) -> str:
        examples: Any = getattr(self.app, "examples", None) or {}
        base = str(examples.get("scripts_url") or "")
        return f"{base}notebook/{nb.SCRIPT}" if base else ""

    @work(group="notebook-op", exclusive=True)
    async def action_new(self) -> None:
        url = await self.app.push_screen_wait(LauncherUrlScreen(self._launcher_url()))
        if not url:
            return
        # The demo's providers run jobs as local processes, whose Python has no JupyterLab.
        deps = ("jupyterlab",) if getattr(self.app, "examples", None) else ()
        try:
            spec = nb.notebook_spec(url, deps=deps)
        except EngineError as exc:
            self.notify(_message(exc), title="New notebook", severity="error", markup=False)
            return
        self.notify("Looking for a provider…", title="New notebook")
        try:
            job: api.JobInfo = await self.nunet.client.call(api.SubmitJob(spec=spec))
        except EngineError as exc:
            self.notify(_message(exc), title="New notebook", severity="error", markup=False)
            return
        self.jobs[job.job_id] = job
        self.show()
        first = (
            " (JupyterLab is installed into it first, from the package index: about a minute)"
            if deps
            else ""
        )
        self.notify(
            f"Notebook {job.job_id} on {peer_short(job.provider)}: o opens it once it runs" + first,
            title="New notebook",
            markup=False,
        )

    @work(group="notebook-op", exclusive=True)
    async def action_open_notebook(self) -> None:
        job = self._selected()
        if job is None:
            return
        if job.state != "running":
            self.notify(f"{job.job_id} is {job.state}", title="Open", markup=False)
            return
        forward = nb.forward_of(job, self.forwards)
        try:
            if forward is None:
                forward = await self.nunet.client.call(
                    api.JobForward(job_id=job.job_id, remote_port=nb.port_of(job))
                )
        except EngineError as exc:
            text = _message(exc)
            if isinstance(exc, EngineError) and exc.code == "refused":
                text += " (JupyterLab may still be starting: try again in a few seconds)"
            self.notify(text, title="Open", severity="warning", markup=False)
            return
        self.load()
        url = nb.lab_url(forward.url, nb.token_of(job))
        self.app.copy_to_clipboard(url)
        self.app.open_url(url)
        self.notify(f"{url} (copied)", title="Open", markup=False)

    @work(group="notebook-op", exclusive=True)
    async def action_stop(self) -> None:
        job = self._selected()
        if job is None or job.state in api.TERMINAL_STATES:
            return
        self.notify(f"Stopping {job.job_id}…", title="Stop")
        try:
            ended: api.JobInfo = await self.nunet.client.call(api.StopJob(job_id=job.job_id))
        except EngineError as exc:
            self.notify(_message(exc), title="Stop", severity="error", markup=False)
            return
        self.jobs[ended.job_id] = ended
        self.show()
        self.notify(
            f"{ended.job_id} is {ended.state}: its notebooks come back as its results",
            title="Stop",
            markup=False,
        )

    @work(group="notebook-op", exclusive=True)
    async def action_delete(self) -> None:
        job = self._selected()
        if job is None:
            return
        confirmed = await self.app.push_screen_wait(
            ConfirmScreen(
                f"Delete notebook {job.job_id}?",
                Content.assemble(
                    "Its files on the provider are removed for good. The copy fetched here stays (",
                    (f"job results {job.job_id}", "bold"),
                    ").",
                ),
                confirm_label="Delete",
                danger=True,
            )
        )
        if not confirmed:
            return
        try:
            done: api.Done = await self.nunet.client.call(api.DeleteJobResults(job_id=job.job_id))
        except EngineError as exc:
            self.notify(_message(exc), title="Delete", severity="error", markup=False)
            return
        self.notify(done.message, title="Delete", markup=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("open_notebook", "stop", "delete"):
            return bool(self.notebooks)
        return super().check_action(action, parameters)


def notebook_row(notebook: nb.Notebook) -> tuple[Content, ...]:
    return (
        Content.styled(safe(notebook.job_id), "bold"),
        state_text(notebook.state),
        Content(safe(notebook.name)[:18]),
        # The host and port only (the scheme and / are always the same): fits 80 columns.
        Content(notebook.local_url.removeprefix("http://").rstrip("/") or "-"),
        Content(peer_short(notebook.provider)),
    )


def _message(exc: BaseException) -> str:
    return safe(exc.message if isinstance(exc, EngineError) else f"lost the engine: {exc}")


__all__ = ["NotebooksScreen", "notebook_row"]
