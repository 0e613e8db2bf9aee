"""``nunet-tui resource ...``, run as a user runs it: a fresh process each time, against the
node's own engine, its resources.json on disk."""

from __future__ import annotations

import json
from typing import Any

from nacl.signing import SigningKey

from engine.config import Paths
from engine.identity import Identity
from tests.conftest import TEST_ADDRESS, run_cli

MEMBER = Identity(SigningKey(b"\x07" * 32)).peer_id


def _json(*args: str, home: Paths) -> dict[str, Any]:
    result = run_cli(*args, "--json", home=home)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _fails(*args: str, home: Paths) -> str:
    result = run_cli(*args, home=home)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    return result.stderr


def test_specs_pools_and_customs_from_the_command_line(node_home: Paths) -> None:
    listing = _json("resource", "list", home=node_home)
    assert listing["defaults"] is True
    assert [(s["name"], s["price_units_hour"]) for s in listing["specs"]] == [
        ("low", 1_000_000),
        ("moderate", 2_500_000),
        ("high", 6_000_000),
    ]
    # Not onboarded: nothing bounds a spec yet, so none is taken.
    assert "not onboarded" in _fails(
        "resource", "spec", "add", "a", "--cpu", "1", "--ram", "512", "--price", "1", home=node_home
    )
    run = run_cli("onboard", "-m", "8000", "-c", "4000", "-a", TEST_ADDRESS, home=node_home)
    assert run.returncode == 0, run.stderr
    added = _json(
        "resource", "spec", "add", "small", "--cpu", "2", "--ram", "4096",
        "--price", "2.4", "--min-charge", "0.05", home=node_home,
    )  # fmt: skip
    assert added["defaults"] is False
    assert added["specs"] == [
        {
            "name": "small",
            "cpu_cores": 2,
            "ram_mb": 4096,
            "price_units_hour": 2_400_000,
            "disk_mb": 0,
            "gpus": 0,
            "gpu_resource": None,
            "min_charge_units": 50_000,
            "pool": "default",
        }
    ]
    # The onboarded capacity (2 cores, 8000 MB) bounds it; each bad field says why.
    error = _fails(
        "resource", "spec", "add", "big", "--cpu", "3", "--ram", "9000", "--price", "1",
        home=node_home,
    )  # fmt: skip
    assert "3 CPU cores: give 1 to 2" in error and "9000 MB RAM" in error
    bad_price = run_cli(
        "resource", "spec", "add", "x", "--cpu", "1", "--ram", "1", "--price", "0.0000001",
        home=node_home,
    )  # fmt: skip
    assert bad_price.returncode == 2 and "more than 6 decimals" in bad_price.stderr
    pools = _json("resource", "pool", "add", "lab", "--member", MEMBER, home=node_home)
    assert pools["pools"] == [{"name": "lab", "members": [MEMBER], "groups": []}]
    _json(
        "resource", "spec", "add", "reserved", "--cpu", "1", "--ram", "1024",
        "--price", "1", "--pool", "lab", home=node_home,
    )  # fmt: skip
    assert "used by spec reserved" in _fails("resource", "pool", "rm", "lab", home=node_home)
    customs = _json(
        "resource", "custom", "add", "TPU 1684X", "--kind", "accelerator", "--model", "Sophon",
        home=node_home,
    )  # fmt: skip
    assert customs["customs"][0]["name"] == "TPU 1684X"
    text = run_cli("resource", "list", home=node_home)
    assert text.returncode == 0
    assert "small: 2 CPU · 4,096 MB — 2.4 NTX/h, min 0.05 NTX" in text.stdout
    assert "reserved: 1 CPU · 1,024 MB — 1 NTX/h  [pool lab]" in text.stdout
    after = _json("resource", "spec", "rm", "reserved", home=node_home)
    assert [s["name"] for s in after["specs"]] == ["small"]
    assert _json("resource", "pool", "rm", "lab", home=node_home)["pools"] == []
    assert "no spec named 'gone'" in _fails("resource", "spec", "rm", "gone", home=node_home)
    on_disk = json.loads(node_home.resources_file.read_text(encoding="utf-8"))
    assert [s["name"] for s in on_disk["specs"]] == ["small"]
