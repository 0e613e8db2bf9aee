"""Peer display names (issue 22): the rule, the config key, the signed advert, the label."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from nacl.signing import SigningKey

from engine.config import Paths, load_settings
from engine.domain import wire
from engine.domain.peer_names import (
    MAX_DISPLAY_NAME,
    display_name_problem,
    normalise,
    peer_label,
    received_name,
)
from engine.errors import EngineError
from engine.identity import Identity
from engine.network import adverts

ALICE = Identity(SigningKey(b"\x01" * 32))
PEER = "12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5"

GOOD = ["", "alice", "Ana's rig #2", "[red]x[/]", "école", "GPU 東京", "x" * MAX_DISPLAY_NAME]
BAD = [
    "x" * (MAX_DISPLAY_NAME + 1),
    "\x1b[31mred",  # an ANSI escape
    "evil\u202egnp.exe",  # a bidi override
    "iso\u2066late",  # a bidi isolate
    "zero\u200bwidth",  # a format character (Cf)
    "two\nlines",
    "sep\u2028arator",
    "del\x7f",
    "c1\x9b31m",
    " lead",
    "trail ",
    "nb\u00a0sp",  # a space other than U+0020 is not printable to Python
    "alice · 12D3KooW…KPH5",  # a fake second id after the name
]


@pytest.mark.parametrize("name", GOOD)
def test_names_within_the_rule_pass(name: str) -> None:
    assert display_name_problem(name) is None
    assert received_name(name) == name


@pytest.mark.parametrize("name", BAD)
def test_names_against_the_rule_are_refused_and_dropped_on_receipt(name: str) -> None:
    assert display_name_problem(normalise(name)) is not None
    assert received_name(name) == ""


def test_length_counts_characters_after_nfc() -> None:
    # 32 letters, each an "e" and a combining acute accent: 64 code points, 32 once composed.
    decomposed = "e\u0301" * MAX_DISPLAY_NAME
    assert display_name_problem(normalise(decomposed)) is None
    # On the wire a name must already be NFC: the decomposed form is dropped, not shown.
    assert received_name(decomposed) == ""


def test_the_label_always_carries_the_peer_id() -> None:
    assert peer_label(PEER) == "12D3KooW…KPH5"
    assert peer_label(PEER, "alice") == "alice · 12D3KooW…KPH5"
    assert peer_label(PEER, "alice", full_id=True) == f"alice · {PEER}"
    assert peer_label(PEER, "[red]x[/]") == "[red]x[/] · 12D3KooW…KPH5"  # literal, for Content
    assert peer_label(PEER, "a" * 20, name_width=16) == "a" * 15 + "… · 12D3KooW…KPH5"
    # A bad name that slipped past the rule is still one line of visible escapes.
    assert peer_label(PEER, "x\x1b[2J\u202e") == "x\\x1b[2J\\u202e · 12D3KooW…KPH5"
    other = "12D3KooWLzcGxVwG4uuHdzLmP8SU3bcmQjDmvkqUmp3o1rNDt8VY"
    assert peer_label(PEER, "same") != peer_label(other, "same")


def _settings(tmp_path: Path, toml: str, environ: dict[str, str] | None = None) -> str:
    paths = Paths.for_home(tmp_path)
    paths.config_dir.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text(toml, encoding="utf-8")
    return load_settings(paths, environ or {}).provider.display_name


def test_config_keeps_a_good_name_in_nfc(tmp_path: Path) -> None:
    assert _settings(tmp_path, "") == ""
    assert _settings(tmp_path, '[provider]\ndisplay_name = "e\\u0301cole"\n') == "\u00e9cole"
    env = {"NUNET_PROVIDER_DISPLAY_NAME": "rig 7"}
    assert _settings(tmp_path, "", env) == "rig 7"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('"' + "x" * 33 + '"', "33 characters, at most 32"),
        ('"red\\u001b[31m"', "U+001B"),
        ('"evil\\u202e"', "U+202E"),
        ('" lead"', "starts or ends with a space"),
    ],
)
def test_config_refuses_a_bad_name_in_one_line(tmp_path: Path, value: str, why: str) -> None:
    with pytest.raises(EngineError) as caught:
        _settings(tmp_path, f"[provider]\ndisplay_name = {value}\n")
    message = caught.value.message
    assert "\n" not in message and "\x1b" not in message and "\u202e" not in message
    assert message.startswith("bad setting provider.display_name = ")
    assert "at most 32 printable characters" in message and why in message


def test_config_names_the_variable_that_set_a_bad_name(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="from NUNET_PROVIDER_DISPLAY_NAME"):
        _settings(tmp_path, "", {"NUNET_PROVIDER_DISPLAY_NAME": "tab\there"})


def _sealed(name: str) -> bytes:
    base = wire.Advert(peer_id="", channel="", cpu_mhz=1000, display_name=name)
    addrs = (f"/ip4/127.0.0.1/tcp/4001/p2p/{ALICE.peer_id}",)
    stamped = adverts.stamp(base, peer_id=ALICE.peer_id, channel="ch", seq=1, addrs=addrs, ttl_s=60)
    return wire.seal(ALICE, "advert", stamped)


def test_a_signed_name_arrives_and_a_bad_one_is_dropped_with_the_advert_kept() -> None:
    assert adverts.verify_advert(_sealed("alice")).display_name == "alice"
    opened = adverts.verify_advert(_sealed("evil\u202egnp"))
    assert opened.display_name == "" and opened.cpu_mhz == 1000
    # The DHT validator takes the record as it was signed (the name is dropped on use).
    adverts.AdvertValidator().validate(adverts.advert_key("ch", ALICE.peer_id), _sealed("x\x1b"))


def test_a_name_over_the_wire_bound_makes_the_advert_malformed() -> None:
    with pytest.raises(wire.Malformed, match="display_name"):
        adverts.verify_advert(_sealed("x" * (MAX_DISPLAY_NAME + 1)))


def test_an_advert_without_a_name_encodes_as_before() -> None:
    # omit_defaults: older peers, which refuse unknown fields, still read a nameless advert.
    plain = wire.Advert(peer_id="p", channel="c")
    assert b"display_name" not in msgspec.msgpack.encode(plain)
    assert b"display_name" in msgspec.msgpack.encode(
        wire.Advert(peer_id="p", channel="c", display_name="a")
    )
