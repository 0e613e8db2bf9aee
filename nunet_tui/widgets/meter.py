"""A one-line meter: ``RAM  ██████░░░░░░  4,000 / 16,000 MB``."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from nunet_tui.format import meter_bar, thousands


class Meter(Widget):
    """How much of ``total`` is taken by ``used``, as a bar that fills the width it is given."""

    DEFAULT_CSS = """
    Meter {
        height: 1;
        width: 1fr;
    }
    """

    used: reactive[int] = reactive(0)
    total: reactive[int] = reactive(0)

    def __init__(
        self,
        label: str,
        unit: str,
        *,
        label_width: int = 5,
        value_width: int = 0,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.label = label
        self.unit = unit
        self.label_width = label_width
        self.value_width = value_width  # > 0: values right-aligned, so stacked bars line up

    def set_values(self, used: int, total: int) -> None:
        self.used = used
        self.total = total

    def render(self) -> Content:
        value = f"{thousands(self.used)} / {thousands(self.total)} {self.unit}".rjust(
            self.value_width
        )
        label = self.label.ljust(self.label_width)
        bar_width = self.size.width - len(label) - len(value) - 2
        if bar_width < 4:
            return Content.assemble((label, "bold"), value)
        return Content.assemble(
            (label, "bold"), meter_bar(self.used, self.total, bar_width), "  ", value
        )
