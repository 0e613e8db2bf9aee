"""A job's live log: Textual's line-virtualised ``Log``, fed in batches, capped, searchable.

Only the visible lines are ever rendered, so the cost of a new line is appending a string to
a list. Lines arrive in batches (``add_lines``) that the job detail screen coalesces from many
engine events; the widget keeps the newest ``max_lines`` (100,000 by default) and counts the
ones it dropped, so a search result keeps pointing at the same line while the top is cut.

Peer text is plain text here: ``Log`` never parses markup, and anything that is not
printable (ESC, BEL, CR, ...) is made visible by ``format.safe`` before it is stored; the
common all-printable line costs one C-level ``str.isprintable`` call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive
from textual.strip import Strip
from textual.widgets import Log

from nunet_tui.format import safe

MAX_LINES = 100_000


def clean_line(text: str) -> str:
    """One log line, safe to show: printable text as it is, control characters escaped."""
    if text.isprintable():
        return text
    return safe(text.expandtabs())


class JobLogView(Log):
    """``following``: keep the newest line in view; paused, the view stays where it is."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"job-log--match", "job-log--current"}
    DEFAULT_CSS = """
    JobLogView {
        height: 1fr;
        background: $surface;
        overflow-x: auto;
        overflow-y: scroll;
        scrollbar-size-vertical: 1;
        & > .job-log--match { background: $warning 40%; }
        & > .job-log--current { background: $accent 60%; text-style: bold; }
    }
    """

    following: reactive[bool] = reactive(True)
    search: reactive[str] = reactive("")

    def __init__(
        self, *, max_lines: int = MAX_LINES, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(max_lines=max_lines, auto_scroll=False, id=id, classes=classes)
        self.dropped = 0
        """Lines cut from the top (the cap); a line's absolute number is its index + dropped."""
        self.total = 0
        """Every line ever added (shown or cut)."""
        self.match: int | None = None
        """Absolute number of the current search match."""

    # --- feeding ---------------------------------------------------------------------------

    def add_lines(self, texts: Sequence[str]) -> None:
        """Append ``texts`` (one line each; cleaned here) in one go."""
        if not texts:
            return
        lines = [clean_line(text) for text in texts]
        self.total += len(lines)
        store = self._lines
        if self.max_lines is not None and len(lines) >= self.max_lines:
            self.dropped += len(store) + len(lines) - self.max_lines
            lines = lines[-self.max_lines :]
            store.clear()
            self._render_line_cache.clear()
        store.extend(lines)
        removed = 0
        if self.max_lines is not None and len(store) > self.max_lines:
            removed = len(store) - self.max_lines
            # Cut in bulk with some headroom: deleting from the front of a long list is
            # linear, so do it once per ~1% of the cap instead of on every batch.
            removed += min(self.max_lines // 100, len(store) - removed)
            del store[:removed]
            self._render_line_cache.clear()
            self.dropped += removed
        widest = max(map(len, lines))
        if widest > self._width:
            self._width = max(self._width, max(cell_len(line) for line in lines))
        self.virtual_size = Size(self._width, len(store))
        if self.following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        elif removed:
            # Keep the paused view on the same text while the top is cut away.
            self.scroll_to(y=max(self.scroll_y - removed, 0), animate=False, immediate=True)
        self.refresh()

    def clear_log(self) -> None:
        self.clear()
        self.dropped = 0
        self.total = 0
        self.match = None

    # --- follow / pause --------------------------------------------------------------------

    def watch_following(self, following: bool) -> None:
        if following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def on_resize(self) -> None:
        # Something beside or above the log came or went (the GPU strip, the search box):
        # a following log keeps its newest line in view at the new height.
        if self.following:
            self.call_after_refresh(self.scroll_end, animate=False, x_axis=False)

    # --- search ----------------------------------------------------------------------------

    def find(self, query: str, *, backwards: bool = False, again: bool = False) -> int | None:
        """The next line (absolute number) containing ``query`` (any case), from the current
        match or the view; None when there is none. Moves the view there and pauses."""
        self.search = query
        if not query:
            self.match = None
            self.refresh()
            return None
        needle = query.lower()
        lines = self._lines
        if self.match is not None and self.match - self.dropped in range(len(lines)):
            origin = self.match - self.dropped
            if not again:
                origin += 1 if backwards else -1  # the current one may match the new query
        else:
            origin = int(self.scroll_y) + (self.size.height if backwards else -1)
            origin = len(lines) if backwards and self.following else origin
        count = len(lines)
        if backwards:
            start = min(origin - 1, count - 1)
            order = [*range(start, -1, -1), *range(count - 1, start, -1)]  # wraps around
        else:
            start = max(origin + 1, 0)
            order = [*range(start, count), *range(0, min(start, count))]
        for index in order:
            if needle in lines[index].lower():
                self.match = index + self.dropped
                self.following = False
                self.scroll_to(
                    y=max(index - self.size.height // 2, 0), animate=False, immediate=True
                )
                self.refresh()
                return self.match
        self.match = None
        self.refresh()
        return None

    def watch_search(self) -> None:
        self.refresh()

    # --- rendering -------------------------------------------------------------------------

    def _render_line_strip(self, y: int, rich_style: Style) -> Strip:
        if not self.search or self.text_selection is not None:
            return super()._render_line_strip(y, rich_style)
        line = self._process_line(self._lines[y])
        text = Text(line, no_wrap=True, style=rich_style)
        text.highlight_words(
            [self.search],
            self.get_component_rich_style("job-log--match", partial=True),
            case_sensitive=False,
        )
        if self.match is not None and y + self.dropped == self.match:
            text.stylize(self.get_component_rich_style("job-log--current", partial=True))
        return Strip(text.render(self.app.console), cell_len(line))
