"""How a job looks everywhere in the TUI: its state's colour, the timeline, times and money.

Pure functions from ``JobInfo`` (and a "now" the caller passes, so pictures can pin it) to
``Content``. Every text that came from the spec or a peer goes through ``safe()``.
"""

from __future__ import annotations

from textual.content import Content

from engine.api import TERMINAL_STATES, EscrowInfo, JobInfo
from nunet_tui.format import DASH, safe, short_peer_id
from nunet_tui.viewmodels.money import job_figures
from oracle_client.ntx import digits, format_ntx

STATE_STYLES: dict[str, str] = {
    "queued": "$text-muted",
    "pending": "$text-muted",
    "confirming": "$text-muted",
    "accepted": "$text-accent",
    "running": "bold $text-primary",
    "completed": "bold $text-success",
    "failed": "bold $text-error",
    "oom": "bold $text-error",
    "timeout": "bold $text-error",
    "cancelled": "$text-warning",
    "interrupted": "$text-warning",
    "refused": "$text-warning",
}
STATE_MARKS: dict[str, str] = {
    "queued": "⧗",
    "pending": "◌",
    "confirming": "◌",
    "accepted": "◔",
    "running": "●",
    "completed": "✓",
    "failed": "✗",
    "oom": "✗",
    "timeout": "✗",
    "cancelled": "○",
    "interrupted": "○",
    "refused": "○",
}
STATE_WORDS: dict[str, str] = {
    "oom": "out of memory",
    "timeout": "timed out",
}
FAILED_STATES = ("failed", "oom", "timeout")


def state_style(state: str) -> str:
    return STATE_STYLES.get(state, "")


def state_text(state: str, *, mark: bool = True) -> Content:
    """``● running`` in the state's colour."""
    word = STATE_WORDS.get(state, state)
    label = f"{STATE_MARKS.get(state, '?')} {word}" if mark else word
    return Content.styled(label, state_style(state))


def is_terminal(job: JobInfo) -> bool:
    return job.state in TERMINAL_STATES


def job_name(job: JobInfo, width: int = 40) -> str:
    """The spec's name, else the script's file name (or the git entry point)."""
    spec = job.spec
    name = spec.name
    if not name:
        if spec.script_url:
            name = spec.script_url.rstrip("/").rsplit("/", 1)[-1]
        elif spec.git is not None:
            name = spec.git.entry
    name = safe(name)
    return name if len(name) <= width else name[: width - 1] + "…"


def other_party(job: JobInfo) -> str:
    """The peer on the other side: the provider for our jobs, the consumer for the ones we run."""
    return job.provider if job.role == "consumer" else job.consumer


def hms(seconds: float | None) -> str:
    """``00:12:41``; days as ``2d 03:04:05``."""
    if seconds is None:
        return DASH
    total = max(int(seconds), 0)
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}d {text}" if days else text


def duration(job: JobInfo, now: float) -> float | None:
    """How long it ran (or has been running)."""
    if job.started_at is None:
        return None
    end = job.finished_at if job.finished_at is not None else (None if is_terminal(job) else now)
    if end is None:
        end = job.updated_at or job.started_at
    return max(end - job.started_at, 0.0)


def cost(job: JobInfo, escrow: EscrowInfo | None = None, *, unit: bool = True) -> Content:
    """What the job cost, saying which figure it is: ``0.02 NTX paid`` once settled,
    ``metered`` once it ran, else ``≈0.05 NTX estimate`` (italic). ``unit`` False: without
    "NTX", for a column whose title says it."""

    def text(units: int, what: str) -> str:
        return format_ntx(units, what) if unit else f"{digits(units)} {what}"

    figures = job_figures(job, escrow)
    if figures.paid is not None:
        return Content(text(figures.paid, "paid"))
    if figures.metered is not None and (is_terminal(job) or figures.metered):
        return Content(text(figures.metered, "metered"))
    if figures.estimate is not None:
        return Content.styled(f"≈{text(figures.estimate, 'estimate')}", "italic")
    return Content.styled(DASH, "$text-muted")


def runs_as(job: JobInfo) -> str:
    spec = job.spec
    parts = [
        safe(spec.framework),
        safe(spec.device.upper()),
        safe(spec.tier.capitalize()),
    ]
    if job.executor:
        parts.append(f"{safe(job.executor)} executor")
    return " · ".join(parts)


def timeline(job: JobInfo) -> Content:
    """``✓ pending ─ ✓ accepted ─ ● running ─ · · ·``: where the job is on its way."""
    state = job.state
    if state == "queued":
        steps = ["queued", "pending", "accepted", "running", ""]
    elif state == "refused":
        steps = ["pending", "refused"]
    elif state == "confirming":
        steps = ["pending", "confirming", "accepted", "running", ""]
    elif is_terminal(job) and job.started_at is None and state != "completed":
        steps = ["pending", "accepted", state]
    else:
        steps = ["pending", "accepted", "running", state if is_terminal(job) else ""]
    current = steps.index(state) if state in steps else 0
    parts: list[Content] = []
    for index, step in enumerate(steps):
        if index:
            parts.append(Content.styled(" ─ ", "$text-muted"))
        if not step:
            parts.append(Content.styled("· · ·", "$text-muted"))
        elif index < current:
            parts.append(Content.assemble(("✓ ", "$text-success"), step))
        elif index == current:
            parts.append(state_text(step))
        else:
            parts.append(Content.styled(f"  {step}", "$text-muted"))
    return Content("").join(parts)


def peer_short(peer_id: str) -> str:
    return short_peer_id(peer_id, head=4, tail=4) if peer_id else DASH
