"""What a running job says about its own progress, read from its log lines.

Jobs report progress only by printing it: ``epoch 37/100 loss 0.81``, Keras's ``Epoch 3/10``
and ``12/100 [====>....]``, tqdm's ``37%|███▋      | 37/100``, ``[epoch 5] loss 0.7``. The
engine keeps those lines as they are, so the TUI recognises them here: ``progress_of(line)``
says whether a line reports progress and, when it names a total, how far along the job is.
A line with a counter but no total (``[epoch 5]``) is still the job's latest progress line;
it just has no bar.

Everything here is pure (text in, ``Progress`` out) and the text is untrusted: a ``Progress``
keeps the line cleaned (``clean_line``) and cut to what a terminal would show after its last
carriage return, never interpreted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nunet_tui.widgets.job_log import clean_line

MAX_CHARS = 300  # a progress or last line is shown on one row: no need to keep more

# "epoch 37/100", "Step 120 of 500", "iter: 3/10", "round #2/5": a counter with its total.
_COUNTER_OF = re.compile(
    r"\b(?P<what>epoch|step|iter(?:ation)?|batch|round|fold|trial|episode|shard|chunk)s?"
    r"\s*[:#=]?\s*(?P<done>\d+)\s*(?:/|\bof\b)\s*(?P<total>\d+)",
    re.IGNORECASE,
)
# tqdm: " 37%|███▋      | 37/100 [00:12<00:21]" (the percentage right before the bar).
_TQDM = re.compile(r"(?P<pct>\d{1,3}(?:\.\d+)?)%\|")
# Keras's step line: "12/100 [====>.........]".
_BAR_COUNT = re.compile(r"(?P<done>\d+)/(?P<total>\d+)\s*\[[=>.\s]*\]")
# "progress: 45%", "45% done", "completed 45.5 %".
_PERCENT = re.compile(
    r"(?:\b(?:progress|complete[d]?|done)\b\D{0,12}(?P<a>\d{1,3}(?:\.\d+)?)\s*%)"
    r"|(?:(?P<b>\d{1,3}(?:\.\d+)?)\s*%\s*(?:complete[d]?|done)\b)",
    re.IGNORECASE,
)
# "[epoch 5] loss 0.7", "Epoch 12 - loss": a counter without a total.
_COUNTER = re.compile(
    r"\b(?:epoch|step|iter(?:ation)?|round|episode)\s*[:#=]?\s*\d+\b", re.IGNORECASE
)


@dataclass(frozen=True)
class Progress:
    """A progress line: its (clean) text and, when it says, the share done (0..1)."""

    text: str
    share: float | None = None


def visible_text(text: str) -> str:
    """What a terminal shows of a line: the part after its last carriage return (tqdm
    rewrites one line with ``\\r``), cleaned of control characters and cut to one row."""
    segments = [part for part in text.split("\r") if part.strip()]
    shown = segments[-1] if segments else ""
    return clean_line(shown[:MAX_CHARS].rstrip())


def progress_of(text: str) -> Progress | None:
    """The progress ``text`` reports (None when it reports none)."""
    line = visible_text(text)
    if not line:
        return None
    share: float | None = None
    if match := _COUNTER_OF.search(line):
        share = _ratio(match["done"], match["total"])
    elif match := _TQDM.search(line):
        share = _percent(match["pct"])
    elif match := _BAR_COUNT.search(line):
        share = _ratio(match["done"], match["total"])
    elif match := _PERCENT.search(line):
        share = _percent(match["a"] or match["b"])
    elif not _COUNTER.search(line):
        return None
    return Progress(line, share)


def _ratio(done: str, total: str) -> float | None:
    whole = int(total)
    if whole <= 0:
        return None
    return min(max(int(done) / whole, 0.0), 1.0)


def _percent(value: str) -> float:
    return min(max(float(value) / 100, 0.0), 1.0)


__all__ = ["Progress", "progress_of", "visible_text"]
