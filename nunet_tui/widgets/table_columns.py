"""Which of a table's columns fit the terminal: the most useful first, shown in the table's
own order. A table wider than the screen hid what people look for (the Jobs list's cost,
the peers' CPU, RAM and GPUs at 80x24) behind dozens of presses of →."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

CELL_PADDING = 2  # DataTable's one cell of padding on each side


def fit(
    order: Sequence[str], widths: Mapping[str, int], kept_first: Sequence[str], width: int
) -> tuple[str, ...]:
    """The columns of ``order`` that fit ``width`` cells, taken in ``kept_first``'s order
    until one does not fit (never none: the first always), returned in ``order``'s order."""
    chosen: set[str] = set()
    used = 0
    for key in kept_first:
        need = widths[key] + CELL_PADDING
        if used + need > width and chosen:
            break
        chosen.add(key)
        used += need
    return tuple(key for key in order if key in chosen)


def used_width(columns: Sequence[str], widths: Mapping[str, int]) -> int:
    """The cells ``columns`` take, padding included."""
    return sum(widths[key] + CELL_PADDING for key in columns)
