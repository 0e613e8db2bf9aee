"""The engine knows nothing of the screen; the app knows nothing of libp2p, docker, pycardano.

What may import what is [tool.importlinter] in pyproject.toml (scripts/test.sh runs
``lint-imports`` too): that covers every import written in the code, lazy ones and those for
type checking included. What is loaded when is a separate question, checked here in a fresh
interpreter: the app's start-up must not load the network, container or chain libraries.
"""

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


def test_the_import_contracts_are_kept() -> None:
    """Layers, no Textual or app in the engine, no node in the subsystems, no command line in
    screens and widgets, no screens in widgets (the report is printed on failure).

    In a child process: import-linter's CLI runs ``logging.config.dictConfig``, which disables
    every logger that exists already (the "nunet" ones of earlier tests went silent)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(no_cache=True, no_logo=True))",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_app_and_cli_import_no_network_container_or_chain_library() -> None:
    loaded = _modules_after("import nunet_tui.app, nunet_tui.cli.main")
    tops = {m.split(".")[0] for m in loaded}
    assert not tops & {"libp2p", "docker", "pycardano"}, tops & {"libp2p", "docker", "pycardano"}
