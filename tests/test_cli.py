"""The scripting commands, run as a user runs them: a fresh process each time."""

from __future__ import annotations

import json

from engine.config import Paths
from tests.conftest import TEST_ADDRESS, run_cli

MAINNET_ADDRESS = (
    "addr1qx2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3n0d3vllmyqwsx5wktcd8cc3sq835lu7drv2x"
    "wl2wywfgse35a3x"
)


def _json(*args: str, home: Paths) -> dict[str, object]:
    result = run_cli(*args, "--json", home=home)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_capacity_views(node_home: Paths) -> None:
    full = _json("capacity", "--full", home=node_home)
    assert {"cpu_cores", "cpu_mhz", "memory_mb", "disk_mb", "gpus"} <= full.keys()
    assert full["cpu_mhz"] == 2 * 2500 and full["memory_mb"] == 16000
    available = _json("capacity", "--available", home=node_home)
    assert available["view"] == "available"
    assert 0 < int(available["memory_mb"]) <= 16000  # type: ignore[call-overload]
    onboarded = _json("capacity", "--onboarded", home=node_home)
    assert onboarded["cpu_mhz"] == 0 and onboarded["memory_mb"] == 0


def test_onboard_lifecycle(node_home: Paths) -> None:
    info = _json("info", home=node_home)
    assert info["onboarded"] is None and str(info["peer_id"]).startswith("12D3KooW")
    ob = _json("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS, "-l", home=node_home)
    assert ob["state"] == "active" and ob["local_discovery"] is True
    info = _json("info", home=node_home)
    assert info["onboarded"]["memory_mb"] == 8000  # type: ignore[index]
    assert info["onboarded"]["channel"] == "nunet-test"  # type: ignore[index]
    assert info["onboarded"]["address"] == TEST_ADDRESS  # type: ignore[index]
    assert _json("capacity", "--onboarded", home=node_home)["cpu_mhz"] == 4000
    assert _json("resource-config", "-m", "9000", "-c", "4500", home=node_home)["memory_mb"] == 9000
    assert _json("pause", home=node_home)["state"] == "paused"
    assert _json("resume", home=node_home)["state"] == "active"
    assert _json("offboard", home=node_home)["message"].startswith("offboarded")  # type: ignore[union-attr]
    assert _json("info", home=node_home)["onboarded"] is None


def test_peer_self_is_stable(node_home: Paths) -> None:
    first = _json("peer", "self", home=node_home)["peer_id"]
    assert first == _json("peer", "self", home=node_home)["peer_id"]
    assert str(first).startswith("12D3KooW")


def test_errors_are_one_line_and_keep_state(node_home: Paths) -> None:
    assert (
        run_cli(
            "onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS, home=node_home
        ).returncode
        == 0
    )
    cases = [
        (["onboard", "-m", "99000", "-c", "4000", "-a", TEST_ADDRESS], "memory"),
        (["onboard", "-m", "8000", "-c", "1500", "-a", TEST_ADDRESS], "2,000 MHz"),
        (["onboard", "-m", "8000", "-c", "4000", "-a", MAINNET_ADDRESS], "mainnet"),
        (["onboard", "-m", "8000", "-c", "4000", "-a", "addr_test1qqqq"], "address"),
        (["onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS, "-C"], "10,000 MB"),
        (["resource-config", "-m", "100000", "-c", "4000"], "memory"),
    ]
    for args, needle in cases:
        result = run_cli(*args, home=node_home)
        assert result.returncode == 1, (args, result.stdout)
        line = result.stderr.strip()
        assert "\n" not in line and needle in line, (args, line)
    assert _json("info", home=node_home)["onboarded"]["memory_mb"] == 8000  # type: ignore[index]


def test_usage_errors_exit_2(node_home: Paths) -> None:
    assert run_cli("onboard", "-m", "lots", home=node_home).returncode == 2
    assert run_cli("frobnicate", home=node_home).returncode == 2


def test_not_onboarded_commands_say_what_to_do(node_home: Paths) -> None:
    result = run_cli("pause", home=node_home)
    assert result.returncode == 1 and "nunet-tui onboard" in result.stderr
