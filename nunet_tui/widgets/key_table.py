"""Two aligned columns (``key  text``) whose long texts wrap under themselves, not the key."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Grid
from textual.content import Content
from textual.widgets import Label

Row = tuple[str | Content, str | Content]


def _content(value: str | Content) -> Content:
    # A plain str is literal text, never markup: untrusted values pass through unchanged.
    return value if isinstance(value, Content) else Content(value)


class KeyTable(Grid):
    """Rows of (key, text). ``key_style`` styles the left column (e.g. keys in the accent)."""

    DEFAULT_CSS = """
    KeyTable {
        grid-size: 2;
        grid-columns: auto 1fr;
        grid-gutter: 0 2;
        grid-rows: auto;
        height: auto;
        .key-cell { text-style: bold; }
        &.-keys .key-cell { color: $text-accent; }
        .text-cell { width: 1fr; }
    }
    """

    def __init__(
        self,
        rows: Sequence[Row] = (),
        *,
        keys: bool = False,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self._rows = list(rows)
        self.set_class(keys, "-keys")

    def compose(self) -> ComposeResult:
        for key, text in self._rows:
            yield Label(_content(key), classes="key-cell", markup=False)
            yield Label(_content(text), classes="text-cell", markup=False)

    @property
    def rows(self) -> list[Row]:
        return list(self._rows)

    def set_rows(self, rows: Sequence[Row]) -> None:
        """Show ``rows``; reuses the labels when the shape is unchanged (no flicker)."""
        rows = list(rows)
        labels = list(self.query(Label))
        if len(labels) == 2 * len(rows):
            for index, (key, text) in enumerate(rows):
                labels[2 * index].update(_content(key))
                labels[2 * index + 1].update(_content(text))
            self._rows = rows
            return
        self._rows = rows
        self.remove_children()
        self.mount_all(
            widget
            for key, text in rows
            for widget in (
                Label(_content(key), classes="key-cell", markup=False),
                Label(_content(text), classes="text-cell", markup=False),
            )
        )

    def plain_text(self) -> str:
        """The rows as plain text (for tests and screen readers)."""
        return "\n".join(f"{_content(k).plain}  {_content(t).plain}" for k, t in self._rows)
