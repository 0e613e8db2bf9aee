"""The scripting commands, run as a user runs them: a fresh process each time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import Paths
from tests.conftest import TEST_ADDRESS, run_cli_fresh

MAINNET_ADDRESS = (
    "addr1qx2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3n0d3vllmyqwsx5wktcd8cc3sq835lu7drv2x"
    "wl2wywfgse35a3x"
)


def _json(*args: str, home: Paths) -> dict[str, object]:
    result = run_cli_fresh(*args, "--json", home=home)
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
    assert _json("offboard", home=node_home)["message"].startswith("offboarded")  # type: ignore[attr-defined]
    assert _json("info", home=node_home)["onboarded"] is None


def test_peer_self_is_stable(node_home: Paths) -> None:
    first = _json("peer", "self", home=node_home)["peer_id"]
    assert first == _json("peer", "self", home=node_home)["peer_id"]
    assert str(first).startswith("12D3KooW")


def test_errors_are_one_line_and_keep_state(node_home: Paths) -> None:
    assert (
        run_cli_fresh(
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
        result = run_cli_fresh(*args, home=node_home)
        assert result.returncode == 1, (args, result.stdout)
        line = result.stderr.strip()
        assert "\n" not in line and needle in line, (args, line)
    assert _json("info", home=node_home)["onboarded"]["memory_mb"] == 8000  # type: ignore[index]


def test_usage_errors_exit_2(node_home: Paths) -> None:
    assert run_cli_fresh("onboard", "-m", "lots", home=node_home).returncode == 2
    assert run_cli_fresh("frobnicate", home=node_home).returncode == 2


def test_not_onboarded_commands_say_what_to_do(node_home: Paths) -> None:
    result = run_cli_fresh("pause", home=node_home)
    assert result.returncode == 1 and "nunet-tui onboard" in result.stderr


# --- what the CLI reads and writes: secrets on stdin, peer text on the terminal --------------


def test_a_piped_secret_loses_exactly_one_line_end(node_home: Paths) -> None:
    """`echo pw | wallet unlock` stored "pw\\n" before: then only "pw\\n" opened it again."""
    from engine.payments.keystore import PASSPHRASE_ENV

    none = {PASSPHRASE_ENV: ""}
    made = run_cli_fresh("wallet", "unlock", home=node_home, env=none, input="pass phrase 1\n")
    assert made.returncode == 0, made.stderr  # the first passphrase creates the keystore
    # The stored passphrase is exactly the line: the environment's copy (no newline) opens it.
    exact = run_cli_fresh(
        "wallet", "new", "--json", home=node_home, env={PASSPHRASE_ENV: "pass phrase 1"}
    )
    assert exact.returncode == 0, exact.stderr
    for piped, opens in (
        ("pass phrase 1\r\n", True),
        ("pass phrase 1", True),
        ("pass phrase 1\n\n", False),  # one line end is dropped, not every one
        (" pass phrase 1\n", False),  # spaces are part of it
    ):
        result = run_cli_fresh("wallet", "unlock", home=node_home, env=none, input=piped)
        assert (result.returncode == 0) == opens, (piped, result.stderr)
        if not opens:
            assert "wrong passphrase" in result.stderr and result.stderr.count("\n") == 1


def test_secret_text_and_its_bound() -> None:
    import io

    from engine.errors import EngineError
    from engine.secret_input import MAX_SECRET_CHARS, read_secret, secret_text

    assert [secret_text(t) for t in ("pw\n", "pw\r\n", "pw", "pw\n\n", "pw\r", "\n")] == [
        "pw",
        "pw",
        "pw",
        "pw\n",
        "pw\r",
        "",
    ]
    assert read_secret(io.StringIO("words of a mnemonic\n"), "mnemonic") == "words of a mnemonic"
    with pytest.raises(EngineError, match="over 65,536 characters"):
        read_secret(io.StringIO("x" * (MAX_SECRET_CHARS + 1)), "passphrase")


def test_the_one_escaper() -> None:
    from engine.domain.safe_text import safe, safe_json
    from nunet_tui.format import safe as tui_safe

    assert tui_safe is safe  # the TUI and the CLI share it
    assert safe("[bold]ok[/] \\ café 日本") == "[bold]ok[/] \\ café 日本"  # printable stays
    assert safe("\x1b[2J\x07\x7f\x9b") == "\\x1b[2J\\x07\\x7f\\x9b"  # C0, DEL, C1
    assert safe("a\u202eb\u2066c\u2069\u200b\ufeff") == "a\\u202eb\\u2066c\\u2069\\u200b\\ufeff"
    assert safe("tag\U000e0041") == "tag\\U000e0041"  # a format character beyond the BMP
    assert safe("two\nlines\u2028") == "two\\x0alines\\u2028"  # always one line
    nasty = {"text": "\x1b]52;c;aGk=\x07 \u202eevil\x7f\x85 café \U000e0041", "n": 1}
    for indent in (None, 2):
        out = safe_json(nasty, indent=indent)
        assert out.replace("\n", "").isprintable() and "café" in out
        assert json.loads(out) == nasty  # the same JSON, just safe to print


def test_job_results_sends_an_absolute_out_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon has its own working directory: the CLI resolves -o before sending it."""
    import argparse

    from engine import api
    from nunet_tui.cli import job_output

    sent: list[api.Command] = []

    class RecordingClient:  # a fake of our own EngineClient port
        def call_blocking(self, command: api.Command, timeout: float = 30.0) -> object:
            sent.append(command)
            return None

    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(job_id="0123456789ab", out="results/run")
    job_output.RUNNERS["job results"](args, RecordingClient())
    assert sent == [
        api.FetchJobResults(job_id="0123456789ab", out_dir=str(tmp_path / "results/run"))
    ]


def test_network_doctor_without_the_network(node_home: Paths) -> None:
    """Without a daemon the command's engine has no network: the doctor says so and what
    to do, in text and JSON (tests/network/test_autonat_daemons.py runs it on real daemons
    in the NAT lab)."""
    report = _json("network", "doctor", home=node_home)
    assert report["online"] is False and report["reachability"] == "unknown"
    assert report["upnp"] == "not tried"
    text = run_cli_fresh("network", "doctor", home=node_home)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines() == [
        "network offline",
        "fix: run the node with its network (`nunet-tui daemon`, or the app) and ask again",
    ]
