"""``nunet-tui keys``: every key binding of the TUI by id, its key as config.toml's ``[keys]``
maps it, and what it does: what to write in ``[keys]``.

Textual is imported only here, inside the command (nunet_tui/keymap.py walks the screens'
bindings): the CLI's other commands never load it.
"""

from __future__ import annotations

from engine.config import Paths, load_settings
from nunet_tui.cli import output


def run_keys(paths: Paths, as_json: bool) -> int:
    """Print the keymap; a bad ``[keys]`` entry is a line on stderr each, and exit 1."""
    from nunet_tui.keymap import check_remaps, key_rows

    remaps, problems = check_remaps(load_settings(paths, addresses=False).keys)
    rows = key_rows(remaps)
    if as_json:
        output.show_json(
            {
                "keys": [
                    {"id": i, "key": key, "default": default, "description": text}
                    for i, key, default, text in rows
                ],
                "problems": problems,
            }
        )
    else:
        wide_id = max(len(i) for i, *_ in rows)
        wide_key = max(len(key) for _, key, *_ in rows)
        lines = [f"{'ID':<{wide_id}}  {'KEY':<{wide_key}}  DOES"]
        for binding_id, key, default, text in rows:
            said = text if key == default else f"{text} (default {default})"
            lines.append(f"{binding_id:<{wide_id}}  {key:<{wide_key}}  {said}")
        output.show("\n".join(lines))
    for problem in problems:
        output.show_error(problem)
    return 1 if problems else 0
