"""This node: its machine, capacity, onboarding and mode (engine/onboarding.py, engine/node.py)."""

from __future__ import annotations

from typing import Literal

from engine.api.base import Command, Done, Event, Record

Mode = Literal["provider", "consumer"]
CapacityView = Literal["full", "available", "onboarded"]


OnboardingState = Literal["active", "paused"]
DEFAULT_CHANNEL = "nunet-test"


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
    # Whether process jobs can be sandboxed here (bubblewrap, user namespaces): None from an
    # engine too old to say.
    sandbox: Check | None = None


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
    channel: str = DEFAULT_CHANNEL  # the onboarding's, or the one a consumer watches


class PeerSelf(Record, frozen=True):
    peer_id: str
    addrs: tuple[str, ...] = ()


class ProblemItem(Record, frozen=True):
    field: str
    message: str


class Validation(Record, frozen=True):
    ok: bool
    problems: tuple[ProblemItem, ...] = ()


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


class StartNetwork(Command, tag="start_network", frozen=True):
    """Bring a node started with a deferred network online (the TUI, after its first frame)."""

    reply = Done


class SetMode(Command, tag="set_mode", frozen=True):
    reply = Done
    mode: Mode


class OnboardingChanged(Event, tag="onboarding_changed", frozen=True):
    onboarding: Onboarding | None


class ModeChanged(Event, tag="mode_changed", frozen=True):
    mode: Mode


class EngineStopping(Event, tag="engine_stopping", frozen=True):
    reason: str


class DaemonConnection(Event, tag="daemon_connection", frozen=True):
    """An attached client lost its daemon (``online`` False, at once) or reached it again.
    Made by the client itself (engine/reconnect.py), never sent by a daemon."""

    online: bool
    detail: str
    retry_in_s: float = 0.0  # offline: when the next attempt to reconnect is
