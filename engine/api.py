"""The facade's vocabulary: commands, their replies, and events.

Everything here is an immutable msgspec Struct, so the very same objects travel in-process
(the TUI's embedded engine), over the control socket (daemon + CLI) and through tests.
Each command names the Struct it is answered with in ``reply``; ``decode_reply`` uses it to
turn wire JSON back into typed objects.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

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
    channel: str = DEFAULT_CHANNEL  # the onboarding's, or the one a consumer watches


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


# --- network data --------------------------------------------------------------------------


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
    prices: dict[str, float] = msgspec.field(default_factory=dict)  # tier -> NTX per hour
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
    ntx_claimed: float | None = None  # NTX the provider has claimed from escrows (heartbeat)
    uptime_s: float | None = None


class Peer(Record, frozen=True):
    peer_id: str
    addrs: tuple[str, ...] = ()
    relayed: bool = False
    latency_ms: float | None = None
    channel: str = ""
    resources: PeerResources | None = None
    last_seen: float = 0.0
    last_heartbeat: float | None = None


class PeerList(Record, frozen=True):
    channel: str | None
    peers: tuple[Peer, ...] = ()


class ChatMessage(Record, frozen=True):
    peer_id: str  # the other side of the conversation
    sender: str = msgspec.field(name="from")
    text: str
    at: float
    seq: int | None = None
    direction: Literal["in", "out"] = "in"
    # delivered: acknowledged by the peer; queued: waiting for the peer to come back
    status: Literal["delivered", "queued", "received"] = "received"


class ChatRequest(Record, frozen=True):
    id: int
    peer_id: str
    at: float


class ChatConversation(Record, frozen=True):
    peer_id: str
    messages: int
    last_at: float


class ChatOverview(Record, frozen=True):
    requests: tuple[ChatRequest, ...] = ()
    conversations: tuple[ChatConversation, ...] = ()


class ChatHistoryReply(Record, frozen=True):
    peer_id: str
    messages: tuple[ChatMessage, ...] = ()


class ChannelTotals(Record, frozen=True):
    providers: int = 0
    cpu_mhz: int = 0
    free_cpu_mhz: int = 0
    memory_mb: int = 0
    free_memory_mb: int = 0
    gpus: int = 0
    free_gpus: int = 0
    vram_mb: int = 0
    free_vram_mb: int = 0
    running_jobs: int = 0
    ntx_paid: float = 0.0  # NTX providers on the channel have claimed from escrows


class NetworkStatus(Record, frozen=True):
    """NuNet's network-status dashboard, from the heartbeats this node has heard."""

    channel: str | None
    online: bool
    listen_addrs: tuple[str, ...] = ()
    connected_peers: int = 0
    totals: ChannelTotals = msgspec.field(default_factory=ChannelTotals)
    cpu_utilisation_percent: float | None = None
    memory_utilisation_percent: float | None = None
    peers: tuple[Peer, ...] = ()
    # This node's own jobs, from their metering: what it ran and earned, what it bought.
    jobs_run: int = 0
    cpu_mticks_run: float = 0.0
    ntx_earned: float = 0.0
    jobs_bought: int = 0
    ntx_spent: float = 0.0
    # This node's NTX that moved on chain through the escrow (paid jobs).
    ntx_claimed: float = 0.0
    ntx_paid_out: float = 0.0
    ntx_locked: float = 0.0
    # Handler and task failures contained since the node started, by name (supervise.py).
    contained_failures: dict[str, int] = msgspec.field(default_factory=dict)


# --- jobs data (issue 5) ------------------------------------------------------------------

JobState = Literal[
    "pending",  # consumer: created, looking for a provider
    "accepted",  # both sides agreed; the provider prepares it
    "running",
    "completed",
    "failed",  # the script failed (exit code and traceback kept)
    "oom",
    "timeout",
    "cancelled",
    "interrupted",  # the provider shut down and there was no checkpoint to resume from
    "refused",
]
TERMINAL_STATES: tuple[str, ...] = (
    "completed",
    "failed",
    "oom",
    "timeout",
    "cancelled",
    "interrupted",
    "refused",
)


class JobMetering(Record, frozen=True):
    wall_s: float = 0.0
    cpu_s: float = 0.0
    mticks: float = 0.0
    ram_mb_s: float = 0.0
    peak_ram_mb: float = 0.0
    net_rx_bytes: int | None = None
    net_tx_bytes: int | None = None
    gpu_s: float = 0.0
    cost_ntx: float = 0.0


class JobInfo(Record, frozen=True):
    job_id: str
    role: Literal["consumer", "provider"]
    state: JobState
    provider: str  # peer id of the provider (this node's own id on the provider side)
    consumer: str
    spec: dict[str, Any]
    reason: str = ""
    exit_code: int | None = None
    price_ntx_hour: float | None = None
    quoted_ntx: float | None = None
    executor: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    checkpoint: int = 0
    resumed_from: int | None = None
    log_lines: int = 0
    metering: JobMetering | None = None
    results_sha256: str = ""
    results_size: int = 0
    results_dir: str = ""
    # Paid jobs, once ended: the receipt (JSON) with the signatures gathered so far.
    receipt: str = ""


class JobList(Record, frozen=True):
    jobs: tuple[JobInfo, ...] = ()


class JobLogLine(Record, frozen=True):
    seq: int
    stream: Literal["stdout", "stderr", "system"]
    text: str
    at: float


class JobLogs(Record, frozen=True):
    job_id: str
    lines: tuple[JobLogLine, ...] = ()
    next_seq: int = 0
    done: bool = False


class JobResults(Record, frozen=True):
    job_id: str
    directory: str
    files: tuple[str, ...] = ()
    sha256: str = ""
    size: int = 0


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


class StartNetwork(Command, tag="start_network", frozen=True):
    """Bring a node started with a deferred network online (the TUI, after its first frame)."""

    reply = Done


class SetMode(Command, tag="set_mode", frozen=True):
    reply = Done
    mode: Mode


# --- GPU: live status, doctor, capabilities, ML images (issue 4) -------------------------
# Data and commands of engine/resources/gpu/; handlers in engine/resources/gpu/commands.py.

GpuVendor = Literal["nvidia", "amd", "intel"]


class GpuProcess(Record, frozen=True):
    pid: int
    name: str
    used_memory_mb: int | None = None  # None: the driver does not say (n/a)


class GpuSnapshot(Record, frozen=True):
    """One GPU at one moment. Every None is "n/a": the board or driver does not report it."""

    index: int  # the vendor's own device number (NVML index, ROCm SMI index, DRM order)
    vendor: GpuVendor
    name: str
    uuid: str
    memory_total_mb: int | None = None
    memory_used_mb: int | None = None
    memory_free_mb: int | None = None
    utilization_gpu: float | None = None  # percent of time a kernel ran
    utilization_memory: float | None = None  # percent of time memory was read/written
    temperature_c: float | None = None
    temperature_limit_c: float | None = None  # slowdown threshold where the board has one
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    compute_capability: str | None = None  # NVIDIA "8.6"; tensor cores from 7.0
    driver_version: str | None = None
    cuda_version: str | None = None  # the highest CUDA the driver supports, "12.4"
    rocm_version: str | None = None
    processes: tuple[GpuProcess, ...] = ()

    @property
    def memory_percent(self) -> float | None:
        if not self.memory_total_mb or self.memory_used_mb is None:
            return None
        return 100.0 * self.memory_used_mb / self.memory_total_mb


class GpuStatus(Record, frozen=True):
    """One sample of every GPU; ``reason`` says why ``gpus`` is empty (None when read)."""

    gpus: tuple[GpuSnapshot, ...] = ()
    reason: str | None = None
    at: float = 0.0


class GpuHistory(Record, frozen=True):
    """One GPU's recent samples, oldest first, one column per metric (sparkline-ready)."""

    at: tuple[float, ...] = ()
    utilization_gpu: tuple[float | None, ...] = ()
    memory_percent: tuple[float | None, ...] = ()
    temperature_c: tuple[float | None, ...] = ()
    power_w: tuple[float | None, ...] = ()


class GpuStatusReply(Record, frozen=True):
    gpus: tuple[GpuSnapshot, ...] = ()
    reason: str | None = None
    at: float = 0.0
    interval_s: float = 1.0  # how often the engine samples while someone watches
    history: dict[str, GpuHistory] = msgspec.field(default_factory=dict)  # by GPU uuid


class DoctorFinding(Record, frozen=True):
    check: str  # vendor, driver, devices, docker, container_runtime, secure_boot, wsl
    ok: bool
    summary: str
    detail: str = ""
    fix: tuple[str, ...] = ()  # exact shell commands for Debian/Ubuntu, run in order


class DoctorReport(Record, frozen=True):
    vendors: tuple[GpuVendor, ...]
    distro: str
    findings: tuple[DoctorFinding, ...]

    @property
    def ok(self) -> bool:
        return all(finding.ok for finding in self.findings)

    @property
    def fixes(self) -> tuple[str, ...]:
        commands: list[str] = []
        for finding in self.findings:
            for command in finding.fix if not finding.ok else ():
                if command not in commands:
                    commands.append(command)
        return tuple(commands)


class GpuCapability(Record, frozen=True):
    index: int
    vendor: GpuVendor
    name: str
    compute_capability: str | None = None
    tensor_cores: bool | None = None  # None: not known (non-NVIDIA or n/a)


class CapabilitySet(Record, frozen=True):
    """What ML frameworks can use, as seen from one place (the host or a container)."""

    where: str
    cuda: bool = False
    cuda_version: str | None = None
    rocm: bool = False
    rocm_version: str | None = None
    hip: bool = False
    tensor_cores: bool = False
    gpus: tuple[GpuCapability, ...] = ()
    notes: tuple[str, ...] = ()


class CapabilityReport(Record, frozen=True):
    host: CapabilitySet
    container: CapabilitySet | None = None
    container_reason: str | None = None  # why there is no container result


MlImageStatus = Literal["pulled", "present", "failed"]


class MlImageResult(Record, frozen=True):
    key: str  # the [ml_images] name, e.g. "pytorch_nvidia"
    image: str
    status: MlImageStatus
    detail: str = ""


class MlImagesReport(Record, frozen=True):
    results: tuple[MlImageResult, ...] = ()

    @property
    def ok(self) -> bool:
        return all(result.status != "failed" for result in self.results)


class GetGpuStatus(Command, tag="gpu_status", frozen=True):
    """The latest sample (starts the 1 Hz sampler; it stops ~30 s after the last call)."""

    reply = GpuStatusReply
    history: bool = False


class GpuDoctor(Command, tag="gpu_doctor", frozen=True):
    reply = DoctorReport


class GpuCapabilities(Command, tag="gpu_capabilities", frozen=True):
    reply = CapabilityReport
    in_container: bool = False


class PrepareMlImages(Command, tag="prepare_ml_images", frozen=True):
    """Pull the framework images; progress arrives as ImagePullProgress events."""

    reply = MlImagesReport
    images: tuple[str, ...] | None = None  # [ml_images] keys or image refs; None: for this rig


class ListPeers(Command, tag="peer_list", frozen=True):
    reply = PeerList
    dht: bool = False  # look the channel up in the DHT first, not only what gossip brought


class ChatStart(Command, tag="chat_start", frozen=True):
    reply = Done
    peer_id: str


class ChatList(Command, tag="chat_list", frozen=True):
    reply = ChatOverview


class ChatJoin(Command, tag="chat_join", frozen=True):
    reply = Done
    request_id: Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]  # a SQLite rowid


class ChatClear(Command, tag="chat_clear", frozen=True):
    reply = Done


class ChatSend(Command, tag="chat_send", frozen=True):
    reply = ChatMessage
    peer_id: str
    text: str
    queue: bool = True  # keep it for later when the peer is unreachable (else refuse)


class ChatHistory(Command, tag="chat_history", frozen=True):
    reply = ChatHistoryReply
    peer_id: str
    limit: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 500


class GetNetworkStatus(Command, tag="network_status", frozen=True):
    reply = NetworkStatus


class SubmitJob(Command, tag="job_submit", frozen=True):
    reply = JobInfo
    spec: dict[str, Any]  # engine.jobs.spec.JobSpec fields; validated by the engine
    peer_id: str | None = None  # pick the provider by hand


class ListJobs(Command, tag="job_list", frozen=True):
    reply = JobList


class GetJob(Command, tag="job_show", frozen=True):
    reply = JobInfo
    job_id: str


class GetJobLogs(Command, tag="job_logs", frozen=True):
    reply = JobLogs
    job_id: str
    after_seq: int = -1
    limit: int = 10_000
    newest: bool = False  # the last ``limit`` lines after ``after_seq`` (a live tail)


class CancelJob(Command, tag="job_cancel", frozen=True):
    reply = JobInfo
    job_id: str


class FetchJobResults(Command, tag="job_results", frozen=True):
    reply = JobResults
    job_id: str
    out_dir: str


# --- tunnels into running jobs (issue 13; engine/jobs/tunnel.py) ---------------------------


class TunnelForward(Record, frozen=True):
    """A ``job forward``: 127.0.0.1:local_port on this node reaches the job's remote_port."""

    forward_id: str
    job_id: str
    local_port: int
    remote_port: int
    url: str
    connections: int = 0  # open now
    opened: int = 0  # connections forwarded so far
    last_error: str = ""  # the provider's last refusal, if any


class ForwardList(Record, frozen=True):
    forwards: tuple[TunnelForward, ...] = ()


class ShellSession(Record, frozen=True):
    """A shell the provider accepted: the CLI connects to ``socket`` (one use, ours only)."""

    job_id: str
    socket: str


class JobForward(Command, tag="job_forward", frozen=True):
    reply = TunnelForward
    job_id: str
    remote_port: int
    local_port: int = 0  # 0: a free port
    # > 0: the forward closes unless renewed (ListForwards.renew) this often; the CLI's
    # lease, so a `job forward` killed with -9 leaves nothing listening. 0: until closed.
    lease_s: float = 0.0


class JobForwardClose(Command, tag="job_forward_close", frozen=True):
    forward_id: str


class ListForwards(Command, tag="job_forwards", frozen=True):
    reply = ForwardList
    job_id: str = ""  # "": every job's
    renew: tuple[str, ...] = ()  # forward ids whose lease starts again


class JobShell(Command, tag="job_shell", frozen=True):
    reply = ShellSession
    job_id: str
    command: tuple[str, ...] = ()  # (): the job's default shell
    rows: int = 24
    cols: int = 80
    term: str = "xterm"


class StopJob(Command, tag="job_stop", frozen=True):
    """End a service job normally (it ends "completed"); ``CancelJob`` is for batch jobs."""

    reply = JobInfo
    job_id: str


# --- payments: wallet (issue 6) -----------------------------------------------------------
# Data and commands of engine/payments/; handlers in engine/payments/service.py. A secret
# (mnemonic, passphrase, API key) travels only in the command that carries it in and in
# WalletCreated, and their reprs hide it, so a logged or printed object never shows one.

KeystoreBackend = Literal["secretservice", "file"]
CardanoNetwork = Literal["testnet", "mainnet"]
_HIDDEN = "<hidden>"


class KeystoreInfo(Record, frozen=True):
    """Where this node's secrets are kept, and whether they can be read now."""

    backend: KeystoreBackend
    location: str  # "Secret Service (desktop keyring)" or the encrypted file's path
    locked: bool  # file: no passphrase given (TUI, `wallet unlock`) nor configured (env, file)
    exists: bool  # file: the encrypted file has been created


class WalletInfo(Record, frozen=True):
    """The wallet's public half: never a secret."""

    address: str  # base address on ``network`` (the node's channel decides it)
    network: CardanoNetwork
    channel: str
    payment_key_hash: str  # hex, 28 bytes: what the escrow datum names
    stake_key_hash: str
    origin: Literal["new", "import"]
    created_at: float
    chain: Literal["cardano"] = "cardano"
    keystore: KeystoreInfo | None = None


class WalletCreated(Record, frozen=True):
    """WalletNew's reply: the one time the mnemonic leaves the keystore."""

    wallet: WalletInfo
    mnemonic: str  # 24 words, space-separated
    replaced: str | None = None  # the address of the wallet that --force replaced

    def __repr__(self) -> str:
        return (
            f"WalletCreated(wallet={self.wallet!r}, mnemonic={_HIDDEN}, replaced={self.replaced!r})"
        )

    def __rich_repr__(self) -> Any:
        yield "wallet", self.wallet
        yield "mnemonic", _HIDDEN
        yield "replaced", self.replaced


class WalletImported(Record, frozen=True):
    wallet: WalletInfo
    replaced: str | None = None


class Balance(Record, frozen=True):
    """What the wallet's address holds on the chain backend: exact units and decimals."""

    address: str
    network: CardanoNetwork
    backend: str  # [payments] backend: local, preprod or mainnet
    lovelace: int
    ada: float
    # None: the NTX token is not known ([payments] ntx_policy_id, or the local ledger says).
    ntx_units: int | None  # NTX base units (6 decimals)
    ntx: float | None
    ntx_unit: str | None  # policy id hex + asset name hex


class WalletNew(Command, tag="wallet_new", frozen=True):
    reply = WalletCreated
    force: bool = False  # replace an existing wallet (its mnemonic is deleted)


class WalletImport(Command, tag="wallet_import", frozen=True):
    reply = WalletImported
    mnemonic: str
    force: bool = False

    def __repr__(self) -> str:
        return f"WalletImport(mnemonic={_HIDDEN}, force={self.force!r})"

    def __rich_repr__(self) -> Any:
        yield "mnemonic", _HIDDEN
        yield "force", self.force


class WalletShow(Command, tag="wallet_show", frozen=True):
    reply = WalletInfo


class WalletBalance(Command, tag="wallet_balance", frozen=True):
    reply = Balance


class UnlockKeystore(Command, tag="keystore_unlock", frozen=True):
    """Give the encrypted keystore its passphrase (the TUI's prompt, `wallet unlock`).

    The first passphrase ever given creates the keystore file. A wrong one is refused with
    ``wrong_passphrase`` and changes nothing."""

    reply = KeystoreInfo
    passphrase: str

    def __repr__(self) -> str:
        return f"UnlockKeystore(passphrase={_HIDDEN})"

    def __rich_repr__(self) -> Any:
        yield "passphrase", _HIDDEN


class SetBlockfrostProjectId(Command, tag="wallet_blockfrost", frozen=True):
    """Keep the Blockfrost project id (an API key) in the keystore for preprod/mainnet."""

    reply = Done
    project_id: str

    def __repr__(self) -> str:
        return f"SetBlockfrostProjectId(project_id={_HIDDEN})"

    def __rich_repr__(self) -> Any:
        yield "project_id", _HIDDEN


# --- payments: escrow and rewards (issue 6) ------------------------------------------------
# One row per paid job on each side (engine/payments/escrow.py). Amounts are NTX base units
# (6 decimals) so nothing is ever rounded; `ntx` fields are for display.

EscrowState = Literal[
    "locking",  # consumer: lock tx built and kept, not yet accepted by the chain
    "locked",  # consumer: the chain holds the lock
    "verified",  # provider: the lock was found on the chain and matches the quote
    "receipt",  # both peers signed the job's receipt
    "claiming",  # provider: claim tx built and kept (resubmitted after a restart)
    "claimed",
    "refunding",  # consumer: refund tx built and kept
    "refunded",
    "paid_out",  # consumer: the provider claimed the lock
    "undecided",  # the oracle would not decide: the deadline refund is the way out
    "void",  # consumer: the lock never reached the chain; nothing was spent
]
ESCROW_OPEN_STATES = ("locking", "locked", "verified", "receipt", "claiming", "refunding")


class EscrowInfo(Record, frozen=True):
    job_id: str
    role: Literal["consumer", "provider"]
    state: EscrowState
    amount: int  # NTX base units
    ntx: float
    deadline_ms: int
    consumer_pkh: str
    provider_pkh: str
    oracle_key: str
    lock_tx: str = ""
    claim_tx: str = ""  # the claim's or the refund's tx hash
    reward_type: Literal["", "withdraw", "refund"] = ""
    outcome: str = ""  # the job's outcome as the receipt says
    error: str = ""  # the last problem (oracle down, tx refused...): retried or shown
    created_at: float = 0.0
    updated_at: float = 0.0


class EscrowList(Record, frozen=True):
    escrows: tuple[EscrowInfo, ...] = ()
    earned_ntx: float = 0.0  # claimed as provider
    spent_ntx: float = 0.0  # paid out to providers as consumer
    locked_ntx: float = 0.0  # in open locks (either side)
    refunded_ntx: float = 0.0


class RewardList(Command, tag="reward_list", frozen=True):
    reply = EscrowList


class RewardClaim(Command, tag="reward_claim", frozen=True):
    """Provider: ask the oracle for the withdraw signature and claim the job's escrow."""

    reply = EscrowInfo
    job_id: str


class RewardRefund(Command, tag="reward_refund", frozen=True):
    """Consumer: take the lock back (oracle refund signature, or after the deadline)."""

    reply = EscrowInfo
    job_id: str


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
    | GetGpuStatus
    | GpuDoctor
    | GpuCapabilities
    | PrepareMlImages
    | ListPeers
    | ChatStart
    | ChatList
    | ChatJoin
    | ChatClear
    | ChatSend
    | ChatHistory
    | GetNetworkStatus
    | SubmitJob
    | ListJobs
    | GetJob
    | GetJobLogs
    | CancelJob
    | FetchJobResults
    | JobForward
    | JobForwardClose
    | ListForwards
    | JobShell
    | StopJob
    | WalletNew
    | WalletImport
    | WalletShow
    | WalletBalance
    | UnlockKeystore
    | SetBlockfrostProjectId
    | RewardList
    | RewardClaim
    | RewardRefund
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


class ImagePullProgress(Event, tag="image_pull_progress", frozen=True):
    """GPU section: one framework image's pull (PrepareMlImages), aggregated over its layers."""

    key: str
    image: str
    status: Literal["waiting", "pulling", "extracting", "done", "present", "failed"]
    percent: float | None = None  # None until the registry has told the layer sizes
    current_bytes: int = 0
    total_bytes: int = 0
    detail: str = ""


class PeerChanged(Event, tag="peer_changed", frozen=True):
    peer_id: str
    peer: Peer | None  # None: the peer left the list


class ChatMessageEvent(Event, tag="chat_message", frozen=True):
    message: ChatMessage


class ChatRequestEvent(Event, tag="chat_request", frozen=True):
    request: ChatRequest


class NetworkChanged(Event, tag="network_changed", frozen=True):
    online: bool
    channel: str | None
    listen_addrs: tuple[str, ...] = ()
    error: str | None = None


class JobChanged(Event, tag="job_changed", frozen=True):
    job: JobInfo


class EscrowChanged(Event, tag="escrow_changed", frozen=True):
    escrow: EscrowInfo


class JobLogEvent(Event, tag="job_log", frozen=True):
    job_id: str
    lines: tuple[JobLogLine, ...]


AnyEvent = (
    JobChanged
    | EscrowChanged
    | JobLogEvent
    | OnboardingChanged
    | ModeChanged
    | EngineStopping
    | ImagePullProgress
    | PeerChanged
    | ChatMessageEvent
    | ChatRequestEvent
    | NetworkChanged
)


# --- wire helpers ------------------------------------------------------------------------


def to_builtins(obj: object) -> Any:
    return msgspec.to_builtins(obj)


def decode_command(data: object) -> Command:
    return msgspec.convert(data, AnyCommand)


def decode_reply(command: Command, data: object) -> Any:
    return msgspec.convert(data, command.reply)


def decode_event(data: object) -> Event:
    return msgspec.convert(data, AnyEvent)
