"""Resubmit (issue 22 §1): a finished job's spec submitted again as a new job, from the job
view and the Jobs list; what ``nunet-tui job resubmit`` does (engine ``ResubmitJob``).

One key on both screens. For a finished job of ours it is in the footer and asks first (a
paid job locks NTX again); for one still running it says why not, in one line, instead of
doing nothing (a second binding of the same key, enabled only then: Textual runs the first
enabled binding of a key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.content import Content

from engine.api import TERMINAL_STATES, JobInfo, ResubmitJob
from engine.errors import EngineError
from nunet_tui.format import safe
from nunet_tui.screens.confirm import ConfirmScreen
from nunet_tui.widgets.job_state import job_name

if TYPE_CHECKING:
    from nunet_tui.screens.base import CapabilityScreen

KEY = "ctrl+r"
# One key, one of the two enabled at a time: one id, so that `[keys]` moves both.
BINDINGS = [
    Binding(
        KEY,
        "resubmit",
        "Resubmit",
        key_display="^r",
        tooltip="Run this job again",
        id="job.resubmit",
    ),
    Binding(KEY, "resubmit_refused", "Resubmit", show=False, id="job.resubmit"),
]


def can_resubmit(job: JobInfo | None) -> bool:
    """A job of ours that ended (any way): its spec can run again."""
    return job is not None and job.role == "consumer" and job.state in TERMINAL_STATES


def refusal(job: JobInfo | None) -> str | None:
    """Why this job cannot be resubmitted now, for a key pressed anyway (None: it can, or
    there is no job to say anything of)."""
    if job is None or can_resubmit(job):
        return None
    if job.role != "consumer":
        return f"Job {job.job_id} is one this machine runs for someone else: only they resubmit it"
    return f"Job {job.job_id} is still {job.state}: resubmit it once it has ended (x cancels it)"


def check(action: str, job: JobInfo | None) -> bool | None:
    """``check_action`` for the two bindings (None: not one of them)."""
    if action == "resubmit":
        return can_resubmit(job)
    if action == "resubmit_refused":
        return refusal(job) is not None
    return None


def say_refusal(screen: CapabilityScreen, job: JobInfo | None) -> None:
    if (why := refusal(job)) is not None:
        screen.notify(why, title="Resubmit", severity="warning", markup=False)


async def resubmit(screen: CapabilityScreen, job: JobInfo) -> JobInfo | None:
    """Ask, then submit ``job``'s spec again (matching chooses the provider); the new job,
    or None (declined, or refused: said in a toast). Run it from a worker."""
    confirmed = await screen.app.push_screen_wait(
        ConfirmScreen(
            f"Resubmit job {job.job_id}?",
            Content.assemble(
                "The same spec as ",
                (job_name(job), "bold"),
                " runs again as a new job: a new quote and, for a paid job, a new lock. "
                "Matching chooses the provider (those that completed jobs for you first); "
                f"`nunet-tui job resubmit {job.job_id} --provider PEER` names one. "
                f"Job {job.job_id} stays as it ended ({job.state}).",
            ),
            confirm_label="Resubmit",
        )
    )
    if not confirmed:
        return None
    screen.notify(
        f"Resubmitting {job.job_id}: matching, then the provider's answer…", title="Resubmit"
    )
    try:
        new: JobInfo = await screen.nunet.client.call(ResubmitJob(job_id=job.job_id))
    except EngineError as exc:
        screen.notify(safe(exc.message), title="Resubmit", severity="error", markup=False)
        return None
    screen.notify(
        f"Job {new.job_id} {new.state}: {job.job_id} again", title="Resubmit", markup=False
    )
    return new
