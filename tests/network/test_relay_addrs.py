"""Circuit addresses in adverts: never dialled as TCP, enough to list a peer behind NAT,
and only well-formed ones for the advertising peer are used (engine/network/relay.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import NetworkSettings, Paths, load_settings
from engine.domain import wire
from engine.errors import EngineError
from engine.network.addrs import dialable, is_usable
from engine.network.relay import circuit_addrs, relay_candidates, relay_of

PEER = "12D3KooWHQybjJddHJE61nFuqKGVPSasS2zDmrBAUiCwpXkYFE4m"
RELAY = "12D3KooWFYmHU4hbB8wrWbKUn2uW8NmNvsfrCFXtNoc4y85MEKZH"
OTHER = "12D3KooWSbmRDNRBMeufFMWpC9wwPrZVjVTLKuX2vhmn17NeZ828"
CIRCUIT = f"/ip4/198.18.0.2/tcp/4001/p2p/{RELAY}/p2p-circuit/p2p/{PEER}"


def test_a_circuit_is_not_a_tcp_address_but_makes_an_advert_usable() -> None:
    assert dialable(PEER, [CIRCUIT]) == []
    assert is_usable(wire.Advert(peer_id=PEER, channel="c", addrs=(CIRCUIT,)))
    # A circuit to someone else does not make this peer's advert usable.
    elsewhere = CIRCUIT.replace(PEER, OTHER)
    assert not is_usable(wire.Advert(peer_id=PEER, channel="c", addrs=(elsewhere,)))


def test_only_well_formed_circuits_for_the_peer_are_used() -> None:
    bad = [
        CIRCUIT.replace(PEER, OTHER),  # to another peer
        f"/ip4/198.18.0.2/tcp/4001/p2p-circuit/p2p/{PEER}",  # no relay peer id
        f"/ip4/198.18.0.2/tcp/4001/p2p/{RELAY}/p2p-circuit/p2p/{PEER}/extra",
        "/p2p-circuit/p2p/not-a-peer",
        f"/ip4/198.18.0.2/tcp/4001/p2p/{RELAY}",  # a plain address
    ]
    found = circuit_addrs([*bad, CIRCUIT], PEER)
    assert [str(a) for a in found] == [CIRCUIT]
    assert str(relay_of(found[0])) == RELAY


def test_relays_come_from_the_config_and_the_bootstrap_list() -> None:
    boot = f"/ip4/198.18.0.2/tcp/4001/p2p/{RELAY}"
    mine = f"/ip4/198.18.0.9/tcp/4001/p2p/{OTHER}"
    settings = NetworkSettings(bootstrap=[boot], relays=[mine])
    assert relay_candidates(settings) == [mine, boot]
    no_bootstrap = NetworkSettings(bootstrap=[boot], relays=[mine], relay_via_bootstrap=False)
    assert relay_candidates(no_bootstrap) == [mine]


def test_a_relay_without_a_peer_id_is_a_config_error(tmp_path: Path) -> None:
    paths = Paths.for_home(tmp_path)
    paths.ensure()
    paths.config_file.write_text('[network]\nrelays = ["/ip4/198.18.0.2/tcp/4001"]\n')
    with pytest.raises(EngineError, match=r"network\.relays.*names no peer"):
        load_settings(paths)
