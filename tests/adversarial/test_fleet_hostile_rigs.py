"""Rigs of a fleet are peers we do not control (a socket forwarded over SSH, an API on
another host): engine/fleet.py decodes their answers by the commands' own types, bounds the
size and time of each, and shows their words made safe. Hostile rigs (an HTTP API that
sends escapes and bidi in its error, a reply over 1 MiB, a malformed reply, one byte now
and then; a control socket that accepts and never answers) each come out "unreachable"
with one safe line, next to a real daemon that still comes out online."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine.config import FleetRig, FleetSettings
from engine.control_client import MAX_LINE
from engine.fleet import LiveRigs, poll
from tests.daemon_harness import Daemon, daemons

__all__ = ["daemons"]

EVIL = "\x1b[31m[bold]owned\u202e\x07"


class _Hostile(BaseHTTPRequestHandler):
    def log_message(self, *_args: object) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        kind = self.path.split("/")[1]
        self.rfile.read(int(self.headers.get("content-length", "0")))
        if kind == "escapes":
            self._send(409, {"error": {"code": "x", "message": EVIL, "problems": []}})
        elif kind == "huge":
            self._send(200, {"peer_id": "x" * (MAX_LINE + 10)})
        elif kind == "malformed":
            self._send(200, {"peer_id": 5})
        elif kind == "drip":
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            for _ in range(100):
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.4)  # the hostile rig's own pace, not a wait of the test

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def hostile_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def silent_socket(tmp_path: Path) -> Iterator[Path]:
    """A control socket that accepts connections and never answers."""
    folder = tmp_path / "silent"
    folder.mkdir(mode=0o700)
    path = folder / "control.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    yield path
    listener.close()


def test_hostile_rigs_are_unreachable_in_one_safe_line(
    daemons: Callable[..., Daemon], hostile_api: str, silent_socket: Path, tmp_path: Path
) -> None:
    good = daemons("good", 81)
    token = tmp_path / "token"
    token.write_text("t\n")
    rigs = [FleetRig(name="good", home=str(good.home.home))]
    rigs += [
        FleetRig(name=kind, url=f"{hostile_api}/{kind}", token_file=str(token))
        for kind in ("escapes", "huge", "malformed", "drip")
    ]
    rigs.append(FleetRig(name="silent", socket=str(silent_socket)))
    fleet = FleetSettings(rigs=rigs, timeout_s=1.0)
    shots = {shot.name: shot for shot in poll(LiveRigs(fleet, tmp_path), 1.0, time.time())}

    assert shots["good"].state == "online" and shots["good"].peer_id == good.peer_id
    for name in ("escapes", "huge", "malformed", "drip", "silent"):
        shot = shots[name]
        assert shot.state == "unreachable", (name, shot)
        for text in (shot.reason, *shot.alerts):
            assert text.isprintable() and "\x1b" not in text and "\u202e" not in text, name
            assert len(text) < 400, (name, len(text))
    assert "\\x1b" in shots["escapes"].reason  # shown as a visible escape, not obeyed
    assert "oversized" in shots["huge"].reason
    assert "malformed" in shots["malformed"].reason
    assert "in time" in shots["drip"].reason or "no answer" in shots["drip"].reason
    assert "did not answer" in shots["silent"].reason or "no answer" in shots["silent"].reason
