"""One registry of the engine's commands: which room answers each one.

``ROOMS`` is the only list. The control socket decodes ``AnyCommand``, derived from it, and the
node dispatches through ``Dispatch``, also derived from it: a command a room answers crosses
the socket, and one the socket takes reaches its room. Each room states its handlers once, in
its ``commands()`` ({command type: handler}); the two are checked against each other when a
room is bound (and by tests/engine/test_command_registry.py), so they cannot drift apart silently.

The command types are listed here, and not collected from the rooms, because the rooms load
on first use: py-libp2p and pycardano each take a second or more to import, and decoding or
routing ``job list`` must not load the network.
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec

from engine import api
from engine.errors import EngineError

Handler = Callable[[Any], Awaitable[Any]]
Handlers = Mapping[type[api.Command], Handler]

ROOMS: dict[str, tuple[type[api.Command], ...]] = {
    # engine/node.py: capacity, onboarding, identity, mode, starting the network
    "node": (
        api.GetCapacity,
        api.OnboardRequest,
        api.CheckOnboarding,
        api.ResourceConfig,
        api.Pause,
        api.Resume,
        api.Offboard,
        api.GetInfo,
        api.GetPeerSelf,
        api.SetMode,
        api.StartNetwork,
    ),
    # engine/resources/gpu/commands.py
    "gpu": (api.GetGpuStatus, api.GpuDoctor, api.GpuCapabilities, api.PrepareMlImages),
    # engine/network/link.py NodeNetwork
    "network": (
        api.ListPeers,
        api.ChatStart,
        api.ChatList,
        api.ChatJoin,
        api.ChatClear,
        api.ChatSend,
        api.ChatHistory,
        api.GetNetworkStatus,
        api.NetworkDoctor,
    ),
    # engine/jobs/service.py NodeJobs
    "jobs": (
        api.SubmitJob,
        api.ResubmitJob,
        api.ListJobs,
        api.GetJob,
        api.GetJobLogs,
        api.GetJobUsage,
        api.CancelJob,
        api.FetchJobResults,
        api.JobForward,
        api.JobForwardClose,
        api.ListForwards,
        api.JobShell,
        api.StopJob,
        api.DeleteJobResults,
        # jobs/overlay_join.py: a job's private network across providers (issue 25 §2)
        api.OverlayJoin,
        api.OverlayLeave,
        api.OverlayStatus,
    ),
    # engine/resources/commands.py: what a provider sells (issue 12)
    "resources": (
        api.ResourceList,
        api.SpecAdd,
        api.SpecRemove,
        api.CheckSpec,
        api.CustomAdd,
        api.CustomRemove,
        api.PoolAdd,
        api.PoolRemove,
        api.GroupAdd,
        api.GroupRemove,
    ),
    # engine/data/service.py NodeData: files and folders by content id (issue 26)
    "data": (
        api.DataAdd,
        api.DataGet,
        api.DataList,
        api.DataPin,
        api.DataUnpin,
        api.DataRemove,
    ),
    # engine/payments/service.py NodePayments
    "payments": (
        api.WalletNew,
        api.WalletImport,
        api.WalletShow,
        api.WalletBalance,
        api.WalletRecharges,
        api.UnlockKeystore,
        api.SetBlockfrostProjectId,
        api.RewardList,
        api.RewardClaim,
        api.RewardRefund,
    ),
}

ROOM_OF: dict[type[api.Command], str] = {
    command: room for room, commands in ROOMS.items() for command in commands
}
ALL_COMMANDS: tuple[type[api.Command], ...] = tuple(ROOM_OF)
assert len(ALL_COMMANDS) == sum(map(len, ROOMS.values())), "a command is listed in two rooms"

_union: Any = typing.Union
# What the control socket decodes: every command some room answers, and no other.
AnyCommand: Any = _union[ALL_COMMANDS]


def decode_command(data: object) -> api.Command:
    """A command from its wire form (msgspec.ValidationError when it is none of ours)."""
    command: api.Command = msgspec.convert(data, AnyCommand)
    return command


def command_error(exc: msgspec.ValidationError) -> EngineError:
    """The one-line error for a command that did not decode. A job spec is typed in its
    command (api.SubmitJob), so a bad one is refused here, and said so as the engine's own
    check says it (consumer.submit: "job spec: ...")."""
    text = str(exc)
    if text.endswith("at `$.spec`") or "at `$.spec." in text or "at `$.spec[" in text:
        return EngineError("invalid", f"job spec: {text}")
    return EngineError("protocol", f"bad command: {text}")


def check_room(room: str, handlers: Handlers) -> None:
    """Raise when a room's handlers are not exactly the commands ``ROOMS`` gives it."""
    declared, handled = set(ROOMS[room]), set(handlers)
    if declared != handled:
        missing = sorted(c.__name__ for c in declared - handled)
        extra = sorted(c.__name__ for c in handled - declared)
        raise EngineError(
            "internal",
            f"the {room} room's commands differ from engine/commands.py: "
            f"no handler for {missing or 'none'}, not listed: {extra or 'none'}",
        )


class Dispatch:
    """The node's dispatch table: each command to its room's handler, the room bound (and
    so built) on its first command."""

    def __init__(self, rooms: Mapping[str, Callable[[], Handlers]]) -> None:
        if set(rooms) != set(ROOMS):
            raise ValueError(f"rooms {sorted(rooms)} differ from {sorted(ROOMS)}")
        self._rooms = rooms
        self._bound: dict[str, Handlers] = {}

    def handlers(self, room: str) -> Handlers:
        bound = self._bound.get(room)
        if bound is None:
            bound = dict(self._rooms[room]())
            check_room(room, bound)
            self._bound[room] = bound
        return bound

    async def handle(self, command: api.Command) -> Any:
        room = ROOM_OF.get(type(command))
        if room is None:
            raise EngineError(
                "unknown_command", f"this node does not handle {type(command).__name__}"
            )
        return await self.handlers(room)[type(command)](command)
