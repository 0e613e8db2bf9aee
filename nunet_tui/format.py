"""Display helpers: numbers, peer ids, node states and meters as Textual ``Content``.

Everything that comes from the engine or a peer is untrusted text. These helpers only ever
build ``Content`` from plain strings plus a style (``Content.assemble``), never from markup, so
a ``[bold]`` inside a hostname is shown literally, and control codes are shown as escapes by
``safe`` (engine/domain/safe_text.py, the one escaper the CLI shares).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from rich.text import Text
from textual.content import Content, Span

from engine.api import Check, Onboarding
from engine.domain.peer_names import peer_label
from engine.domain.safe_text import safe as safe  # the one escaper, re-exported for the widgets

ELLIPSIS = "…"
DASH = "\u2013"  # an en dash: "no value" in tables
TIMES = "\u00d7"  # the multiplication sign, as in "2 x 2,500 MHz"


def short_peer_id(peer_id: str, head: int = 8, tail: int = 4) -> str:
    """``12D3KooW…x9Fq``: enough to tell peers apart at a glance."""
    peer_id = safe(peer_id)
    if len(peer_id) <= head + tail + 1:
        return peer_id
    return f"{peer_id[:head]}{ELLIPSIS}{peer_id[-tail:]}"


def named_peer(names: Mapping[str, str] | None, peer_id: str, *, full_id: bool = False) -> str:
    """``name · 12D3KooW…x9Fq`` from the names the app has seen in adverts (``peer_names``),
    or the id alone: where a screen has only a peer id (a job's provider, a chat)."""
    return peer_label(peer_id, (names or {}).get(peer_id, ""), full_id=full_id)


def thousands(value: float) -> str:
    """``16000`` → ``16,000`` (NuNet's CLI counts MB and MHz in whole numbers)."""
    return f"{round(value):,}"


def byte_size(value: int) -> str:
    """``512 B``, ``1.5 KiB``, ``250 MiB``, ``3.2 GiB``: a size in bytes, binary units (as
    UnixFS chunks are counted: 256 KiB), at most 8 characters up to 1023 TiB."""
    size = float(max(value, 0))
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    step = 0
    while size >= 1024 and step < len(units) - 1:
        size /= 1024
        step += 1
    if step == 0:
        return f"{int(size)} B"
    return f"{size:.1f} {units[step]}" if size < 10 else f"{size:.0f} {units[step]}"


def mb(value: int) -> str:
    return f"{thousands(value)} MB"


def mhz(value: int) -> str:
    return f"{thousands(value)} MHz"


def node_state(onboarding: Onboarding | None) -> Content:
    """The one-line state of a provider node, coloured by what it means."""
    if onboarding is None:
        return Content.assemble(("○ ", "$text-muted"), ("not onboarded", "bold"))
    if onboarding.state == "paused":
        return Content.assemble(
            ("◐ ", "$warning"),
            ("onboarded · paused", "bold $warning"),
            ("  not accepting jobs", "$text-muted"),
        )
    return Content.assemble(("● ", "$success"), ("onboarded · accepting jobs", "bold $success"))


def meter_bar(used: int, total: int, width: int) -> Content:
    """A bar of ``width`` cells: ``█`` for the share used, ``░`` for the rest."""
    width = max(width, 1)
    share = 0.0 if total <= 0 else min(max(used / total, 0.0), 1.0)
    filled = round(share * width)
    if used > 0 and filled == 0:
        filled = 1
    return Content.assemble(("█" * filled, "$accent"), ("░" * (width - filled), "$text-muted"))


def check_row(name: str, check: Check) -> tuple[Content, Content]:
    """(``✓ Docker engine``, ``reachable …``): a readiness check as a table row."""
    mark = ("✓ ", "bold $text-success") if check.ok else ("✗ ", "bold $text-error")
    return Content.assemble(mark, name), Content.styled(safe(check.detail), "$text-muted")


# --- time, peers, GPUs -------------------------------------------------------------------

SPARK_BLOCKS = "▁▂▃▄▅▆▇█"


def ago(at: float | None, now: float) -> str:
    """``just now``, ``12 s ago``, ``5 min ago``, ``3 h ago``, ``2 d ago``; ``never`` for None."""
    if not at:
        return "never"
    seconds = max(now - at, 0.0)
    if seconds < 2:
        return "just now"
    if seconds < 60:
        return f"{int(seconds)} s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86_400:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86_400)} d ago"


def chat_time(at: float, now: float) -> str:
    """A message's time: relative while fresh (``just now``, ``4 min ago``), then the clock."""
    seconds = now - at
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    return time.strftime("%b %d %H:%M", time.localtime(at))


def latency(ms: float | None) -> str:
    if ms is None:
        return DASH
    return f"{ms:.1f} ms" if ms < 10 else f"{round(ms)} ms"


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{round(value)}%"


def spark(values: Sequence[float | None], width: int, top: float, *, window: int) -> str:
    """A history line of ``width`` cells over the last ``window`` samples, newest at the right.

    The scale is fixed (0..``top``), so 40% looks like 40% whatever came before, and each
    cell always stands for the same stretch of time: a short history fills only the right
    end. A cell shows the highest sample in it; a cell without samples is a space.
    """
    width = max(width, 1)
    recent = list(values)[-window:]
    per_cell = max(window, 1) / width
    cells: list[str] = []
    for cell in range(width):
        from_end = width - 1 - cell
        start = len(recent) - round((from_end + 1) * per_cell)
        stop = len(recent) - round(from_end * per_cell)
        chunk = [v for v in recent[max(start, 0) : max(stop, 0)] if v is not None]
        if not chunk:
            cells.append(" ")
            continue
        share = min(max(max(chunk) / top, 0.0), 1.0) if top > 0 else 0.0
        cells.append(SPARK_BLOCKS[min(int(share * len(SPARK_BLOCKS)), len(SPARK_BLOCKS) - 1)])
    return "".join(cells)


def level_style(value: float | None, limit: float | None, *, warn: float, error: float) -> str:
    """``$text-error`` at or above ``error`` x limit, ``$text-warning`` above ``warn`` x limit."""
    if value is None or not limit:
        return ""
    share = value / limit
    if share >= error:
        return "bold $text-error"
    if share >= warn:
        return "bold $text-warning"
    return ""


MUTED = "$text-muted"


def table_cell(content: Content) -> Text:
    """``content`` as a Rich ``Text`` for a ``DataTable`` cell (which measures only Rich
    renderables); theme variables such as ``$text-error`` are resolved on the way.

    ``$text-muted`` is a translucent colour that only blends against a widget's background:
    resolved here, with none, it comes out black (invisible on the dark themes), so cells
    say ``dim`` instead, which the terminal blends itself."""
    if any(isinstance(span.style, str) and MUTED in span.style for span in content.spans):
        content = Content(
            content.plain,
            spans=[
                Span(span.start, span.end, span.style.replace(MUTED, "dim"))
                if isinstance(span.style, str)
                else span
                for span in content.spans
            ],
        )
    text = Text()
    for segment in content.render_segments():
        text.append(segment.text, segment.style)
    return text


def plural(count: int, word: str) -> str:
    """``1 peer``, ``2 peers``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def short_addr(addr: str) -> str:
    """A multiaddr without its ``/p2p/<peer id>`` tail (the peer id is shown beside it)."""
    return safe(addr.split("/p2p/", 1)[0])


def span(low: float, high: float) -> str:
    """``1,024-2,048`` (en dash); one number when both ends are the same."""
    return thousands(low) if low == high else f"{thousands(low)}{DASH}{thousands(high)}"


def tilde(location: str) -> str:
    """A path under the home folder as ``~/…``: shorter, and the same on every machine."""
    from pathlib import Path

    home = str(Path.home())
    if home not in ("", "/") and location.startswith(home + "/"):
        location = "~" + location[len(home) :]
    return safe(location)


def problem_lines(messages: Sequence[str]) -> Content:
    """A form field's problems, one ``✗`` line each, shown literally."""
    return Content("\n").join(
        Content.assemble(("✗ ", "bold"), safe(message)) for message in messages
    )
