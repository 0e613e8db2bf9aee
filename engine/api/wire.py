"""The wire: the events' union, and the helpers that (de)code replies and events.

Commands are decoded by engine/commands.py (``decode_command``), from the registry of rooms.
"""

from __future__ import annotations

from typing import Any

import msgspec

from engine.api.base import Command, Event
from engine.api.gpus import ImagePullProgress
from engine.api.jobs import JobChanged, JobLogEvent, SubmitProgress
from engine.api.network import ChatMessageEvent, ChatRequestEvent, NetworkChanged, PeerChanged
from engine.api.node import DaemonConnection, EngineStopping, ModeChanged, OnboardingChanged
from engine.api.payments import EscrowChanged
from engine.api.resources import ResourcesChanged

# The commands' union is derived from the registry of rooms: engine/commands.py AnyCommand
# (the socket decodes it; a second list kept here drifted from the node's dispatch before).

AnyEvent = (
    JobChanged
    | EscrowChanged
    | JobLogEvent
    | SubmitProgress
    | OnboardingChanged
    | ModeChanged
    | EngineStopping
    | DaemonConnection
    | ImagePullProgress
    | PeerChanged
    | ChatMessageEvent
    | ChatRequestEvent
    | NetworkChanged
    | ResourcesChanged
)


def to_builtins(obj: object) -> Any:
    return msgspec.to_builtins(obj)


def decode_reply(command: Command, data: object) -> Any:
    return msgspec.convert(data, command.reply)


def decode_event(data: object) -> Event:
    return msgspec.convert(data, AnyEvent)
