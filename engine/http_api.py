"""The local HTTP API (issue 27 §3): every engine command over HTTP, events as Server-Sent
Events, and an OpenAPI document, all from the one registry the control socket decodes
(engine/commands.py ``ROOMS``): no second list.

    POST /v1/<command>     a command's fields as a JSON object ("type" is the path's);
                           200 with its reply, or 4xx/5xx with {"error": {code, message,
                           problems}}: the control socket's answer (engine/control.py ``answer``)
    GET  /v1/events        text/event-stream: each engine event, ``event: <type>``, JSON data
    GET  /v1/openapi.json  the document, generated from the commands' and replies' types

Opt-in (``[api] listen``), on Starlette served by Hypercorn's trio worker inside the engine's
own trio loop, so a request is handled as the control socket's are. Every route but the
OpenAPI document needs ``Authorization: Bearer <token>``, the token kept in
``<home>/state/api-token`` (0600, made on first start), compared in constant time. Input is
bounded as the control socket's is: a body of at most 1 MiB, a JSON object, decoded by the
commands' own types; at most ``MAX_EVENT_STREAMS`` event streams at once, each dropped when it
falls ``EVENT_BACKLOG`` events behind.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import trio

from engine import api
from engine.commands import ALL_COMMANDS, ROOM_OF
from engine.control import answer
from engine.control_client import MAX_LINE
from engine.errors import EngineError

log = logging.getLogger("nunet.api")

MAX_BODY = MAX_LINE
MAX_EVENT_STREAMS = 8
EVENT_BACKLOG = 1000
# The HTTP status each engine error code is answered with (others: 409, refused as it stands).
STATUS = {
    "invalid": 400,
    "protocol": 400,
    "unsafe_path": 400,
    "bad_job_id": 400,
    "unauthorized": 401,
    "not_found": 404,
    "too_large": 413,
    "internal": 500,
    "offline": 503,
}
TAGS: dict[str, type[api.Command]] = {
    str(command.__struct_config__.tag): command for command in ALL_COMMANDS
}


def api_token(state_dir: Path) -> tuple[str, Path]:
    """The API's token, made on first use (0600, never replaced), and where it is kept."""
    path = state_dir / "api-token"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
    if path.stat().st_mode & 0o077:
        raise EngineError("unsafe", f"{path} may be read by others: chmod 600 it")
    return path.read_text().strip(), path


def build_app(node: Any, token: str, token_path: Path) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    streams = [0]

    def error(code: str, message: str) -> Response:
        body = {"error": {"code": code, "message": message, "problems": []}}
        return JSONResponse(body, status_code=STATUS.get(code, 409))

    def refused(request: Request) -> Response | None:
        given = request.headers.get("authorization", "")
        expected = f"Bearer {token}"
        if hmac.compare_digest(given.encode(), expected.encode()):
            return None
        return error(
            "unauthorized",
            f"missing or wrong token: send 'Authorization: Bearer <token>', the token in "
            f"{token_path}",
        )

    async def command(request: Request) -> Response:
        if (no := refused(request)) is not None:
            return no
        tag = request.path_params["command"]
        if tag not in TAGS:
            return error("not_found", f"no command {tag[:64]!r}: /v1/openapi.json lists them")
        declared = request.headers.get("content-length", "0")
        if not declared.isdigit() or int(declared) > MAX_BODY:
            return error("too_large", f"a request body over {MAX_BODY} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return error("too_large", f"a request body over {MAX_BODY} bytes")
        try:
            fields = json.loads(body) if body.strip() else {}
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error("protocol", f"the body is not JSON: {exc}")
        if not isinstance(fields, dict):
            return error("protocol", "the body must be a JSON object of the command's fields")
        if fields.setdefault("type", tag) != tag:
            return error("protocol", f"the body's type {fields['type']!r} is not {tag!r}")
        result = await answer(node, fields)
        if "ok" in result:
            return JSONResponse(result["ok"])
        wire = result["error"]
        return JSONResponse({"error": wire}, status_code=STATUS.get(str(wire["code"]), 409))

    async def events(request: Request) -> Response:
        if (no := refused(request)) is not None:
            return no
        if streams[0] >= MAX_EVENT_STREAMS:
            return error("busy", f"{MAX_EVENT_STREAMS} event streams are open already")
        sender, receiver = trio.open_memory_channel[api.Event | None](EVENT_BACKLOG)

        def sink(event: api.Event) -> None:
            try:
                sender.send_nowait(event)
            except trio.WouldBlock:
                # A client that stops reading must not hold the engine's memory hostage.
                log.warning("an event stream fell %d events behind: closed", EVENT_BACKLOG)
                sender.close()
            except trio.ClosedResourceError:
                pass

        async def stream() -> AsyncIterator[bytes]:
            streams[0] += 1
            remove = node.add_sink(sink)
            try:
                yield b": nunet-tui events\n\n"
                async with receiver:
                    async for event in receiver:
                        if event is None:
                            return
                        data = msgspec.json.encode(api.to_builtins(event))
                        kind = str(type(event).__struct_config__.tag)
                        yield b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"
            finally:
                remove()
                sender.close()
                streams[0] -= 1

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def openapi_document(request: Request) -> Response:
        return JSONResponse(openapi())

    return Starlette(
        routes=[
            Route("/v1/openapi.json", openapi_document, methods=["GET"]),
            Route("/v1/events", events, methods=["GET"]),
            Route("/v1/{command}", command, methods=["POST"]),
        ]
    )


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 document of every command in ``ROOMS``, its body and its reply."""
    replies = sorted({c.reply for c in ALL_COMMANDS}, key=lambda t: t.__name__)
    schemas, components = msgspec.json.schema_components(
        [*ALL_COMMANDS, *replies], ref_template="#/components/schemas/{name}"
    )
    for command in ALL_COMMANDS:  # the path names the command: "type" may be left out
        component = components.get(command.__name__, {})
        if "type" in component.get("required", []):
            component["required"] = [f for f in component["required"] if f != "type"]
    error_schema = {
        "type": "object",
        "properties": {
            "error": {
                "type": "object",
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "problems": {"type": "array"},
                },
            }
        },
    }
    paths: dict[str, Any] = {}
    for command, schema in zip(ALL_COMMANDS, schemas, strict=False):
        tag = str(command.__struct_config__.tag)
        doc = (command.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        paths[f"/v1/{tag}"] = {
            "post": {
                "operationId": tag,
                "summary": doc or command.__name__,
                "tags": [ROOM_OF[command]],
                "security": [{"token": []}],
                "requestBody": {"content": {"application/json": {"schema": schema}}},
                "responses": {
                    "200": {
                        "description": command.reply.__name__,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": f"#/components/schemas/{command.reply.__name__}"}
                            }
                        },
                    },
                    "default": {
                        "description": "the engine's error",
                        "content": {"application/json": {"schema": error_schema}},
                    },
                },
            }
        }
    paths["/v1/events"] = {
        "get": {
            "operationId": "events",
            "summary": "The engine's events as Server-Sent Events",
            "security": [{"token": []}],
            "responses": {"200": {"description": "text/event-stream"}},
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "nunet-tui engine", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        },
    }


async def serve_http_api(
    node: Any,
    listen: str,
    state_dir: Path,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    started: Callable[[str], None] = lambda where: None,
) -> None:
    """Serves the API on ``listen`` (HOST:PORT) until cancelled."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    token, token_path = api_token(state_dir)
    config = Config()
    config.bind = [listen]
    config.accesslog = None
    config.errorlog = logging.getLogger("nunet.api.server")
    config.keep_alive_timeout = 30
    config.h11_max_incomplete_size = 16 * 1024  # request line and headers
    config.graceful_timeout = 1
    app = build_app(node, token, token_path)
    log.info("HTTP API on http://%s (token in %s)", listen, token_path)
    started(listen)
    await serve(app, config, shutdown_trigger=trio.sleep_forever, task_status=task_status)  # type: ignore[arg-type]
