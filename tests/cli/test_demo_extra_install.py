"""scripts/install_demo_extra.sh (start.sh's background install of the examples'
frameworks) ends its log with "done" only when every step worked: it wrote "done" after a
failed pip too, and the demo then told the app the frameworks were in."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nunet_tui.cli.demo import _extra_state
from tests.conftest import REPO


def _fake_python(tmp_path: Path, fail_on: str) -> Path:
    """A "python" whose `-m pip install` fails when its arguments contain ``fail_on``."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *{fail_on}*) echo "ERROR: no matching distribution" >&2; exit 1;; esac\n'
        'echo "installed $*"\n'
    )
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize(
    ("fail_on", "state"),
    [("scikit-learn", "failed"), ("[demo]", "failed"), ("never-matches", "done")],
)
def test_the_log_says_done_only_when_every_step_worked(
    tmp_path: Path, fail_on: str, state: str
) -> None:
    log = tmp_path / "demo-extra.log"
    python = _fake_python(tmp_path, fail_on)
    subprocess.run(
        ["bash", str(REPO / "scripts/install_demo_extra.sh"), str(log)],
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(python)},
        check=True,
        timeout=30,
    )
    assert _extra_state(log) == state, log.read_text()
    if state == "failed":
        assert "no matching distribution" in log.read_text()
        assert "done" not in log.read_text().splitlines()
