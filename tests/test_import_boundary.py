"""The engine knows nothing of the screen; the app knows nothing of libp2p, docker, pycardano."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_engine_never_imports_textual_or_the_app() -> None:
    loaded = _modules_after(
        "import engine.facade, engine.connect, engine.daemon, engine.control, engine.node"
    )
    forbidden = {m for m in loaded if m.split(".")[0] in {"textual", "nunet_tui"}}
    assert not forbidden, forbidden


def test_app_and_cli_import_no_network_container_or_chain_library() -> None:
    loaded = _modules_after("import nunet_tui.app, nunet_tui.cli.main")
    tops = {m.split(".")[0] for m in loaded}
    assert not tops & {"libp2p", "docker", "pycardano"}, tops & {"libp2p", "docker", "pycardano"}
