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
        ("[jobs]\nslots = 'many'\n", {}, r"jobs\.slots = 'many' \(in .*whole number from 1 to"),
        ("[network]\nlisten = 5\n", {}, r"network\.listen = 5 .*a list of at most 32"),
        ("surprise = 1\n", {}, "unknown setting surprise in .*log_level, ml_images"),
        ("[jobs]\nsurprise = 1\n", {}, "unknown setting jobs.surprise in .*slots"),
        ("", {"NUNET_JOBS_SLOTS": "zero"}, r"jobs\.slots = 'zero' \(from NUNET_JOBS_SLOTS\)"),
        ("", {"NUNET_JOBS_SLOTS": "0"}, "jobs.slots = 0 .*from 1 to"),
        ("", {"NUNET_LOG_LEVEL": "loud"}, "log_level must be one of"),
        ("", {"NUNET_NETWORK_LISTEN": "/ip4/1.2.3/tcp/1"}, "not a multiaddr"),
        ("", {"NUNET_NETWORK_BOOTSTRAP": "/ip4/127.0.0.1/tcp/9000"}, "names no peer"),
        # py-libp2p would build its QUIC transport for it (docs/network-nat.md, "QUIC").
        ("", {"NUNET_NETWORK_LISTEN": "/ip4/0.0.0.0/udp/9000/quic-v1"}, "not a TCP address"),
        ("[network]\nlisten = ['/ip4/0.0.0.0/tcp/9000/ws']\n", {}, "listens on TCP only"),
        # The daemon divided by this: 0 spun its heartbeat loop.
        ("[network]\nheartbeat_interval_s = 0\n", {}, r"heartbeat_interval_s = 0 .*0\.1 to"),
        ("[network]\nheartbeat_interval_s = nan\n", {}, "heartbeat_interval_s = nan"),
        ("[network]\nchannel = 'Main Net'\n", {}, r"network\.channel .*a-z, 0-9"),
        ("[jobs]\nprices = {low = -1.0}\n", {}, r"jobs\.prices .*number from 0 to"),
        ("[jobs]\nprices = {low = nan}\n", {}, r"jobs\.prices\.low = nan .*from 0 to"),
        ("[jobs]\nprices = {high = inf}\n", {}, r"jobs\.prices\.high = inf"),
        ("[jobs]\ncheckpoint_interval_s = -1\n", {}, r"checkpoint_interval_s = -1 .*from 0"),
        ("[jobs]\nprovider_grace_s = -inf\n", {}, "provider_grace_s = -inf"),
        ("[jobs]\nexecutors = ['podman']\n", {}, r"executors\[0\] = 'podman'.*'docker'"),
        ("[machine]\ncpu_cores = 0\n", {}, r"machine\.cpu_cores = 0 .*1 to 65,536, or left"),
        ("[machine]\nhostname = '" + "h" * 300 + "'\n", {}, "at most 253 characters"),
        ("[payments]\ndeadline_margin_s = 5\n", {}, "deadline_margin_s = 5 .*60 to"),
        ("[payments]\nrequire_payment = 'maybe'\n", {}, "require_payment .*true or false"),
        ("[payments]\nsettle_interval_s = 0\n", {}, "settle_interval_s = 0 .*1 to 3,600"),
        ("", {"NUNET_PAYMENTS_REQUIRE_PAYMENT": "maybe"}, "true or false"),
        ("", {"NUNET_NETWORK_HEARTBEAT_INTERVAL_S": "inf"}, r"\(from NUNET_NETWORK_HEART"),
        ("", {"NUNET_PAYMENTS_DEADLINE_MARGIN_S": "5"}, "deadline_margin_s = 5 .*60 to"),
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", {}, "nested too deeply"),  # RecursionError
        ("a = " + "[" * 40 + "]" * 40 + "\n", {}, "nested too deeply"),
        ("network = 5\n", {"NUNET_NETWORK_CHANNEL": "x"}, "network = 5 .*a table"),
        # [keys]: text to text; which ids and keys mean something is the TUI's to say.
        ("keys = 'q'\n", {}, "keys = 'q' .*a table"),
        ("[keys]\n'app.quit' = 3\n", {}, r"keys = .*app\.quit.*text of at least 1"),
        ("[keys]\n'app.quit' = ''\n", {}, r"keys = .*text of at least 1"),
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


def test_every_setting_has_a_range() -> None:
    """Every number is bounded and every text and list has a length limit: a NaN or a 10 MB
    string can never be a valid setting."""
    import msgspec.inspect as mi

    from engine.config import Settings

    def walk(kind: mi.Type, where: str) -> None:
        if isinstance(kind, mi.Metadata):
            kind = kind.type
        if isinstance(kind, mi.UnionType):
            for member in kind.types:
                walk(member, where)
        elif isinstance(kind, mi.StructType):
            for field in kind.fields:
                walk(field.type, f"{where}.{field.name}")
        elif isinstance(kind, mi.IntType | mi.FloatType):
            assert (kind.ge, kind.gt) != (None, None) and (kind.le, kind.lt) != (None, None), where
        elif isinstance(kind, mi.StrType | mi.ListType | mi.DictType):
            if not where.startswith("$.jobs.fetch_allow_networks"):  # fetch_policy parses it
                assert kind.max_length is not None, where
            if isinstance(kind, mi.ListType):
                walk(kind.item_type, f"{where}[]")
            if isinstance(kind, mi.DictType):
                walk(kind.key_type, f"{where}{{key}}")
                walk(kind.value_type, f"{where}{{}}")

    walk(mi.type_info(Settings), "$")


@pytest.mark.parametrize(
    ("env", "section", "field", "value"),
    [
        # An Annotated[int, Meta] field: "expected int, got str" before.
        ({"NUNET_PAYMENTS_DEADLINE_MARGIN_S": "120"}, "payments", "deadline_margin_s", 120),
        ({"NUNET_NETWORK_HEARTBEAT_INTERVAL_S": " 2.5 "}, "network", "heartbeat_interval_s", 2.5),
        ({"NUNET_MACHINE_CPU_CORES": "4"}, "machine", "cpu_cores", 4),  # Optional[Annotated]
        ({"NUNET_MACHINE_CPU_CORES": ""}, "machine", "cpu_cores", None),
        ({"NUNET_JOBS_PRICES": "low=1, high=7.5"}, "jobs", "prices", {"low": 1.0, "high": 7.5}),
        ({"NUNET_JOBS_EXECUTORS": "process,docker"}, "jobs", "executors", ["process", "docker"]),
        ({"NUNET_PAYMENTS_REQUIRE_PAYMENT": "off"}, "payments", "require_payment", False),
        ({"NUNET_PAYMENTS_REQUIRE_PAYMENT": "Yes"}, "payments", "require_payment", True),
        ({"NUNET_JOBS_CHECKPOINT_INTERVAL_S": "0"}, "jobs", "checkpoint_interval_s", 0.0),
        ({"NUNET_PAYMENTS_SETTLE_INTERVAL_S": "2"}, "payments", "settle_interval_s", 2.0),
    ],
)
def test_environment_overrides_of_every_type(
    tmp_path: Path, env: dict[str, str], section: str, field: str, value: object
) -> None:
    paths = Paths.for_home(tmp_path)
    paths.ensure()
    settings = load_settings(paths, env)
    assert getattr(getattr(settings, section), field) == value


def test_a_bad_config_is_left_as_it_was(tmp_path: Path) -> None:
    paths = Paths.for_home(tmp_path)
    paths.ensure()
    paths.config_file.write_text("[jobs]\nprices = {low = nan}\n")
    before = paths.config_file.read_bytes()
    with pytest.raises(EngineError) as caught:
        load_settings(paths, {})
    assert "\n" not in caught.value.message
    assert paths.config_file.read_bytes() == before


def test_an_oversized_config_is_refused_unread(tmp_path: Path) -> None:
    paths = Paths.for_home(tmp_path)
    paths.ensure()
    paths.config_file.write_text("# " + "x" * (1 << 20) + "\n")
    with pytest.raises(EngineError, match="over 1 MiB"):
        load_settings(paths, {})


@pytest.mark.parametrize("kind", ["file", "below a file", "proc"])
def test_a_home_that_cannot_be_one_is_a_clear_error(tmp_path: Path, kind: str) -> None:
    file = tmp_path / "plain"
    file.write_text("not a folder")
    home = {"file": file, "below a file": file / "home", "proc": Path("/proc/nunet-home")}[kind]
    with pytest.raises(EngineError, match=r"give --home .*a folder you can write"):
        Paths.for_home(home).ensure()
    assert file.read_text() == "not a folder"


def test_keys_are_binding_ids_to_key_text_quoted_or_not(tmp_path: Path) -> None:
    """``jobs.open = "space"`` unquoted is a table in TOML; it is the id jobs.open all the
    same. The engine keeps the text; the TUI checks it (nunet_tui/keymap.py)."""
    paths = Paths.for_home(tmp_path)
    paths.ensure()
    paths.config_file.write_text(
        '[keys]\njobs.open = "space"\n"app.quit" = "ctrl+x"\n"no.such" = "nokey"\n'
    )
    keys = load_settings(paths, {}).keys
    assert keys == {"jobs.open": "space", "app.quit": "ctrl+x", "no.such": "nokey"}
