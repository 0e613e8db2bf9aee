"""A hostile peer's words reach the victim's terminal escaped, never obeyed.

A provider's refusal reason and a chat partner's messages are free text chosen by a
stranger. Printed raw they clear the screen (ESC[2J), write the clipboard (OSC 52), ring the
bell, or reorder what the user reads (bidi overrides). Every line the CLI writes, errors and
``--json`` included, goes through one escaper (engine/domain/safe_text.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.adversarial.hostile import HostilePeer, read_job_message, send_job_message
from tests.conftest import run_cli
from tests.daemon_harness import Daemon, wait_for
from tests.tunnel_helpers import free_port, pair, service_url, submit_service

__all__ = ["service_url"]

JOB_PROTOCOL = "/nunet/job/1.0.0"
# Clear the screen, write "hi" to the clipboard (OSC 52, ended by BEL), reverse what follows
# (RLO..PDF), an isolate (LRI..PDI), a C1 CSI, DEL, a zero-width space (a format character),
# a line separator that would start a fake line, and a carriage return.
NASTY = (
    "\x1b[2J\x1b]52;c;aGk=\x07plain \u202eevil\u202c \u2066iso\u2069 \x9b31m\x7f"
    "\u200b\u2028fake line\rCR"
)
RAW = "\x1b\x07\u202e\u202c\u2066\u2069\x9b\x7f\u200b\u2028\r"  # none may reach the terminal


def _no_raw(text: str) -> None:
    found = [hex(ord(ch)) for ch in RAW if ch in text]
    assert not found, found


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stderr
    return result


def _listed(victim: Daemon, peer_id: str) -> bool:
    return any(p["peer_id"] == peer_id for p in victim.cli("peer", "list")["peers"])


def test_a_refusal_reason_is_shown_escaped_by_job_submit(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    victim = daemons("consumer", 31)
    peer = hostile(seed=b"\x43" * 32, bootstrap=victim.addrs(), provider=True)
    offers: list[dict[str, Any]] = []

    async def refuse(stream: Any) -> None:
        offer = await read_job_message(stream)
        assert offer is not None
        offers.append(offer)
        refusal = {"t": "refusal", "v": 1, "job_id": offer["job_id"], "reason": NASTY}
        await send_job_message(stream, peer.identity, refusal)
        await stream.close()

    peer.serve(JOB_PROTOCOL, refuse)
    wait_for(lambda: _listed(victim, peer.peer_id), "the victim never listed the provider")
    args = ["job", "submit", "--peer", peer.peer_id, "--framework", "pytorch"]
    args += ["--url", "http://127.0.0.1:9/train.py"]
    for extra in ((), ("--json",)):
        result = run_cli(*args, *extra, home=victim.home)
        assert result.returncode == 1 and offers, result
        assert "Traceback" not in result.stderr
        _no_raw(result.stderr + result.stdout)
        line = result.stderr.strip()
        assert "\n" not in line
        # Shown, not dropped: the user sees what the peer said, in visible escapes.
        assert "\\x1b[2J\\x1b]52;c;aGk=\\x07plain \\u202eevil" in line, line
    # The victim still serves: its own address book, and an honest chat to the same peer.
    assert victim.cli("peer", "self")["peer_id"]
    assert victim.cli("chat", "send", peer.peer_id, "no thanks")["status"] == "delivered"


def test_chat_from_a_hostile_peer_is_escaped_in_text_and_json(
    daemons: Callable[..., Daemon], hostile: Callable[..., HostilePeer]
) -> None:
    victim = daemons("chatter", 32)
    peer = hostile(seed=b"\x44" * 32, bootstrap=victim.addrs())
    peer.wait_connected(victim.peer_id)
    peer.call(peer.service.send_chat, victim.peer_id, NASTY)

    def arrived() -> list[Any]:
        return victim.cli("chat", "history", peer.peer_id)["messages"]

    wait_for(arrived, "the hostile chat message never arrived")
    as_json = _ok(run_cli("chat", "history", peer.peer_id, "--json", home=victim.home))
    _no_raw(as_json.stdout)
    assert "\\u202e" in as_json.stdout and "\\u001b[2J" in as_json.stdout
    # Escaped for the terminal, yet the same JSON: a script still reads the exact text.
    assert json.loads(as_json.stdout)["messages"][0]["text"] == NASTY
    as_text = _ok(run_cli("chat", "history", peer.peer_id, home=victim.home))
    _no_raw(as_text.stdout)
    lines = as_text.stdout.strip().splitlines()
    assert len(lines) == 1 and "\\u202eevil" in lines[0] and "\\u2028fake line" in lines[0]
    for listing in ("chat", "list"), ("chat", "list", "--json"):
        _no_raw(_ok(run_cli(*listing, home=victim.home)).stdout)
    # The victim still serves: it answers, and talks back to the same peer.
    assert victim.cli("peer", "self")["peer_id"]
    assert victim.cli("chat", "send", peer.peer_id, "hello")["status"] == "delivered"
    wait_for(lambda: "hello" in [t for _, t in peer.messages], "the answer never arrived")


def test_the_users_own_words_are_escaped_in_errors(daemons: Callable[..., Daemon]) -> None:
    """argparse repeats a bad choice, the engine repeats a bad peer id: both escaped."""
    victim = daemons("typist", 33)
    usage = run_cli("job", "submit", "--tier", "\x1b[2Jx\u202e", home=victim.home)
    assert usage.returncode == 2
    _no_raw(usage.stderr)
    assert "\\x1b[2Jx\\u202e" in usage.stderr
    engine = run_cli("chat", "send", "12D3Koo\x1b]52;c;aGk=\x07", "hi", home=victim.home)
    assert engine.returncode == 1 and "Traceback" not in engine.stderr
    _no_raw(engine.stderr)
    assert engine.stderr.count("\n") == 1
    assert victim.cli("peer", "self")["peer_id"]


def test_log_records_quoting_a_peer_stay_one_escaped_line(tmp_path: Path) -> None:
    """The daemon logs to its terminal (stderr) and the file: a peer's words quoted in a
    record cannot clear the screen or forge the next log line."""
    import logging

    from engine.config import Paths
    from engine.logsetup import configure

    paths = Paths.for_home(tmp_path / "home")
    paths.ensure()
    configure(paths, "info")
    log = logging.getLogger("nunet.test")
    log.warning("job %s refused: %s", "0123456789ab", NASTY + "\n2026-01-01 INFO forged")
    try:
        raise ValueError(NASTY)
    except ValueError:
        log.exception("a peer's message failed")
    for handler in logging.getLogger("nunet").handlers:
        handler.flush()
    text = paths.log_file.read_bytes().decode("utf-8")  # no newline translation
    _no_raw(text)
    assert "\\x0a2026-01-01 INFO forged" in text and "ValueError: \\x1b[2J" in text


# What a provider's shell prints: a clipboard write (OSC 52, BEL), a window title (OSC 2,
# ST), one in its C1 form (U+009D..U+009C) and a link whose text is not its target (OSC 8),
# around the session's own text and colours.
SHELL_OSC = (
    "one\x1b]52;c;cm0gLXJmIH4=\x07two\x1b]2;sudo password\x1b\\three\u009d0;t\u009c"
    "\x1b[31mfour\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\"
)


def test_osc_sequences_from_a_shell_are_dropped_split_anywhere() -> None:
    from nunet_tui.shell_relay import OscFilter

    data = SHELL_OSC.encode()
    clean = b"onetwothree\x1b[31mfourlink"
    assert OscFilter().feed(data) == clean
    for cut in range(1, len(data)):  # a sequence split across two reads is still dropped
        osc = OscFilter()
        assert osc.feed(data[:cut]) + osc.feed(data[cut:]) == clean, cut
    text = "Ý ✝ café".encode()  # 0x9D and 0x9C as UTF-8 continuation bytes stay
    assert OscFilter().feed(text) == text


def test_job_shell_drops_clipboard_and_title_writes_unless_raw(
    daemons: Callable[..., Daemon], service_url: str, tmp_path: Path
) -> None:
    _, consumer = pair(daemons, '[jobs]\nexecutors = ["process"]\nallow_process_shell = true\n')
    job_id = submit_service(consumer, service_url, tmp_path, free_port())
    printf = ("--", "python3", "-c", f"import sys; sys.stdout.write({SHELL_OSC!r})")
    try:
        shown = _ok(run_cli("job", "shell", job_id, *printf, home=consumer.home)).stdout
        assert "\x1b]" not in shown and "\u009d" not in shown and "evil" not in shown
        assert "onetwothree\x1b[31mfourlink" in shown
        raw = _ok(run_cli("job", "shell", "--raw", job_id, *printf, home=consumer.home))
        assert "\x1b]52;c;" in raw.stdout  # asked for: as it was sent
    finally:
        run_cli("job", "cancel", job_id, home=consumer.home)
