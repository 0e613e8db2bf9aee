"""Textual messages the app passes around.

``EngineEvent`` is the one thing that crosses from the engine's thread into the UI: the
subscription callback does nothing but ``app.post_message(EngineEvent(event))``, which is
thread-safe, and the app handles it on its own loop.
"""

from __future__ import annotations

from textual.message import Message

from engine.api import Event, JobInfo


class EngineEvent(Message):
    """An event from the engine (onboarding changed, mode changed, engine stopping...)."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class NodeRefreshed(Message):
    """The app re-read the node (info and capacity); screens may redraw."""


class EngineUpdate(Message, bubble=False):
    """An engine event the app hands on to the screen on top (peers, chat, network...).

    It does not bubble: the app already saw the event as ``EngineEvent``.
    """

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class OpenJob(Message):
    """Open a job's view: the one way to (screens and widgets post it; the app shows it).

    ``job``: what the poster already knows of it (drawn at once, then read afresh);
    ``replace``: in place of the screen on top (a submitted or resubmitted job's view
    replaces the form or the old job's), else on top of it (Esc comes back)."""

    def __init__(self, job_id: str, job: JobInfo | None = None, *, replace: bool = False) -> None:
        super().__init__()
        self.job_id = job_id
        self.job = job
        self.replace = replace
