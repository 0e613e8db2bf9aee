"""What providers offer, as records every room and the API share: resource specs priced per
machine-hour, the pools and groups that reserve them, custom resources, and a peer with its
offer (from its signed advert) and load (from its heartbeats).

Records only; the rules over them are in specs.py, admission.py and matching.py. engine.api
re-exports each (``api.ResourceSpec``, ``api.Peer``). Every amount is an ``int`` in NTX base
units (1 NTX = 1_000_000).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from engine.domain.record import Record
from engine.domain.reputation import Reputation

DEFAULT_POOL = "default"  # open to everyone; never defined, never removed

CustomKind = Literal["gpu", "accelerator"]


class CustomResource(Record, frozen=True):
    """A provider's name for resources: detected GPUs regrouped (``from_gpus``: their
    indexes) or an accelerator detection does not know (``from_gpus`` None: declared)."""

    name: str
    kind: CustomKind = "gpu"
    count: int = 1
    from_gpus: tuple[int, ...] | None = None
    vram_mb: int = 0
    model: str = ""


class ResourceSpec(Record, frozen=True):
    """What a consumer picks: resources and a price per machine-hour, in one pool."""

    name: str
    cpu_cores: int
    ram_mb: int
    price_units_hour: int
    disk_mb: int = 0
    gpus: int = 0
    gpu_resource: str | None = None  # a custom resource's name (None: any onboarded GPU)
    min_charge_units: int = 0
    pool: str = DEFAULT_POOL


class Group(Record, frozen=True):
    """A named set of consumers' peer ids, filled by the provider."""

    name: str
    members: tuple[str, ...] = ()


class Pool(Record, frozen=True):
    """Who may use the specs in this pool: peer ids, and the members of named groups."""

    name: str
    members: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


class PeerGpu(Record, frozen=True):
    vendor: str
    model: str
    vram_mb: int


class PeerResources(Record, frozen=True):
    """A provider's offer (from its signed advert) and load (from its heartbeats)."""

    cpu_mhz: int = 0
    memory_mb: int = 0
    disk_mb: int = 0
    gpus: tuple[PeerGpu, ...] = ()
    # tier -> its price per machine-hour, NTX base units (a provider selling NuNet's tiers)
    price_units: dict[str, int] = msgspec.field(default_factory=dict)
    executors: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()
    version: str = ""
    slots: int = 1
    shell: bool = True  # the provider lets consumers open `job shell` into their jobs
    free_cpu_mhz: int | None = None
    free_memory_mb: int | None = None
    free_gpus: int | None = None
    free_vram_mb: int | None = None
    running_jobs: int | None = None
    claimed_units: int | None = None  # NTX base units claimed from escrows (its heartbeat)
    uptime_s: float | None = None
    # Issue 12: the resource specs it sells (empty: none defined, its tiers' prices stand for
    # NuNet's default specs) and the pools that reserve some of them (members: peer ids).
    specs: tuple[ResourceSpec, ...] = ()
    pools: tuple[Pool, ...] = ()


class Peer(Record, frozen=True):
    peer_id: str
    addrs: tuple[str, ...] = ()
    relayed: bool = False
    latency_ms: float | None = None
    channel: str = ""
    resources: PeerResources | None = None
    last_seen: float = 0.0
    last_heartbeat: float | None = None
    # We talked to it directly (a connection proved its key); False: known from relayed
    # adverts only, which anyone can forward (issue 21; engine/network/peers.py).
    verified: bool = False
    # The provider's name from its signed advert ("" without one; engine/domain/peer_names.py):
    # never shown alone, always with the peer id (``peer_label``).
    display_name: str = ""
    # Its record with us (issue 27 §2; engine/domain/reputation.py), from our own jobs and
    # escrows; None: no history with us, or a peer list that did not ask.
    reputation: Reputation | None = None
