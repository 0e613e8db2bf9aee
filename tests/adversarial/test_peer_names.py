"""Hostile display names (issue 22): a provider's name is its own words, signed in its advert.

Against a real consumer daemon, hostile providers advertise names that would clear the
screen, reverse what follows (U+202E), paint the row (Rich markup), overflow the table, or
copy an honest provider's name. None is shown as such: a name against the rule is dropped
(the provider still listed, by its id), one over the wire bound makes its advert malformed,
markup stays literal text, and two providers with one name are told apart by their ids,
which every listing shows with the name (engine/domain/peer_names.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nacl.signing import SigningKey

from engine.domain import wire
from engine.identity import Identity
from tests.adversarial.hostile import HostilePeer
from tests.conftest import TEST_ADDRESS, run_cli
from tests.daemon_harness import Daemon, wait_for

RAW = "\x1b\u202e\u202c\x07"  # none may reach the terminal
NASTY = "\x1b[2Jred\u202eevil\u202c\x07"  # 15 characters: within the wire bound
OVERLONG = "O" * 40
TWIN = "Ana's rig"
MARKUP = "[red]x[/]"


def _advert(seed: bytes, name: str) -> tuple[bytes, wire.Advert]:
    peer_id = Identity(SigningKey(seed)).peer_id
    advert = wire.Advert(
        peer_id=peer_id,
        channel="nunet-test",
        cpu_mhz=8000,
        ram_mb=16000,
        prices={"low": 1.0},
        executors=("process",),
        version="hostile",
        display_name=name,
    )
    return seed, advert


def _peers(victim: Daemon) -> dict[str, Any]:
    return {p["peer_id"]: p for p in victim.cli("peer", "list")["peers"]}


def test_hostile_names_are_dropped_or_literal_and_never_shown_without_the_id(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    victim = daemons("consumer", 61)
    boot = victim.addrs()
    honest = daemons(
        "honest", 62, bootstrap=boot[0], extra_toml=f'[provider]\ndisplay_name = "{TWIN}"\n'
    )
    honest.cli("onboard", "-m", "5000", "-c", "4000", "-a", TEST_ADDRESS, "-n", "nunet-test")
    names = {
        "nasty": _advert(b"\x61" * 32, NASTY),
        "twin": _advert(b"\x62" * 32, TWIN),
        "markup": _advert(b"\x63" * 32, MARKUP),
        "overlong": _advert(b"\x64" * 32, OVERLONG),
    }
    ids = {role: advert.peer_id for role, (_, advert) in names.items()}
    for seed, advert in names.values():
        hostile(seed=seed, bootstrap=boot, advert=advert)

    def all_seen() -> dict[str, Any] | None:
        peers = _peers(victim)
        adverts_in = [honest.peer_id, ids["nasty"], ids["twin"], ids["markup"]]
        if not all(
            pid in peers and (peers[pid]["resources"] or {}).get("executors") for pid in adverts_in
        ):
            return None
        overlong = peers.get(ids["overlong"])
        # Its heartbeats list it; its advert (the name over the bound) never got in.
        if overlong is None or overlong["resources"] is None:
            return None
        return peers

    peers = wait_for(all_seen, "the victim never listed every provider", timeout=40)
    assert peers[honest.peer_id]["display_name"] == TWIN
    assert peers[ids["twin"]]["display_name"] == TWIN
    assert peers[ids["markup"]]["display_name"] == MARKUP
    assert peers[ids["nasty"]]["display_name"] == ""  # dropped; the advert itself kept
    assert peers[ids["overlong"]]["display_name"] == ""
    assert peers[ids["overlong"]]["resources"]["executors"] == []  # its advert was refused

    listing = run_cli("peer", "list", home=victim.home)
    assert listing.returncode == 0, listing.stderr
    text = listing.stdout
    assert not [hex(ord(ch)) for ch in RAW if ch in text]
    assert "evil" not in text  # the dropped name, in no form
    assert "O" * 33 not in text
    # The twins: one name, two lines, each with its own whole id.
    assert f"  {TWIN} · {honest.peer_id}  " in text
    assert f"  {TWIN} · {ids['twin']}  " in text
    assert f"  {MARKUP} · {ids['markup']}  " in text  # literal, not a colour
    assert f"  {ids['nasty']}  " in text  # nameless: its id alone
    # --json says the same, escaped.
    raw_json = run_cli("peer", "list", "--json", home=victim.home).stdout
    assert not [hex(ord(ch)) for ch in RAW if ch in raw_json]
