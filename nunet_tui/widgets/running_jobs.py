"""The provider dashboard's "Running job" panel: what this machine runs for others, live.

One block per running job (the newest three; the subtitle counts the rest):

    Job       7f3a90c1d2e3 · cifar-10 · ● running · checkpoint 3
    Consumer  12D3KooW…Ztq2a · 0.50 NTX quoted (1 NTX/h)
    Runs as   pytorch · GPU · Moderate · docker executor
    Time      00:18:20 of 00:30:00        ████████████░░░░░░░░  61%
    Progress  [epoch 37/100] loss 0.812   ███████░░░░░░░░░░░░░  37%
    Last      saved outputs/model-37.pt

The time bar is the elapsed time against the spec's expected duration; the progress bar is
what the job itself last printed (``progress.py``). Both lines of job output are peer text:
they are cleaned and cut, then shown as plain ``Content``, never parsed as markup.
``ProviderJobs`` feeds this widget; it does no I/O of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from textual.content import Content
from textual.widget import Widget

from engine.api import JobInfo, JobLogLine
from nunet_tui.format import meter_bar, short_peer_id
from nunet_tui.viewmodels.money import job_figures, price_text
from nunet_tui.widgets.job_state import duration, hms, job_name, runs_as, state_text
from nunet_tui.widgets.progress import Progress, progress_of, visible_text
from oracle_client.ntx import format_ntx

SHOWN = 3  # running jobs drawn in full; a provider with more slots sees "+N more"
LABEL_W = 10  # "Progress" and two spaces
ROWS = 6  # lines per job


@dataclass
class LogTail:
    """The newest things a running job printed, as the dashboard last read them."""

    last_seq: int = -1
    last_line: str = ""
    progress: Progress | None = None

    def take(self, lines: Sequence[JobLogLine]) -> None:
        """Lines newer than ``last_seq`` (oldest first); keeps the last non-blank one and the
        last one that reports progress (an older progress line stays until a newer one)."""
        fresh = [line for line in lines if line.seq > self.last_seq]
        if not fresh:
            return
        self.last_seq = fresh[-1].seq
        for line in reversed(fresh):
            text = visible_text(line.text)
            if text:
                self.last_line = f"» {text}" if line.stream == "system" else text
                break
        for line in reversed(fresh):
            if line.stream != "system" and (found := progress_of(line.text)) is not None:
                self.progress = found
                break


def bar_width(width: int) -> int:
    """The bars' width for a block ``width`` cells wide (both bars share it, so they align)."""
    return min(max(width // 4, 8), 30)


def _bar_row(label: str, text: Content, share: float, width: int, style: str = "") -> Content:
    """``label  text……  ██████░░░░  61%``: the text cut to leave the bar its place."""
    bar_w = bar_width(width)
    text_w = max(width - LABEL_W - bar_w - 7, 4)
    percent = f"{min(share, 9.99):>5.0%}"
    bar = meter_bar(round(min(share, 1.0) * 1000), 1000, bar_w)
    if style:
        bar = bar.stylize(style)
    return Content.assemble(
        (label.ljust(LABEL_W), "bold"),
        text.truncate(text_w, ellipsis=True, pad=True),
        "  ",
        bar,
        (percent, style or "bold"),
    )


def _row(label: str, text: Content, width: int) -> Content:
    return Content.assemble(
        (label.ljust(LABEL_W), "bold"), text.truncate(max(width - LABEL_W, 4), ellipsis=True)
    )


def job_block(job: JobInfo, tail: LogTail | None, now: float, width: int) -> list[Content]:
    """The ``ROWS`` lines that show ``job`` in ``width`` cells."""
    head = Content.assemble(
        (job.job_id, "bold"),
        " · ",
        (job_name(job, 40), "bold $text-accent"),
        " · ",
        state_text(job.state),
        (f" · checkpoint {job.checkpoint}" if job.checkpoint else "", "$text-muted"),
        (f" · resumed from {job.resumed_from}" if job.resumed_from else "", "$text-warning"),
    )
    figures = job_figures(job, now=now)
    money = [
        format_ntx(units, what)
        for units, what in ((figures.locked, "locked"), (figures.metered, "metered"))
        if units is not None
    ]
    if not money and figures.estimate is not None:
        money.append(format_ntx(figures.estimate, "estimate"))
    price = price_text(job)
    consumer = Content.assemble(
        short_peer_id(job.consumer),
        (
            "".join(f" · {part}" for part in money) + (f" ({price})" if price else ""),
            "$text-muted",
        ),
    )
    lines = [
        _row("Job", head, width),
        _row("Consumer", consumer, width),
        _row("Runs as", Content(runs_as(job)), width),
        _time_row(job, now, width),
    ]
    progress = tail.progress if tail is not None else None
    if progress is None:
        lines.append(_row("Progress", Content.styled("none reported yet", "$text-muted"), width))
    elif progress.share is None:
        lines.append(_row("Progress", Content(progress.text), width))
    else:
        lines.append(_bar_row("Progress", Content(progress.text), progress.share, width))
    last = tail.last_line if tail is not None else ""
    shown = Content(last) if last else Content.styled("no output yet", "$text-muted")
    lines.append(_row("Last", shown, width))
    return lines


def _time_row(job: JobInfo, now: float, width: int) -> Content:
    elapsed = duration(job, now)
    if elapsed is None:
        preparing = "preparing: fetching the script, installing its packages"
        return _row("Time", Content.styled(preparing, "$text-muted"), width)
    expected = job.spec.expected_minutes * 60
    if expected <= 0:
        return _row("Time", Content(hms(elapsed)), width)
    text = Content(f"{hms(elapsed)} of {hms(expected)}")
    if elapsed > expected:
        # Past its expected time the job is still paid by the hour, but the consumer planned
        # for less, and the executor stops it at twice the time: worth a colour.
        text = Content.assemble(text, (f" · over by {hms(elapsed - expected)}", "$text-warning"))
        return _bar_row("Time", text, elapsed / expected, width, "$text-warning")
    return _bar_row("Time", text, elapsed / expected, width)


class RunningJobs(Widget):
    """The panel; ``show(jobs, tails, now)`` redraws it (hidden when ``jobs`` is empty)."""

    DEFAULT_CSS = """
    RunningJobs {
        height: auto;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = "panel") -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Running job"
        self.jobs: list[JobInfo] = []
        self.tails: dict[str, LogTail] = {}
        self.now = 0.0

    def show(self, jobs: Sequence[JobInfo], tails: dict[str, LogTail], now: float) -> None:
        # A new height only when the number of blocks changes; else a repaint will do.
        relayout = min(len(jobs), SHOWN) != min(len(self.jobs), SHOWN)
        self.jobs = list(jobs)
        self.tails = tails
        self.now = now
        self.display = bool(self.jobs)
        count = len(self.jobs)
        self.border_title = "Running job" if count <= 1 else f"Running jobs · {count}"
        more = count - SHOWN
        self.border_subtitle = f"+{more} more · j for all" if more > 0 else ""
        self.refresh(layout=relayout)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        shown = min(len(self.jobs), SHOWN)
        return max(shown * ROWS + shown - 1, 1)

    def render(self) -> Content:
        width = self.size.width
        blocks = [
            Content("\n").join(job_block(job, self.tails.get(job.job_id), self.now, width))
            for job in self.jobs[:SHOWN]
        ]
        return Content("\n\n").join(blocks)


__all__ = ["LogTail", "RunningJobs", "job_block"]
