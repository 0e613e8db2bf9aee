"""The narrow ports between the node's subsystems.

Each subsystem says in its constructor which of these it needs; ``Node`` (engine/node.py),
the composition root, builds the subsystems once and hands each the others behind these
ports. A port shared by one consumer only lives next to that consumer instead (the
network's ``NetworkCallbacks``, the metrics' ``MetricsSource``).

Ports are handed over as getters (``Callable[[], Port]``) where the subsystem behind them is
built on first use: py-libp2p and pycardano each cost a second or more to import, and a
one-shot CLI command must not pay for a room it never enters.

| port              | implemented by                    | used by                                |
|-------------------|-----------------------------------|----------------------------------------|
| ``PeerLink``      | network/service.py NetworkService | jobs (consumer, tunnels), jobs.attach; |
|                   |                                   | data (bitswap, DHT provider records)   |
| ``NetworkPort``   | network/link.py NodeNetwork       | jobs (provider, consumer, tunnels)     |
| ``EscrowPort``    | payments/escrow.py Escrows        | jobs (provider, consumer)              |
| ``WalletPort``    | payments/service.py NodePayments  | payments/escrow.py, payments/settle.py |
| ``JobsPort``      | jobs/service.py NodeJobs          | network/link.py NodeNetwork            |
| ``DataPort``      | data/service.py NodeData          | network/link.py NodeNetwork            |
| ``JobData``       | data/service.py NodeData          | jobs (provider: inputs, results by CID)|
| ``TotalsPort``    | node.py Node                      | network/link.py NodeNetwork            |
| ``NodeFacts``     | node.py Node                      | network/link.py NodeNetwork            |
| ``MachinePort``   | resources/machine.py MachineFacts | jobs (provider: offer, specs, GPUs)    |
| ``ContainerHost`` | resources/container_host.py       | jobs (the Docker executor)             |
| ``SandboxProbe``  | jobs/executors/sandbox.py probe   | resources/readiness.py, via probes.py  |
| ``CreditWindow``  | network/yamux_credit.py streams   | jobs (tunnels: wait_for_credit_up_to)  |
| ``OverlayCarriage``| network/overlay.py OverlayCarrier| jobs (overlay_join.py: a job's overlay)|

``OfferView`` is the one record of what a provider offers now (jobs/provider_offer.py makes
it): its admission judges it, and the network's advert and heartbeats carry the same object.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from engine import api

if TYPE_CHECKING:
    from engine.domain.peer_info import PeerInfo
    from engine.domain.specs import ResourceBook
    from engine.errors import EngineError

StreamHandler = Callable[[Any], Awaitable[None]]


@dataclass
class Committed:
    """What a provider's running jobs hold (their tiers' maximums)."""

    jobs: int = 0
    cpu_mhz: int = 0
    memory_mb: int = 0
    gpus: int = 0
    vram_mb: int = 0


@dataclass(frozen=True)
class OfferView:
    """What this provider offers now, made in one place (engine/jobs/provider_offer.py):
    its admission judges ``resources``, and the advert and heartbeats (network/link.py) are
    built from the same object, so what consumers match on is what the provider admits by."""

    # Onboarded and active: advertised and beating, and offers are judged (else refused).
    accepting: bool
    # As a consumer sees it: capacity, the free figures after running jobs' reservations,
    # the offered GPUs, prices, specs and pools, executors, frameworks, slots, shells.
    resources: api.PeerResources

    @property
    def vram_mb(self) -> int:
        """The offered GPUs' memory, all together."""
        return sum(gpu.vram_mb for gpu in self.resources.gpus)


class PeerLink(Protocol):
    """The running network service, as the job and tunnel protocols use it."""

    def peers(self) -> list[PeerInfo]:
        """The peers listed on our channel now."""
        ...

    def peer(self, peer_id: str) -> PeerInfo | None:
        """One listed peer (None: not listed, or gone)."""
        ...

    async def open_stream(self, peer_id: str, protocol: str) -> Any:
        """A new stream to ``peer_id`` speaking ``protocol`` (dial errors of many types)."""
        ...

    def path(self, peer_id: str, stream: Any = None) -> str:
        """How we reach ``peer_id`` now: "direct", "via relay <short id>", or "" (no
        connection); with ``stream``, the path of the connection that stream runs on."""
        ...

    def set_stream_handler(self, protocol: str, handler: StreamHandler) -> None:
        """Serve ``protocol``: each incoming stream goes to ``handler``."""
        ...

    def connected_peers(self) -> list[str]:
        """The peers we hold a connection to now, listed on our channel or not."""
        ...

    async def provide(self, key: str) -> None:
        """Announce in the DHT that we hold ``key`` (a CID): a provider record."""
        ...

    async def find_providers(self, key: str) -> list[str]:
        """The peers whose provider records for ``key`` the DHT holds (their word only)."""
        ...


class DataPort(Protocol):
    """The data room as the network sees it: serves bitswap on each (re)started host."""

    def attach(self, link: PeerLink) -> None:
        """Called each time the network (re)starts."""
        ...


class JobData(Protocol):
    """The data room as a provider's jobs use it: a job's inputs and published results by
    CID (issue 26)."""

    async def materialize(self, cid: str, peers: Sequence[str]) -> tuple[Path, int, bool]:
        """The root of ``cid`` as a read-only file or folder on this machine, fetched from
        ``peers`` first (then the DHT's providers) and verified if not here: (its path, its
        size in bytes, whether it was here already). EngineError saying why not."""
        ...

    async def publish(self, path: Path) -> str:
        """``path`` (a job's results) kept, pinned and announced in the DHT: its CID."""
        ...


class NetworkPort(Protocol):
    """The node's network as the other subsystems see it."""

    def require_service(self, what: str) -> PeerLink:
        """The running service, or an EngineError saying why ``what`` cannot be done now."""
        ...

    def beat_now(self) -> None:
        """Our free resources changed: send a heartbeat at once (nothing when offline)."""
        ...


class EscrowPort(Protocol):
    """A paid job's money, as the job protocol uses it (payments/escrow.py)."""

    def payment_address(self) -> str:
        """This node's wallet address to be paid into; EngineError ``no_wallet`` without."""
        ...

    async def lock(
        self,
        job_id: str,
        provider_peer: str,
        provider_address: str,
        lock_units: int,
        expected_minutes: float,
        slots: int = 1,
    ) -> tuple[str, str]:
        """Consumer: register the terms with the oracle and lock: (signed terms, lock tx)."""
        ...

    async def verify_lock(
        self, job_id: str, consumer_peer: str, lock_units: int, terms: str, lock_tx: str
    ) -> str:
        """Provider: why the chain does not hold the promised lock ("": it does)."""
        ...

    async def report_liveness(self, job_id: str) -> None:
        """Provider: tell the oracle we run the job, every interval, until cancelled."""
        ...

    def provider_receipt(self, job: api.JobInfo) -> str:
        """Provider: the signed receipt of a finished paid job ("" for an unpaid one)."""
        ...

    def accept_countersigned(self, job_id: str, consumer_peer: str, text: str) -> str:
        """Provider: take the consumer's countersignature or its offer ("" accepted, else
        why not)."""
        ...

    def kept_receipt(self, job_id: str) -> str:
        """Provider: the job's receipt as kept now (the one both signed, once they have)."""
        ...

    def awaiting_receipt(self, job_id: str) -> bool:
        """Consumer: the job's lock is in place and no receipt has come yet."""
        ...

    def provider_vanished(self, job: api.JobInfo) -> bool:
        """Consumer: our own receipt for a provider gone silent; whether one was made."""
        ...

    def never_ran(self, job: api.JobInfo) -> bool:
        """Consumer: the provider's final answer was a refusal: the refund asked for now."""
        ...

    def lock_of(self, job_id: str) -> tuple[str, str]:
        """Consumer: (signed terms, lock tx) of the job's lock; ("", "") without one."""
        ...

    async def countersign(self, job: api.JobInfo, text: str) -> str:
        """Consumer: check the provider's receipt and add our signature, or sign our offer
        (the receipt billing what we watched) for the provider to sign."""
        ...

    def offer_signed(self, job: api.JobInfo, text: str) -> str:
        """Consumer: the provider signed our offer; "" when kept, else why not."""
        ...

    def receipt_refused(self, job_id: str, reason: str) -> None:
        """Consumer: the provider refused our countersignature or offer: said on the escrow."""
        ...


class WalletPort(Protocol):
    """The wallet and the chain, as the escrow flow uses them (payments/service.py)."""

    def wallet(self) -> api.WalletInfo:
        """The wallet's public half, or an EngineError ``no_wallet``."""
        ...

    async def chain_context(self) -> Any:
        """The configured chain backend (a pycardano ``ChainContext``)."""
        ...

    async def payment_signing_key(self) -> Any:
        """The wallet's payment key, for signing inside the engine only."""
        ...


class JobsPort(Protocol):
    """The jobs room, as the network sees it."""

    def attach(self, link: PeerLink) -> None:
        """The network (re)started: serve the job protocols on it."""
        ...

    def offer(self) -> OfferView:
        """What this provider offers now (the advert and heartbeats carry it)."""
        ...


class TotalsPort(Protocol):
    """What this node ran, bought, earned and spent: figures of ``api.NetworkStatus``."""

    def job_totals(self) -> dict[str, Any]:
        """The job and NTX figures of ``api.NetworkStatus``, by its field names."""
        ...

    def ntx_claimed(self) -> int:
        """NTX this provider claimed, base units (for its heartbeats)."""
        ...


class NodeFacts(Protocol):
    """Facts of the node the network needs besides the offer."""

    def mode(self) -> api.Mode | None:
        """The mode the operator chose (provider, consumer), if any."""
        ...


@runtime_checkable
class CreditWindow(Protocol):
    """A muxed stream whose writes wait for the peer's window credit up to ``credit_wait_s``
    (the network room's yamux streams: engine/network/yamux_credit.py)."""

    credit_wait_s: float


def wait_for_credit_up_to(stream: Any, seconds: float) -> None:
    """Let writes on ``stream`` (a libp2p stream, or its muxed stream) wait up to ``seconds``
    for window credit: for a protocol that ends idle streams itself after ``seconds`` (the
    jobs room's tunnels). Streams without the capability are left as they are."""
    muxed = getattr(stream, "muxed_stream", stream)
    if isinstance(muxed, CreditWindow):
        muxed.credit_wait_s = seconds


class MachinePort(Protocol):
    """What a provider reads of its machine, from the resources room
    (engine/resources/machine.py ``MachineFacts``): the jobs room never imports that room."""

    def machine(self) -> api.Machine:
        """This machine, detected once (cores and MHz per core, as the node counts them)."""
        ...

    def onboarded(self, onboarding: api.Onboarding | None, full: api.Capacity) -> api.Capacity:
        """What the provider offered of ``full`` (zeros when not onboarded)."""
        ...

    def resource_book(self) -> ResourceBook:
        """The specs, pools and custom resources it sells; EngineError naming the file when
        the file does not read."""
        ...

    def gpu_status(self) -> Callable[[], Any]:
        """The live GPU status (the GPU service's ``status``), its sampler started on first
        use."""
        ...


class ContainerEngine(Protocol):
    """The engine behind DOCKER_HOST (Docker or Podman), as far as a job's container cares
    (engine/resources/container_engine.py ``EngineFacts``)."""

    @property
    def rootless(self) -> bool:
        """Container root is the engine's own unprivileged user."""
        ...

    @property
    def job_user(self) -> str | None:
        """Who a job's container runs as; None keeps the executor's own choice."""
        ...


class ContainerHost(Protocol):
    """What the Docker executor asks of the host's container engine and GPUs, from the
    resources room (engine/resources/container_host.py ``ContainerFacts``): the jobs room
    never imports that room. Every method may block: the executor calls them from a worker
    thread where it says so."""

    def engine(self, client: Any) -> ContainerEngine:
        """Which engine answers docker-py's ``client`` (blocking); one that cannot say counts
        as rootful Docker."""
        ...

    def nvidia_device_ids(self, gpus: Sequence[api.GpuInfo]) -> list[str]:
        """The ids NVIDIA's container toolkit takes for exactly ``gpus``."""
        ...

    def job_gpu_options(self, gpus: Sequence[api.GpuInfo]) -> dict[str, Any]:
        """docker-py options that give a job's container exactly ``gpus`` and nothing else;
        EngineError when a card cannot be named precisely."""
        ...

    def check_gpu_runtime(self, vendor: api.GpuVendor, docker_host: str | None) -> None:
        """Blocking: an EngineError saying what to do, now, when the engine at
        ``docker_host`` (None: the default) cannot give containers ``vendor``'s GPUs."""
        ...

    def explain_error(self, exc: BaseException) -> EngineError | None:
        """The engine's cryptic GPU failure ``exc`` as what to do; None for anything else."""
        ...


class SandboxStatus(Protocol):
    """Whether the process executor can sandbox a job here (jobs/executors/sandbox.py)."""

    @property
    def usable(self) -> bool: ...

    @property
    def detail(self) -> str:
        """What works, or why not and what to do."""
        ...


# The jobs room's sandbox probe (jobs/executors/sandbox.py ``probe``), as the resources room's
# readiness checks ask it; engine/probes.py hands one to the other.
SandboxProbe = Callable[[], SandboxStatus]


class PacketDevice(Protocol):
    """A container's end of a job's overlay (jobs/executors/overlay_tun.py ``TunDevice``):
    whole IPv4 packets."""

    async def read(self) -> bytes:
        """The next packet the container sent (OSError once the device is gone)."""
        ...

    def write(self, packet: bytes) -> bool:
        """Hand a packet to the container; False when it was dropped (its queue full)."""
        ...


class OverlayCarriage(Protocol):
    """A job's overlay carried between providers (issue 25 §2; docs/cluster-overlay.md)."""

    async def carry(
        self,
        job_id: str,
        subnet: str,
        address: str,
        members: Sequence[api.OverlayMember],
        device: PacketDevice,
        task_status: Any = ...,
    ) -> None:
        """Pump ``device``'s packets to the job's other members and theirs to it, until
        cancelled; started with ``nursery.start``."""
        ...

    def joined(self, job_id: str) -> bool:
        """Whether this node carries the job's overlay now."""
        ...

    def stats(self, job_id: str = "") -> tuple[api.OverlayStats, ...]:
        """What each overlay (``job_id``'s, or all) carried and refused."""
        ...
