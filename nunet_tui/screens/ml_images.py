"""``i`` on the GPU screen: onboard-ml, pre-pulling the ML framework images, a bar per image.

Opening the screen starts ``PrepareMlImages`` in a worker. The engine picks the images (the
``[ml_images]`` map in config.toml, CPU variants everywhere, NVIDIA or AMD ones where such a
GPU was found) and announces each one as an ``ImagePullProgress`` event before pulling, so
the rows appear as those events arrive: there is no separate listing. Each row has a
``ProgressBar`` driven by its events (waiting, pulling, extracting, done, present, failed).
The reply, an ``MlImagesReport``, settles every row (events still on their way after it are
ignored: they travel another path) and ends in a summary; a failed pull shows
the engine's sentence (e.g. "cannot reach registry … load images with `docker load`").
Without a Docker engine the engine's error is shown instead of rows. ``r`` runs it again.
"""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Footer, ProgressBar, Static

from engine.api import ImagePullProgress, MlImageResult, MlImagesReport, PrepareMlImages
from engine.errors import EngineError
from nunet_tui.events import handles
from nunet_tui.format import plural, safe
from nunet_tui.screens.base import CapabilityScreen
from nunet_tui.widgets.node_header import NodeHeader

STATES = ("waiting", "pulling", "extracting", "done", "present", "failed")
STATE_TEXT = {
    "waiting": "waiting",
    "pulling": "pulling",
    "extracting": "extracting",
    "done": "pulled",
    "present": "already here",
    "failed": "failed",
}
FINAL_STATE = {"pulled": "done", "present": "present", "failed": "failed"}


class ImageRow(Vertical):
    """One framework image: its name, a bar, its state and, when it failed, why."""

    DEFAULT_CSS = """
    ImageRow {
        height: auto;
        margin-bottom: 1;
        .image-line { height: 1; }
        .image-name { width: 1fr; }
        .image-bar { width: auto; }
        .image-state { width: 16; padding-left: 1; }
        .image-detail { height: auto; color: $text-error; padding-left: 2; }
    }
    ImageRow.-done .image-state, ImageRow.-present .image-state { color: $text-success; }
    ImageRow.-failed .image-state { color: $text-error; text-style: bold; }
    ImageRow.-waiting .image-state { color: $text-muted; }
    """

    def __init__(self, key: str, image: str) -> None:
        super().__init__()
        self.image_key = key
        self.image = image
        self.pull_state = "waiting"
        self.percent: float | None = 0.0
        self.detail = ""
        self.current_bytes = 0
        self.total_bytes = 0
        self.settled = False  # the report had the last word; late events change nothing
        self._composed = False

    def compose(self) -> ComposeResult:
        with Horizontal(classes="image-line"):
            yield Static(self._title(), classes="image-name")
            yield ProgressBar(total=100.0, show_eta=False, classes="image-bar")
            yield Static(classes="image-state", markup=False)
        yield Static(classes="image-detail", markup=False)

    def on_mount(self) -> None:
        self._composed = True  # is_mounted turns true only after this handler
        self._show()

    def _title(self) -> Content:
        return Content.assemble((safe(self.image_key), "bold"), "  ", safe(self.image))

    def take(self, event: ImagePullProgress) -> None:
        if self.settled:
            return
        self.pull_state = event.status
        self.percent = event.percent
        self.detail = event.detail
        self.current_bytes = event.current_bytes
        self.total_bytes = event.total_bytes
        self._show()

    def settle(self, result: MlImageResult) -> None:
        self.settled = True
        self.pull_state = FINAL_STATE[result.status]
        if result.status != "failed":
            self.percent = 100.0
        self.detail = result.detail or (self.detail if result.status == "failed" else "")
        self._show()

    def _show(self) -> None:
        if not self._composed:
            return
        for state in STATES:
            self.set_class(state == self.pull_state, f"-{state}")
        bar = self.query_one(ProgressBar)
        if self.pull_state in ("done", "present"):
            bar.update(total=100.0, progress=100.0)
        elif self.pull_state == "failed":
            bar.update(total=100.0, progress=self.percent or 0.0)
        elif self.pull_state in ("pulling", "extracting") and self.percent is None:
            bar.update(total=None)  # sizes not known yet: the bar pulses
        else:
            bar.update(total=100.0, progress=self.percent or 0.0)
        state = STATE_TEXT.get(self.pull_state, self.pull_state)
        if self.pull_state in ("pulling", "extracting") and self.total_bytes:
            state += f" {self.current_bytes / 1e6:,.0f}/{self.total_bytes / 1e6:,.0f} MB"
        self.query_one(".image-state", Static).update(state)
        detail = self.query_one(".image-detail", Static)
        detail.display = bool(self.detail)
        detail.update(safe(self.detail))


class MlImagesScreen(CapabilityScreen):
    CSS_PATH = "ml_images.tcss"
    TITLE_TEXT = "the ML images"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "escape", "app.pop_screen", "Back", tooltip="Back to the GPU view", id="ml_images.back"
        ),
        Binding(
            "r",
            "again",
            "Pull again",
            tooltip="Run onboard-ml again (after `docker load`)",
            id="ml_images.pull_again",
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, ImageRow] = {}
        self.report: MlImagesReport | None = None
        self.problem: str | None = None
        self.running = False
        self.runs = 0
        self._started = False

    def compose(self) -> ComposeResult:
        yield NodeHeader(getattr(self.app, "mode", None))
        with VerticalScroll(id="ml-body", can_focus=False):
            yield Static(_intro(), id="ml-intro")
            with Vertical(id="ml-images", classes="panel") as panel:
                panel.border_title = "Framework images"
                yield Static("asking the engine which images this rig needs…", id="ml-waiting")
            with Vertical(id="ml-problem", classes="panel -error") as panel:
                panel.border_title = "Cannot prepare the images"
                yield Static(id="ml-problem-text", markup=False)
            yield Static(id="ml-summary")
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#ml-problem").display = False
        self.query_one("#ml-summary").display = False

    def reload(self) -> None:
        # Called on every resume: pull once on opening, again only when asked (r).
        if not self._started:
            self._started = True
            self.prepare()

    def action_again(self) -> None:
        if not self.running:
            self.prepare()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "again":
            return not self.running
        return True

    @work(exclusive=True, group="ml-images")
    async def prepare(self) -> None:
        self.running = True
        self.runs += 1
        self.report = None
        self.problem = None
        for row in self.rows.values():
            row.settled = False
        self.refresh_bindings()
        self._show_state()
        try:
            report: MlImagesReport = await self.nunet.client.call(PrepareMlImages())
        except EngineError as exc:
            self.problem = safe(exc.message)
        else:
            self.report = report
            for result in report.results:
                self._row(result.key, result.image).settle(result)
        finally:
            self.running = False
            self.refresh_bindings()
        self._show_state()

    @handles(ImagePullProgress)
    def _pull_progress(self, event: ImagePullProgress) -> None:
        # Events and the reply travel separate paths: the report may come first, so rows
        # it settled ignore the events still on their way (ImageRow.settled).
        self._row(event.key, event.image).take(event)

    def _row(self, key: str, image: str) -> ImageRow:
        row = self.rows.get(image)
        if row is None:
            row = self.rows[image] = ImageRow(key, image)
            self.query_one("#ml-waiting").display = False
            self.query_one("#ml-images", Vertical).mount(row)
            self._subtitle()
        return row

    def _subtitle(self) -> None:
        panel = self.query_one("#ml-images", Vertical)
        panel.border_subtitle = plural(len(self.rows), "image")

    def _show_state(self) -> None:
        problem = self.query_one("#ml-problem")
        problem.display = self.problem is not None
        if self.problem is not None:
            self.query_one("#ml-problem-text", Static).update(self.problem)
        images = self.query_one("#ml-images")
        images.display = self.problem is None or bool(self.rows)
        waiting = self.query_one("#ml-waiting", Static)
        if self.report is not None and not self.report.results:
            waiting.display = True
            waiting.update(
                "No ML images selected: every [ml_images] entry for this rig is empty "
                "(see config.toml)."
            )
        summary = self.query_one("#ml-summary", Static)
        summary.display = self.report is not None and bool(self.report.results)
        if self.report is not None:
            summary.update(_summary(self.report))
            summary.set_class(not self.report.ok, "-failed")


def _intro() -> Content:
    return Content.assemble(
        "Pre-pulling the ML framework images (PyTorch, TensorFlow) this rig will be asked to "
        "run: CPU variants everywhere, NVIDIA or AMD ones where such a GPU is present. The map "
        "is ",
        ("[ml_images]", "bold"),
        " in config.toml. Images already here are not pulled again. Leaving this screen does "
        "not stop a pull the engine has begun.",
    )


def _summary(report: MlImagesReport) -> Content:
    counts = {
        status: sum(1 for r in report.results if r.status == status)
        for status in ("pulled", "present", "failed")
    }
    head = f"{counts['pulled']} pulled · {counts['present']} already here · "
    head += f"{counts['failed']} failed"
    if report.ok:
        return Content.assemble(
            ("Ready: ", "bold $text-success"), head, "\nML jobs start without waiting for a pull."
        )
    failures = list(dict.fromkeys(r.detail for r in report.results if r.status == "failed"))
    parts: list[Content | str | tuple[str, str]] = [("Not ready: ", "bold $text-error"), head]
    for failure in failures:
        parts += ["\n• ", safe(failure)]
    parts += ["\nPress ", ("r", "bold $text-accent"), " to try again."]
    return Content.assemble(*parts)


__all__ = ["ImageRow", "MlImagesScreen"]
