"""A scripting command against a daemon loads only what it needs: no trio, no Textual, no
engine (each is a tenth of a second or more of every `nunet-tui … --json` call, which scripts
and the end-to-end tests make by the thousand)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

HEAVY = ("trio", "textual", "libp2p", "pycardano", "asyncio", "netaddr", "engine.facade")


def test_the_parser_and_the_attached_client_load_no_heavy_module() -> None:
    code = (
        "import sys\n"
        "from nunet_tui.cli import main\n"
        "import engine.connect, engine.control_client, engine.logsetup\n"
        "main.build_parser(); main.runners()\n"
        f"print(__import__('json').dumps(sorted(m for m in sys.modules if m in {HEAVY!r})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert json.loads(out.stdout) == []
