from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import Paths, load_settings
from engine.errors import EngineError

PEER = "/p2p/12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5"


def test_home_puts_everything_in_one_folder(tmp_path: Path) -> None:
    paths = Paths.for_home(tmp_path / "h")
    paths.ensure()
    for path in (paths.config_file, paths.database, paths.identity_key, paths.log_file):
        assert (tmp_path / "h") in path.parents
    assert paths.state_dir.stat().st_mode & 0o077 == 0


def test_nunet_home_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUNET_HOME", str(tmp_path / "env-home"))
    assert Paths.for_home().home == (tmp_path / "env-home").resolve()


def test_toml_then_environment_overrides(tmp_path: Path) -> None:
    paths = Paths.for_home(tmp_path)
    paths.ensure()
    paths.config_file.write_text(
        'log_level = "debug"\n[jobs]\nslots = 3\n[machine]\nmemory_mb = 9000\n'
    )
    settings = load_settings(
        paths,
        {
            "NUNET_JOBS_SLOTS": "2",
            "NUNET_NETWORK_BOOTSTRAP": f"/ip4/1.2.3.4/tcp/1{PEER}, /ip4/5.6.7.8/tcp/2{PEER}",
        },
    )
    assert settings.log_level == "debug"
    assert settings.jobs.slots == 2
    assert settings.machine.memory_mb == 9000
    assert settings.network.bootstrap == [
        f"/ip4/1.2.3.4/tcp/1{PEER}",
        f"/ip4/5.6.7.8/tcp/2{PEER}",
    ]


@pytest.mark.parametrize(
    ("toml", "env", "message"),
    [
        ("log_level = [", {}, "not valid TOML"),
        ("[jobs]\nslots = 'many'\n", {}, r"\$\.jobs\.slots"),
        ("[network]\nlisten = 5\n", {}, r"\$\.network\.listen"),
        ("surprise = 1\n", {}, "surprise"),
        ("", {"NUNET_JOBS_SLOTS": "zero"}, r"\$\.jobs\.slots"),
        ("", {"NUNET_JOBS_SLOTS": "0"}, "at least 1"),
        ("", {"NUNET_LOG_LEVEL": "loud"}, "log_level must be one of"),
        ("", {"NUNET_NETWORK_LISTEN": "/ip4/1.2.3/tcp/1"}, "not a multiaddr"),
        ("", {"NUNET_NETWORK_BOOTSTRAP": "/ip4/127.0.0.1/tcp/9000"}, "names no peer"),
    ],
)
def test_bad_settings_are_clear_errors(
    tmp_path: Path, toml: str, env: dict[str, str], message: str
) -> None:
    paths = Paths.for_home(tmp_path)
    paths.ensure()
    paths.config_file.write_text(toml)
    with pytest.raises(EngineError, match=message):
        load_settings(paths, env)


def test_long_home_gets_a_short_socket_path(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    paths = Paths.for_home(deep)
    assert len(str(paths.control_socket)) < 108
    assert paths.control_socket == Paths.for_home(deep).control_socket
