"""``[fleet] rigs`` (engine/config.py ``FleetSettings``): each rig by exactly one of home,
socket or url (+ token_file); a bad entry is one line naming the rig and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import FleetSettings, Paths, load_settings
from engine.errors import EngineError


def _load(tmp_path: Path, toml: str) -> FleetSettings:
    paths = Paths.for_home(tmp_path / "home")
    paths.config_dir.mkdir(parents=True)
    paths.config_file.write_text(toml)
    return load_settings(paths, environ={}).fleet


def test_three_ways_to_reach_a_rig(tmp_path: Path) -> None:
    fleet = _load(
        tmp_path,
        '[fleet]\ntimeout_s = 2\nrigs = [{ name = "rig-1", home = "/srv/rig-1" }, '
        '{ name = "rig-2", socket = "/tmp/rig-2.sock" }, '
        '{ name = "rig-3", url = "http://127.0.0.1:9999", token_file = "rig-3-token" }]\n',
    )
    assert [rig.name for rig in fleet.rigs] == ["rig-1", "rig-2", "rig-3"]
    assert fleet.timeout_s == 2
    assert _load(tmp_path / "empty", "").rigs == []


@pytest.mark.parametrize(
    ("rigs", "words"),
    [
        ('{ name = "a" }', "gives none of them: give exactly one of home"),
        ('{ name = "a", home = "/x", socket = "/y" }', "gives home and socket"),
        ('{ name = "a", url = "http://x" }', "has a url but no token_file"),
        ('{ name = "a", home = "/x", token_file = "t" }', "has a token_file but no url"),
        ('{ name = "a", home = "/x" }, { name = "a", home = "/y" }', "used twice"),
        ('{ name = "a b", home = "/x" }', "fleet.rigs[0].name"),
        ('{ name = "a", url = "ftp://x", token_file = "t" }', "an http:// or https:// URL"),
        ('{ name = "a", home = "/x", colour = "red" }', "unknown setting fleet.rigs[0].colour"),
    ],
)
def test_a_bad_rig_is_one_line(tmp_path: Path, rigs: str, words: str) -> None:
    with pytest.raises(EngineError) as caught:
        _load(tmp_path, f"[fleet]\nrigs = [{rigs}]\n")
    assert words in caught.value.message
    assert "\n" not in caught.value.message


def test_at_most_64_rigs(tmp_path: Path) -> None:
    many = ", ".join(f'{{ name = "r{i}", home = "/h{i}" }}' for i in range(65))
    with pytest.raises(EngineError, match=r"fleet\.rigs"):
        _load(tmp_path, f"[fleet]\nrigs = [{many}]\n")
