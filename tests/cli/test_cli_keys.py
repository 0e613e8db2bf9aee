"""``nunet-tui keys``: the TUI's bindings by id, as config.toml's ``[keys]`` maps them."""

from __future__ import annotations

import json
from pathlib import Path

from engine.config import Paths
from tests.conftest import run_cli


def test_keys_lists_every_id_with_its_key_as_mapped(tmp_path: Path) -> None:
    paths = Paths.for_home(tmp_path)
    paths.ensure()
    paths.config_file.write_text('[keys]\napp.jobs = "J"\n')
    done = run_cli("keys", "--json", home=paths)
    assert done.returncode == 0, done.stderr
    rows = {row["id"]: row for row in json.loads(done.stdout)["keys"]}
    assert rows["app.jobs"] == {
        "id": "app.jobs",
        "key": "J",
        "default": "j",
        "description": "Jobs you bought and jobs you run",
    }
    assert rows["table.sort_next"]["key"] == "o"
    text = run_cli("keys", home=paths).stdout
    assert any(line.split()[:2] == ["app.jobs", "J"] for line in text.splitlines())


def test_a_bad_keys_entry_is_one_line_and_exit_1(tmp_path: Path) -> None:
    paths = Paths.for_home(tmp_path)
    paths.ensure()
    paths.config_file.write_text('[keys]\njobs.opn = "space"\n')
    done = run_cli("keys", home=paths)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert '"jobs.opn"' in line and 'did you mean "jobs.open"' in line
