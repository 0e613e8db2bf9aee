"""One registry of commands (engine/commands.py): every command type of the facade is
decoded by the control socket and routed to a handler of the room that answers it; each
room's handlers are exactly what the registry gives it. ``StartNetwork`` was handled by the
node but missing from the socket's union: it crosses the socket now."""

from __future__ import annotations

import typing
from pathlib import Path

import msgspec
import pytest

from engine import api
from engine.commands import ALL_COMMANDS, ROOM_OF, ROOMS, AnyCommand, Dispatch, decode_command
from engine.config import Paths, load_settings
from engine.control_client import ControlClient
from engine.errors import EngineError
from engine.facade import Engine
from engine.identity import load_or_create
from engine.node import Node
from engine.store import Store


def command_types() -> set[type[api.Command]]:
    found: set[type[api.Command]] = set()
    todo = list(api.Command.__subclasses__())
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_every_command_type_is_in_the_registry_once_and_in_the_socket_union() -> None:
    assert command_types() == set(ALL_COMMANDS)
    assert set(typing.get_args(AnyCommand)) == set(ALL_COMMANDS)
    assert len(ALL_COMMANDS) == sum(len(commands) for commands in ROOMS.values())
    assert not hasattr(api, "AnyCommand")  # no second, hand-kept list of commands


def test_every_command_decodes_from_its_wire_form() -> None:
    """By its tag: the socket must never answer "bad command" to a command of ours."""
    for command in ALL_COMMANDS:
        tag = msgspec.inspect.type_info(command).tag  # type: ignore[attr-defined]
        try:
            decoded = decode_command({"type": tag})
        except msgspec.ValidationError as exc:
            # Commands with required fields: the tag was recognised, a field is missing.
            assert "missing required field" in str(exc), (command, exc)
        else:
            assert type(decoded) is command
    with pytest.raises(msgspec.ValidationError):
        decode_command({"type": "no_such_command"})


def test_every_command_is_routed_to_a_handler_of_its_room(node_home: Paths) -> None:
    settings = load_settings(node_home)
    node = Node(
        node_home,
        settings,
        load_or_create(node_home.identity_key),
        Store(node_home.database),
        daemon=False,
    )
    for command in ALL_COMMANDS:
        handler = node._dispatch.handlers(ROOM_OF[command])[command]
        assert callable(handler), command
    assert ROOM_OF[api.StartNetwork] == "node"


def test_a_room_whose_handlers_differ_from_the_registry_is_refused() -> None:
    async def answer(command: api.Command) -> api.Done:
        return api.Done()

    rooms = {room: (lambda: {}) for room in ROOMS}
    rooms["gpu"] = lambda: {api.GetGpuStatus: answer}  # three GPU commands without a handler
    dispatch = Dispatch(rooms)
    with pytest.raises(EngineError) as info:
        dispatch.handlers("gpu")
    assert info.value.code == "internal"
    assert "GpuDoctor" in info.value.message
    with pytest.raises(ValueError):
        Dispatch({"node": lambda: {}})


def test_start_network_crosses_the_control_socket(engine_client: Engine, node_home: Paths) -> None:
    client = ControlClient(node_home.control_socket)
    try:
        reply = client.call_blocking(api.StartNetwork())
    finally:
        client.close()
    assert reply == api.Done(message="this engine runs without the network")


def test_the_registry_module_loads_no_room(tmp_path: Path) -> None:
    """Decoding and routing must not import py-libp2p or pycardano (seconds each)."""
    import subprocess
    import sys

    code = (
        "import sys, engine.commands, engine.control\n"
        "heavy = [m for m in ('libp2p', 'pycardano', 'engine.network.link',"
        " 'engine.jobs.service', 'engine.payments.service') if m in sys.modules]\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
