"""Two things the app does before doing what was asked: ``q`` with jobs still running asks
first, and a screenshot goes to a folder that exists (Textual's default, ~/Downloads, is
missing on many servers, and its failure gave no reason)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.content import Content

from engine import api
from engine.errors import EngineError
from nunet_tui.screens.confirm import ConfirmScreen

if TYPE_CHECKING:
    from textual.app import App

LIVE_STATES = ("pending", "confirming", "accepted", "running")


class QuitConfirm(ConfirmScreen):
    """The question ``q`` asks while jobs run; ``q`` again inside it quits."""


async def live_jobs(client: Any) -> list[api.JobInfo]:
    """Jobs not yet ended, either role; none when the engine cannot say (quitting must
    never be held up by an engine that is already gone)."""
    try:
        listed: api.JobList = await client.call(api.ListJobs())
    except EngineError:
        return []
    return [job for job in listed.jobs if job.state in LIVE_STATES]


def quit_question(
    jobs: list[api.JobInfo], embedded: bool, demo: Mapping[str, Any] | None = None
) -> QuitConfirm:
    """``demo``: the demo's sandbox (``Sandbox.describe()``), whose nodes stop with the app."""
    count = len(jobs)
    noun = "job is" if count == 1 else "jobs are"
    ran = sum(job.role == "provider" for job in jobs)
    if demo is not None:
        # The app attaches to the sandbox's consumer daemon, but the demo stops every node
        # of the sandbox once the app ends: nothing keeps running.
        detail = "Quitting ends the demo: its providers stop and these jobs with them"
        if demo.get("removed_on_exit"):
            detail += ", and the sandbox is deleted, jobs and results included."
        else:
            detail += f"; its files stay in {demo.get('root')}."
    elif embedded:
        detail = (
            "Quitting stops this node: jobs it runs for others are interrupted and the "
            "ones you bought stop streaming here."
        )
        if ran:
            detail += f" {ran} of them run on this machine."
    else:
        detail = "The daemon keeps running them; you can attach again later."
    return QuitConfirm(
        f"Quit while {count} {noun} still running?",
        Content(detail),
        confirm_label="Quit",
        decline_label="Stay",
        danger=embedded or demo is not None,
    )


def screenshot_folder(path: str | None) -> tuple[Path | None, str]:
    """Where a screenshot can go: the folder asked for, else Downloads, the home folder or
    the working directory, the first that exists and is writable; else None and why."""
    if path:
        candidates = [Path(path).expanduser()]
    else:
        from platformdirs import user_downloads_dir

        candidates = [Path(user_downloads_dir()), Path.home(), Path.cwd()]
    reasons = []
    for folder in candidates:
        if not folder.is_dir():
            reasons.append(f"{folder} does not exist")
        elif not os.access(folder, os.W_OK | os.X_OK):
            reasons.append(f"{folder} is not writable")
        else:
            return folder, ""
    return None, "; ".join(reasons)


def deliver_screenshot(app: App[Any], path: str | None) -> Path | None:
    """The folder to hand Textual, or None after telling the user why there is none."""
    folder, why = screenshot_folder(path)
    if folder is None:
        app.notify(
            f"Screenshot not saved: {why}", title="Screenshot", severity="error", markup=False
        )
    return folder
