"""The hardened systemd unit: the README shows the file as it is, and systemd rates it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "docs" / "systemd" / "nunet-tui.service"


def _settings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def test_the_readme_shows_the_unit_file_verbatim() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```ini\n(.*?)```", readme, flags=re.S)
    assert UNIT.read_text() in blocks


def test_the_unit_runs_the_daemon_unprivileged_and_confined() -> None:
    unit = _settings()
    assert unit["User"] == ["nunet"] and unit["ExecStart"][0].endswith(" daemon")
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "CapabilityBoundingSet": "",
        "UMask": "0077",
        "DevicePolicy": "closed",
        "RestrictSUIDSGID": "yes",
    }.items():
        assert unit.get(key) == [value], key
    # The daemon writes only its home, which systemd makes and hands to the user.
    assert unit["StateDirectory"] == ["nunet-tui"]
    assert "--home /var/lib/nunet-tui" in unit["ExecStart"][0]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_rates_the_unit_ok() -> None:
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", str(UNIT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    rated = re.search(r"Overall exposure level for \S+: ([0-9.]+)", done.stdout)
    assert rated is not None, done.stdout + done.stderr
    assert float(rated.group(1)) <= 2.0, done.stdout
