"""The control socket: the same facade across a Unix socket, bounded and private."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from engine import api
from engine.commands import decode_command
from engine.config import Paths
from engine.control_client import DAEMON_GONE, MAX_LINE, ControlClient
from engine.errors import EngineError
from engine.facade import Engine
from tests.conftest import TEST_ADDRESS
from tests.daemon_harness import Daemon, daemons, wait_for

__all__ = ["daemons"]


def _raw(path: Paths, payload: bytes) -> list[dict[str, object]]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(str(path.control_socket))
        data = b""
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(65536):
                data += chunk
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server hung up on us, as it should on oversized input
    return [json.loads(line) for line in data.splitlines()]


def test_socket_is_private(engine_client: Engine, node_home: Paths) -> None:
    assert stat.S_IMODE(node_home.control_socket.stat().st_mode) == 0o600


def test_client_gets_typed_replies_errors_and_events(
    engine_client: Engine, node_home: Paths
) -> None:
    client = ControlClient(node_home.control_socket)
    try:
        events: list[api.Event] = []
        client.subscribe(events.append)
        info = client.call_blocking(api.GetInfo())
        assert isinstance(info, api.NodeInfo) and info.onboarded is None
        try:
            client.call_blocking(
                api.OnboardRequest(memory_mb=10**9, cpu_mhz=4000, address=TEST_ADDRESS)
            )
        except EngineError as exc:
            assert exc.code == "invalid"
            assert any(p.field == "memory_mb" for p in exc.problems)
        else:
            raise AssertionError("an impossible onboarding was accepted")
        # An embedded engine's own calls reach a socket subscriber as events.
        engine_client.call_blocking(api.SetMode(mode="consumer"))
        deadline = time.monotonic() + 3
        modes: list[api.Event] = []
        while not modes and time.monotonic() < deadline:
            modes = [e for e in events if isinstance(e, api.ModeChanged)]
            time.sleep(0.01)
        assert modes == [api.ModeChanged(at=modes[0].at, mode="consumer")]
    finally:
        client.close()


def test_bad_lines_get_error_replies_and_the_server_keeps_serving(
    engine_client: Engine, node_home: Paths
) -> None:
    replies = _raw(
        node_home,
        b'not json\n[1,2]\n{"id": 7, "cmd": {"type": "rm -rf"}}\n'
        b'{"id": 8, "cmd": {"type": "info", "extra": 1}}\n'
        b'{"id": 9, "cmd": {"type": "peer_self"}}\n',
    )
    # Commands run concurrently, so replies come in any order; ids pair them up.
    by_id = {r.get("id"): r for r in replies if r.get("id") is not None}
    assert len(replies) == 5 and sorted(by_id) == [7, 8, 9]
    assert all("error" in r for r in replies if r.get("id") != 9)
    assert by_id[9]["ok"]["peer_id"].startswith("12D3KooW")  # type: ignore[index]


def test_an_unexpected_failure_says_what_failed_even_when_its_message_is_empty(
    engine_client: Engine, node_home: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20 §8: `job cancel` under load failed with "internal error: " and nothing else
    (a timeout's message is empty); the line now names the command and the failure."""
    import trio

    async def times_out(command: api.Command) -> None:
        raise trio.TooSlowError

    monkeypatch.setattr(engine_client.node, "handle", times_out)
    (reply,) = _raw(node_home, b'{"id": 1, "cmd": {"type": "info"}}\n')
    error = reply["error"]
    assert isinstance(error, dict) and error["code"] == "internal"
    assert error["message"] == (
        "internal error in GetInfo: TooSlowError (the daemon's log has the traceback)"
    )


def test_a_bad_job_spec_over_the_socket_is_one_invalid_line_naming_its_field(
    engine_client: Engine, node_home: Paths
) -> None:
    """The spec is typed in api.SubmitJob, so the socket's decode is where a bad one is
    refused: as the engine's own check words it, not as a malformed command."""
    replies = _raw(
        node_home,
        b'{"id": 1, "cmd": {"type": "job_submit", "spec": {"framework": 7}}}\n'
        b'{"id": 2, "cmd": {"type": "job_submit", "spec": {"framework": "pytorch", "x": 1}}}\n'
        b'{"id": 3, "cmd": {"type": "job_submit", "spec": {"framework": "pytorch"}, "x": 1}}\n',
    )
    errors = {r["id"]: r["error"] for r in replies}
    assert errors[1] == {
        "code": "invalid",
        "message": "job spec: Expected `str`, got `int` - at `$.spec.framework`",
        "problems": [],
    }
    assert errors[2]["code"] == "invalid"  # type: ignore[index]
    assert errors[2]["message"] == "job spec: Object contains unknown field `x` - at `$.spec`"  # type: ignore[index]
    assert errors[3]["code"] == "protocol"  # type: ignore[index]  # the command's, not the spec's


def test_oversized_line_closes_only_that_connection(
    engine_client: Engine, node_home: Paths
) -> None:
    assert _raw(node_home, b"x" * (MAX_LINE + 10)) == []
    assert engine_client.call_blocking(api.GetPeerSelf()).peer_id
    client = ControlClient(node_home.control_socket)
    assert client.call_blocking(api.GetPeerSelf()).peer_id
    client.close()


def test_client_learns_when_the_engine_stops(node_home: Paths) -> None:
    engine = Engine(node_home).start()
    client = ControlClient(node_home.control_socket)
    engine.close()
    try:
        client.call_blocking(api.GetInfo(), timeout=5)
    except EngineError as exc:
        assert exc.code == DAEMON_GONE
    else:
        raise AssertionError("a call to a stopped engine succeeded")
    finally:
        client.close()


def test_a_daemon_that_dies_mid_call_gives_an_engine_error(tmp_path: Path) -> None:
    """The daemon reads the request and goes away before it answers: the pending call fails
    with EngineError(daemon_gone), and so does the next one (never the socket's OSError)."""
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    path = folder / "control.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    got_request = threading.Event()

    def serve_then_die() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(10)
            while b"\n" not in conn.recv(65536):
                pass
            got_request.set()
            conn.shutdown(socket.SHUT_RDWR)
        server.close()

    thread = threading.Thread(target=serve_then_die, daemon=True)
    thread.start()
    client = ControlClient(path)
    try:
        pending = client.submit(api.GetInfo())
        assert got_request.wait(10)
        with pytest.raises(EngineError) as first:
            pending.result(10)
        assert first.value.code == DAEMON_GONE
        assert "closed the connection" in first.value.message
        with pytest.raises(EngineError) as second:
            client.call_blocking(api.GetInfo(), timeout=5)
        assert second.value.code == DAEMON_GONE
    finally:
        client.close()
        thread.join(10)


def test_a_daemon_killed_under_its_client_gives_engine_errors(
    daemons: Callable[..., Daemon],
) -> None:
    """kill -9 of a real daemon: the subscribed client's calls fail as EngineError."""
    daemon = daemons("gone", 60)
    client = ControlClient(daemon.home.control_socket)
    try:
        client.subscribe(lambda event: None)
        assert client.call_blocking(api.GetInfo()).peer_id
        assert daemon.proc is not None
        os.kill(daemon.proc.pid, signal.SIGKILL)
        daemon.proc.wait(15)

        def refused() -> EngineError | None:
            try:
                client.call_blocking(api.GetInfo(), timeout=5)
            except EngineError as exc:
                return exc
            return None

        error = wait_for(refused, "calls to a killed daemon kept succeeding", timeout=10)
        assert error.code == DAEMON_GONE
    finally:
        client.close()


def test_chat_ids_and_limits_are_bounded_where_commands_are_decoded() -> None:
    """A chat id beyond SQLite's rowid range or a history limit of a billion is refused by the
    command schema itself, whoever sent it (the CLI bounds them too)."""
    for bad in ({"type": "chat_join", "request_id": 2**63}, {"type": "chat_join", "request_id": 0}):
        with pytest.raises(msgspec.ValidationError, match="request_id"):
            decode_command(bad)
    with pytest.raises(msgspec.ValidationError, match="limit"):
        decode_command({"type": "chat_history", "peer_id": "x", "limit": 10**9})
    assert decode_command({"type": "chat_join", "request_id": 7}) == api.ChatJoin(request_id=7)
