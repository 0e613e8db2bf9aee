"""What a command's result looks like: one registry, by the result's type.

Each output module lists the types it formats (``TEXT``, and ``JSON`` where ``--json`` adds
figures to the result's own fields); this module merges them and is the one way in for
``nunet-tui``'s printing of a result (cli/main.py). The output modules print through
output.py and never import this one, so there is no circle. Imported lazily: a command that
prints nothing does not pay for every formatter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from engine import api


@functools.cache
def _text() -> dict[type, Callable[[Any], str]]:
    from nunet_tui.cli import (
        data_output,
        doctor_output,
        gpu_output,
        job_output,
        node_output,
        reward_output,
    )

    return {
        **data_output.TEXT,
        **node_output.TEXT,
        **job_output.TEXT,
        **reward_output.TEXT,
        **gpu_output.TEXT,
        **doctor_output.TEXT,
    }


@functools.cache
def _json() -> dict[type, Callable[[Any, dict[str, Any]], None]]:
    from nunet_tui.cli import gpu_output

    return dict(gpu_output.JSON)


def _lookup(table: dict[type, Any], result: Any) -> Any:
    return next((table[cls] for cls in type(result).__mro__ if cls in table), None)


def to_text(result: Any) -> str:
    """A result as readable lines (its ``str`` where no output module formats its type)."""
    formatter = _lookup(_text(), result)
    return formatter(result) if formatter is not None else str(result)


def to_json(result: Any) -> dict[str, Any]:
    """A result as the JSON object ``--json`` prints: its fields, plus any figures its output
    module adds."""
    data = api.to_builtins(result)
    if not isinstance(data, dict):
        return {"result": data}
    if (extra := _lookup(_json(), result)) is not None:
        extra(result, data)
    return data
