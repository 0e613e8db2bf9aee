"""``nunet-tui fleet`` over three real daemons (issue 27 §4; engine/fleet.py): one listed by
its home, one by its control socket, one by its HTTP API's URL and token file; one of them
stopped. The real command line prints the snapshot and pauses a rig through the fleet."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import msgspec

from engine import api
from engine.config import Paths, load_settings
from engine.fleet import RigSnapshot, local_home
from tests.conftest import TEST_ADDRESS, make_home, run_cli
from tests.daemon_harness import Daemon, daemons, wait_for

__all__ = ["daemons"]


def _fleet_home(tmp_path: Path, rigs: str) -> Path:
    home = make_home(tmp_path / "viewer")
    home.config_file.write_text(f"[fleet]\ntimeout_s = 5\nrigs = [\n{rigs}\n]\n")
    return Path(str(home.home))


def test_fleet_snapshot_and_pause_over_three_daemons(
    daemons: Callable[..., Daemon], tmp_path: Path, free_tcp_port: int
) -> None:
    by_home = daemons("rig-1", 71)
    by_socket = daemons("rig-2", 72)
    by_url = daemons("rig-3", 73, env={"NUNET_API_LISTEN": f"127.0.0.1:{free_tcp_port}"})
    token = by_url.home.state_dir / "api-token"
    wait_for(token.is_file, "the API made no token")
    by_socket.call(api.OnboardRequest(memory_mb=8000, cpu_mhz=4000, address=TEST_ADDRESS, gpus=()))
    viewer = _fleet_home(
        tmp_path,
        f'  {{ name = "rig-1", home = "{by_home.home.home}" }},\n'
        f'  {{ name = "rig-2", socket = "{by_socket.home.control_socket}" }},\n'
        f'  {{ name = "rig-3", url = "http://127.0.0.1:{free_tcp_port}", '
        f'token_file = "{token}" }},',
    )
    by_home.stop()

    result = run_cli("--home", str(viewer), "fleet", "--json")
    assert result.returncode == 0, result.stderr
    rigs = {rig["name"]: rig for rig in json.loads(result.stdout)["rigs"]}
    assert rigs["rig-1"]["state"] == "unreachable"
    assert "control socket" in rigs["rig-1"]["reason"]
    assert any(a.startswith("unreachable") for a in rigs["rig-1"]["alerts"])
    for name, daemon in (("rig-2", by_socket), ("rig-3", by_url)):
        assert rigs[name]["state"] in ("online", "offline"), rigs[name]
        assert rigs[name]["reason"] == ""
        assert rigs[name]["peer_id"] == daemon.peer_id
        assert rigs[name]["paid_today_units"] == 0
        assert rigs[name]["paid_today"] == "0 NTX paid"
    assert rigs["rig-2"]["onboarded"] and not rigs["rig-2"]["paused"]
    assert not rigs["rig-3"]["onboarded"]
    # Enter opens the dashboard in place for a rig listed by its home or by its home's own
    # socket (the app attaches by home), never for one reached by URL or unreachable.
    fleet = load_settings(Paths.for_home(viewer), addresses=False).fleet
    shots = {name: msgspec.convert(rig, RigSnapshot) for name, rig in rigs.items()}
    homes = [local_home(rig, shots[rig.name]) for rig in fleet.rigs]
    assert homes == [None, str(by_socket.home.home), None]

    # Pause through the fleet: the rig listed by its socket is paused, then resumed.
    paused = run_cli("--home", str(viewer), "fleet", "pause", "rig-2", "--json")
    assert paused.returncode == 0, paused.stderr
    assert json.loads(paused.stdout) == {"rig": "rig-2", "state": "paused"}
    info: api.NodeInfo = by_socket.call(api.GetInfo())
    assert info.onboarded is not None and info.onboarded.state == "paused"
    again = json.loads(run_cli("--home", str(viewer), "fleet", "--json").stdout)
    assert {r["name"]: r["paused"] for r in again["rigs"]}["rig-2"] is True

    # Through the HTTP API too: a rig that is not onboarded says so, in one line.
    refused = run_cli("--home", str(viewer), "fleet", "pause", "rig-3")
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    # A stopped rig: one line naming it.
    gone = run_cli("--home", str(viewer), "fleet", "resume", "rig-1")
    assert gone.returncode == 1 and "control socket" in gone.stderr
    assert run_cli("--home", str(viewer), "fleet", "resume", "rig-2").returncode == 0
    info = by_socket.call(api.GetInfo())
    assert info.onboarded is not None and info.onboarded.state == "active"


def test_fleet_without_rigs_or_with_a_bad_one_is_one_line(tmp_path: Path) -> None:
    home = make_home(tmp_path / "viewer")
    result = run_cli("--home", str(home.home), "fleet", "--json")
    assert result.returncode == 1 and "no rigs in [fleet]" in result.stderr
    home.config_file.write_text('[fleet]\nrigs = [{ name = "a", home = "/x", url = "http://x" }]\n')
    result = run_cli("--home", str(home.home), "fleet", "--json")
    assert result.returncode == 1
    assert "give exactly one of home" in result.stderr and "Traceback" not in result.stderr
    # No rig named, or one not listed: one line with the rigs there are.
    home.config_file.write_text('[fleet]\nrigs = [{ name = "a", home = "/x" }]\n')
    for words, said in (
        (("resume",), "fleet resume RIG (rigs: a)"),
        (("pause", "b"), "no rig 'b'"),
    ):
        result = run_cli("--home", str(home.home), "fleet", *words)
        assert result.returncode == 1 and said in result.stderr, result.stderr
