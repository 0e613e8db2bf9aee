"""The local HTTP API against a real daemon (issue 27 §3; engine/http_api.py), with a real
HTTP client: the token, every command's answer the same as the control socket's, the events
stream, the OpenAPI document from the one registry, and hostile input."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from engine.commands import ALL_COMMANDS, ROOMS
from tests.daemon_harness import Daemon, daemons, wait_for


@pytest.fixture
def served(daemons: Callable[..., Daemon], free_tcp_port: int) -> Iterator[tuple[Daemon, Any]]:
    daemon = daemons("api", 95, env={"NUNET_API_LISTEN": f"127.0.0.1:{free_tcp_port}"})
    token_file = daemon.home.state_dir / "api-token"
    token = wait_for(lambda: token_file.is_file() and token_file.read_text().strip(), "no token")
    assert token_file.stat().st_mode & 0o777 == 0o600
    base = f"http://127.0.0.1:{free_tcp_port}"
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as client:
        wait_for(lambda: _up(client), "the API never answered")
        yield daemon, client


def _up(client: httpx.Client) -> bool:
    try:
        return client.get("/v1/openapi.json").status_code == 200
    except httpx.TransportError:
        return False


def _control(daemon: Daemon, cmd: dict[str, Any]) -> dict[str, Any]:
    """One request on the daemon's control socket, as raw JSON lines."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.connect(str(daemon.home.control_socket))
        sock.sendall(json.dumps({"id": 1, "cmd": cmd}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            data += sock.recv(65536)
    reply = json.loads(data)
    reply.pop("id")
    return dict(reply)


def _http(client: httpx.Client, tag: str, body: Any) -> tuple[int, dict[str, Any]]:
    response = client.post(f"/v1/{tag}", content=json.dumps(body))
    data = response.json()
    return response.status_code, ({"error": data["error"]} if "error" in data else {"ok": data})


def test_a_missing_or_wrong_token_is_refused(served: tuple[Daemon, Any]) -> None:
    _, client = served
    base = str(client.base_url)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
        response = httpx.post(f"{base}/v1/info", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"
        assert "api-token" in response.json()["error"]["message"]
        assert httpx.get(f"{base}/v1/events", headers=headers).status_code == 401
    assert client.post("/v1/info").status_code == 200


def test_every_command_answers_as_the_control_socket_does(served: tuple[Daemon, Any]) -> None:
    daemon, client = served
    # A field no command has: each one refused by its own type, the same words both ways.
    for command in ALL_COMMANDS:
        tag = str(command.__struct_config__.tag)
        status, answer = _http(client, tag, {"no_such_field": 1})
        assert answer == _control(daemon, {"type": tag, "no_such_field": 1}), tag
        assert status == 400, (tag, answer)
    # Commands that only read: the same replies (clocks aside).
    for tag, body in (
        ("get_capacity", {"kind": "full"}),
        ("peer_self", {}),
        ("data_ls", {}),
        ("resource_list", {}),
        ("job_list", {}),
        ("data_pin", {"cid": "QmWATWQ7fVPP2EFGu71UkfnqhYXDYH566qy47CnJDgvs8u"}),
        ("job_show", {"job_id": "../../etc"}),
    ):
        if tag not in {str(c.__struct_config__.tag) for c in ALL_COMMANDS}:
            continue
        _, answer = _http(client, tag, body)
        assert answer == _control(daemon, {"type": tag, **body}), tag


def test_hostile_bodies_get_one_line_and_the_api_stays_up(served: tuple[Daemon, Any]) -> None:
    _, client = served
    cases = [
        (b"not json", 400, "protocol"),
        (b"[1, 2]", 400, "protocol"),
        (b'{"type": "pause"}', 400, "protocol"),  # the path names the command
        (b"{" + b'"x":' * 10 + b"1}", 400, "protocol"),
    ]
    for body, status, code in cases:
        response = client.post("/v1/info", content=body)
        assert response.status_code == status, body[:40]
        assert response.json()["error"]["code"] == code
    # Over 1 MiB: refused by its Content-Length before a byte of it is read (the server may
    # close while the client still writes: a refusal either way).
    try:  # on a connection of its own: the server may close it
        response = httpx.post(
            f"{client.base_url}/v1/info", content=b"x" * (1 << 21), headers=client.headers
        )
    except httpx.TransportError:
        pass
    else:
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "too_large"
    assert client.post("/v1/no_such_command").status_code == 404
    assert client.post("/v1/info").status_code == 200


def test_events_stream_and_the_openapi_document(served: tuple[Daemon, Any]) -> None:
    _, client = served
    document = client.get("/v1/openapi.json").json()
    tags = {str(c.__struct_config__.tag) for room in ROOMS.values() for c in room}
    assert {p.removeprefix("/v1/") for p in document["paths"]} == tags | {"events"}
    schemas = document["components"]["schemas"]
    assert all(c.reply.__name__ in schemas for c in ALL_COMMANDS)
    with client.stream("GET", "/v1/events", timeout=20) as events:
        lines = events.iter_lines()
        assert next(lines).startswith(":")
        assert client.post("/v1/set_mode", json={"mode": "consumer"}).status_code == 200
        for line in lines:
            if line.startswith("data: "):
                event = json.loads(line.removeprefix("data: "))
                if event["type"] == "mode_changed":
                    assert event["mode"] == "consumer"
                    break


__all__ = ["daemons"]  # the fixture, imported for pytest
