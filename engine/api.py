"""The facade's vocabulary: commands, their replies, and events.

Everything here is an immutable msgspec Struct, so the very same objects travel in-process
(the TUI's embedded engine), over the control socket (daemon + CLI) and through tests.
Each command names the Struct it is answered with in ``reply``; ``decode_reply`` uses it to
turn wire JSON back into typed objects.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import msgspec

Mode = Literal["provider", "consumer"]
CapacityView = Literal["full", "available", "onboarded"]
OnboardingState = Literal["active", "paused"]

DEFAULT_CHANNEL = "nunet-test"


class Record(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every plain data object the facade hands out."""


# --- data --------------------------------------------------------------------------------


class GpuInfo(Record, frozen=True):
    index: int
    vendor: Literal["nvidia", "amd", "intel"]
    name: str
    vram_mb: int
    uuid: str = ""


class Machine(Record, frozen=True):
    hostname: str
    os: str
    kernel: str
    arch: str
    cpu_model: str
    cpu_cores: int
    cpu_mhz_per_core: int


class Capacity(Record, frozen=True):
    """One of the three views of what this machine offers, in NuNet's units."""

    view: CapacityView
    cpu_cores: int
    cpu_mhz: int  # total: cores x MHz per core, as NuNet counts it
    memory_mb: int
    disk_mb: int
    gpus: tuple[GpuInfo, ...] = ()
    gpu_reason: str | None = None  # why no GPU was read (no driver, library missing, ...)
    cpu_load_percent: float | None = None  # only in the "available" view


class Onboarding(Record, frozen=True):
    memory_mb: int
    cpu_mhz: int
    channel: str
    address: str
    local_discovery: bool = False
    cardano_node: bool = False
    gpus: tuple[str, ...] = ()  # UUIDs of the GPUs offered
    state: OnboardingState = "active"
    onboarded_at: float = 0.0
    updated_at: float = 0.0


class Check(Record, frozen=True):
    ok: bool
    detail: str


class Readiness(Record, frozen=True):
    """Whether this machine can run ML jobs, and what to do about it when not."""

    docker: Check
    gpu_driver: Check
    gpu_runtime: Check


class NodeInfo(Record, frozen=True):
    peer_id: str
    version: str
    home: str
    mode: Mode | None
    machine: Machine
    onboarded: Onboarding | None
    readiness: Readiness
    daemon: bool
    started_at: float


class PeerSelf(Record, frozen=True):
    peer_id: str
    addrs: tuple[str, ...] = ()


class Done(Record, frozen=True):
    """Reply of commands that have nothing to report beyond success."""

    message: str = ""


class ProblemItem(Record, frozen=True):
    field: str
    message: str


class Validation(Record, frozen=True):
    ok: bool
    problems: tuple[ProblemItem, ...] = ()


# --- commands ----------------------------------------------------------------------------


class Command(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", forbid_unknown_fields=True
):
    reply: ClassVar[type[Any]] = Done


class GetCapacity(Command, tag="get_capacity", frozen=True):
    reply = Capacity
    view: CapacityView = "full"


class OnboardRequest(Command, tag="onboard", frozen=True):
    reply = Onboarding
    memory_mb: int
    cpu_mhz: int
    address: str
    channel: str = DEFAULT_CHANNEL
    local_discovery: bool = False
    cardano_node: bool = False
    gpus: tuple[str, ...] | None = None  # None: every GPU found; (): none


class CheckOnboarding(Command, tag="check_onboarding", frozen=True):
    """Validate an onboarding without applying it: the TUI form calls this as you type."""

    reply = Validation
    memory_mb: int | None = None
    cpu_mhz: int | None = None
    address: str = ""
    channel: str = DEFAULT_CHANNEL
    cardano_node: bool = False
    gpus: tuple[str, ...] | None = None


class ResourceConfig(Command, tag="resource_config", frozen=True):
    reply = Onboarding
    memory_mb: int
    cpu_mhz: int


class Pause(Command, tag="pause", frozen=True):
    reply = Onboarding


class Resume(Command, tag="resume", frozen=True):
    reply = Onboarding


class Offboard(Command, tag="offboard", frozen=True):
    reply = Done


class GetInfo(Command, tag="info", frozen=True):
    reply = NodeInfo


class GetPeerSelf(Command, tag="peer_self", frozen=True):
    reply = PeerSelf


class SetMode(Command, tag="set_mode", frozen=True):
    reply = Done
    mode: Mode


AnyCommand = (
    GetCapacity
    | OnboardRequest
    | CheckOnboarding
    | ResourceConfig
    | Pause
    | Resume
    | Offboard
    | GetInfo
    | GetPeerSelf
    | SetMode
)


# --- events ------------------------------------------------------------------------------


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    at: float


class OnboardingChanged(Event, tag="onboarding_changed", frozen=True):
    onboarding: Onboarding | None


class ModeChanged(Event, tag="mode_changed", frozen=True):
    mode: Mode


class EngineStopping(Event, tag="engine_stopping", frozen=True):
    reason: str


AnyEvent = OnboardingChanged | ModeChanged | EngineStopping


# --- wire helpers ------------------------------------------------------------------------


def to_builtins(obj: object) -> Any:
    return msgspec.to_builtins(obj)


def decode_command(data: object) -> Command:
    return msgspec.convert(data, AnyCommand)


def decode_reply(command: Command, data: object) -> Any:
    return msgspec.convert(data, command.reply)


def decode_event(data: object) -> Event:
    return msgspec.convert(data, AnyEvent)
