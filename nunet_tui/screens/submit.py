"""``s`` (consumer mode): describe a job, see what it costs and who can run it, submit it.

Everything on the right explains itself as you type: the tier's resources (``estimate_resource``,
the one tier table of engine/domain/tiers.py, shown whole), NuNet's static NTX estimate
(``static_units``), and "Who can run it": every known provider with ✓ and its price for this job,
or ✗ and every reason it cannot (``engine.domain.matching.match``, the engine's own pure
function, on the peers of ``ListPeers``). Each field shows ``validate_spec``'s problems once it
has been touched. Enter on a provider picks it by hand (again: back to the best match).

The screen holds the state and talks to the engine; its three panels are widgets that show
what it hands them and post messages back: ``JobForm`` (nunet_tui/widgets/job_form.py),
``JobEstimate`` (job_estimate.py) and ``ProviderMatch`` (provider_match.py). The form's rules
are nunet_tui/viewmodels/job_form.py.

Submitting sends ``SubmitJob`` from a worker; the job detail opens once a provider accepted.
In the demo the example jobs are one key away (F1, F2, ...): the app's presets
(nunet_tui/presets.py).
"""

from __future__ import annotations

import secrets
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Footer

from engine.api import JobInfo, ListPeers, Peer, PeerChanged, PeerList, SubmitJob, SubmitProgress
from engine.domain.matching import Candidate, MatchResult, match
from engine.domain.peer_names import TABLE_NAME_WIDTH, peer_label
from engine.domain.spec import JobSpec
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import safe
from nunet_tui.messages import OpenJob
from nunet_tui.presets import MAX_PRESETS, Preset
from nunet_tui.screens.base import CapabilityScreen
from nunet_tui.viewmodels.job_form import FormCheck, check_form, field_of, read_spec
from nunet_tui.widgets.job_estimate import JobEstimate
from nunet_tui.widgets.job_form import JobForm
from nunet_tui.widgets.node_header import NodeHeader
from nunet_tui.widgets.provider_match import ProviderMatch


class SubmitScreen(CapabilityScreen):
    CSS_PATH = "submit.tcss"
    AUTO_FOCUS = "#script_url"
    ALLOW_MODE_SWITCH = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "ctrl+s",
            "submit",
            "Submit",
            priority=True,
            tooltip="Submit the job",
            id="submit.submit",
        ),
        Binding("escape", "app.pop_screen", "Back", tooltip="Leave the form", id="submit.back"),
        *(
            Binding(
                f"f{n}",
                f"preset({n - 1})",
                f"Example {n}",
                show=False,
                priority=True,
                id=f"submit.example_{n}",
            )
            for n in range(1, MAX_PRESETS + 1)
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.peers: dict[str, Peer] = {}
        self.peer_problem: str | None = None
        self.submitted = False
        self.submitting = False
        self.check = FormCheck({}, [])
        self.result: MatchResult | None = None
        # The submit under way: its id (SubmitJob.submit_id) and the steps said so far.
        self.submit_id = ""
        self.progress: list[str] = []

    @property
    def presets(self) -> list[Preset]:
        return self.nunet.presets

    @property
    def form(self) -> JobForm:
        return self.query_one(JobForm)

    @property
    def problems(self) -> dict[str, list[str]]:
        """Each field's problems now (shown once the field was touched)."""
        return self.check.problems

    # --- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield NodeHeader("consumer")
        with VerticalScroll(id="submit-body"), Grid(id="submit-grid"):
            yield JobForm(self.presets, id="job-form", classes="panel")
            with Vertical(id="side"):
                yield JobEstimate(id="estimate", classes="panel")
                yield ProviderMatch(id="who", classes="panel")
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.refresh_form()
        self.load_peers()

    # --- peers -----------------------------------------------------------------------------

    def reload(self) -> None:
        self.load_peers()

    @work(exclusive=True, group="refresh")
    async def load_peers(self) -> None:
        try:
            reply: PeerList = await self.nunet.client.call(ListPeers())
        except EngineError as exc:
            self.peer_problem = (
                "This engine runs without the network: no providers to match."
                if exc.code == "no_network"
                else safe(exc.message)
            )
            self.peers = {}
        else:
            self.peer_problem = None
            self.peers = {peer.peer_id: peer for peer in reply.peers}
        self.refresh_form()

    @handles(SubmitProgress)
    def _submit_progress(self, event: SubmitProgress) -> None:
        if event.submit_id == self.submit_id:
            self.progress.append(f"{event.elapsed_s:5.1f} s  {event.step}: {safe(event.detail)}")
            self.form.show_progress(self.progress)
            if self.submitting:
                self.form.submit_button.label = f"Submitting… {event.step}"

    @handles(PeerChanged)
    def _peer_changed(self, event: PeerChanged) -> None:
        if event.peer is None:
            self.peers.pop(event.peer_id, None)
        else:
            self.peers[event.peer_id] = event.peer
        self.refresh_form()

    # --- showing, as you type --------------------------------------------------------------

    @on(JobForm.Changed)
    def _form_changed(self, event: JobForm.Changed) -> None:
        event.stop()
        self.refresh_form()

    def refresh_form(self) -> None:
        form = self.form
        spec, local = read_spec(form.values())
        form.gpu_allowed(spec.framework)
        peer_id = form.peer_id
        self.check = check_form(spec, local, peer_id, self.peers)
        form.show_check(self.check, reveal_all=self.submitted)
        self.result = self._match(spec)
        self.query_one(ProviderMatch).show(self.result, self.peers, self.peer_problem, peer_id)
        self.query_one(JobEstimate).show(spec, self.candidate(peer_id))
        form.show_extra()
        # Content, not a str: a button parses a str label as markup, and names are peer text.
        form.submit_button.label = Content(
            "Submitting…"
            if self.submitting
            else (f"Submit to {self._provider(peer_id)}" if peer_id else "Submit to best match")
        )

    def _match(self, spec: JobSpec) -> MatchResult | None:
        """Every known provider ranked for ``spec`` (None: nobody to rank, or the peers
        could not be read)."""
        if self.peer_problem is not None or not self.peers:
            return None
        node = self.nunet.node
        consumer = node.info.peer_id if node is not None else None
        return match(spec, list(self.peers.values()), consumer=consumer)

    def _provider(self, peer_id: str) -> str:
        """A provider's name (from its advert, cut short) with its short id."""
        peer = self.peers.get(peer_id)
        name = peer.display_name if peer is not None else ""
        return peer_label(peer_id, name, name_width=TABLE_NAME_WIDTH)

    def candidate(self, peer_id: str) -> Candidate | None:
        """The provider the job goes to: the one picked by hand, else the best match."""
        result = self.result
        if result is None or not result.candidates:
            return None
        if peer_id:
            return next((c for c in result.candidates if c.peer_id == peer_id), None)
        return result.candidates[0]

    @on(ProviderMatch.Picked)
    def _pick(self, event: ProviderMatch.Picked) -> None:
        event.stop()
        self.form.toggle_peer(event.peer_id)

    # --- presets ---------------------------------------------------------------------------

    def action_preset(self, index: int) -> None:
        if index >= len(self.presets) or self.presets[index].spec is None:
            return
        spec = self.presets[index].spec
        assert spec is not None
        self.form.load_preset(spec)
        self.refresh_form()
        self.notify(f"Example {self.presets[index].name} loaded", title="Submit")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "preset":
            index = parameters[0] if parameters else 0
            return isinstance(index, int) and index < len(self.presets)
        return True

    # --- submitting ------------------------------------------------------------------------

    @on(JobForm.SubmitRequested)
    def _submit_requested(self, event: JobForm.SubmitRequested) -> None:
        event.stop()
        self.action_submit()

    def action_submit(self) -> None:
        self.submitted = True
        self.refresh_form()
        if not self.check.ok:
            self.notify("Fix the marked fields first", title="Submit", severity="warning")
            return
        if not self.submitting:
            self.submit_job()

    @work(exclusive=True, group="submit")
    async def submit_job(self) -> None:
        form = self.form
        spec, _ = read_spec(form.values())
        peer_id = form.peer_id or None
        self.submitting = True
        self.submit_id = secrets.token_hex(8)
        self.progress = []
        form.show_progress([])
        form.submit_button.disabled = True
        self.refresh_form()
        try:
            job: JobInfo = await self.nunet.client.call(
                SubmitJob(spec=spec, peer_id=peer_id, submit_id=self.submit_id)
            )
        except EngineError as exc:
            message = safe(exc.message)
            self.check.general = [message]
            for problem in exc.problems:
                name = field_of(problem.field)
                if name is not None:
                    self.check.problems.setdefault(name, []).append(problem.message)
            form.show_check(self.check, reveal_all=self.submitted)
            self.notify(message, title="Submit", severity="error", markup=False, timeout=10)
            return
        finally:
            self.submitting = False
            form.submit_button.disabled = False
            form.submit_button.label = "Submit to best match"
        self.notify(
            f"Job {job.job_id} {job.state} by {self._provider(job.provider)}",
            title="Submit",
            markup=False,
        )
        # The job's view in place of the form (the app switches, on its own loop: not this
        # worker, which switching away from this screen cancels).
        self.post_message(OpenJob(job.job_id, job, replace=True))


__all__ = ["SubmitScreen"]
