"""Where a node keeps things, and its settings.

Without ``--home`` the usual per-user folders (platformdirs) are used. ``--home DIR`` (or
``NUNET_HOME``) puts config, state, logs and keys under one folder, which is what lets several
nodes share one machine in tests and the demo. Settings come from ``config.toml`` and are
overridden by ``NUNET_<SECTION>_<KEY>`` environment variables.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import platformdirs

from engine import config_check
from engine.domain.fetch_policy import parse_networks
from engine.domain.ml_images import DEFAULT_ML_IMAGES
from engine.domain.peer_names import MAX_DISPLAY_NAME, RULE, display_name_problem, normalise
from engine.domain.safe_text import safe
from engine.errors import EngineError
from oracle_client.ntx import units_of

APP_NAME = "nunet-tui"
ENV_PREFIX = "NUNET_"
# AF_UNIX paths are limited to 108 bytes; leave room for the terminating NUL.
_MAX_SOCKET_PATH = 100
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class Paths:
    config_dir: Path
    state_dir: Path
    log_dir: Path
    keys_dir: Path
    home: Path | None = None

    @classmethod
    def for_home(cls, home: str | os.PathLike[str] | None = None) -> Paths:
        home = home if home is not None else os.environ.get(f"{ENV_PREFIX}HOME") or None
        if home is not None:
            root = Path(home).expanduser().resolve()
            return cls(root / "config", root / "state", root / "logs", root / "keys", root)
        state = Path(platformdirs.user_state_dir(APP_NAME))
        return cls(
            Path(platformdirs.user_config_dir(APP_NAME)),
            state,
            Path(platformdirs.user_log_dir(APP_NAME)),
            state / "keys",
        )

    @property
    def label(self) -> str:
        return str(self.home) if self.home is not None else str(self.state_dir)

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.toml"

    @property
    def resources_file(self) -> Path:
        """What the provider sells (engine/domain/specs.py): specs, custom resources, pools."""
        return self.config_dir / "resources.json"

    @property
    def database(self) -> Path:
        return self.state_dir / "nunet.db"

    @property
    def identity_key(self) -> Path:
        return self.keys_dir / "identity.key"

    @property
    def lock_file(self) -> Path:
        return self.state_dir / "engine.lock"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "engine.log"

    @property
    def control_socket(self) -> Path:
        preferred = self.state_dir / "control.sock"
        if len(os.fsencode(preferred)) <= _MAX_SOCKET_PATH:
            return preferred
        # Deep homes (pytest's tmp dirs) overflow sun_path: use a per-user 0700 folder
        # keyed by the state dir, so the same home always maps to the same socket.
        digest = hashlib.sha256(os.fsencode(self.state_dir)).hexdigest()[:20]
        folders = []
        runtime = os.environ.get("XDG_RUNTIME_DIR", "")
        if os.path.isabs(runtime) and _is_private(Path(runtime)):
            folders.append(Path(runtime) / APP_NAME)
        # $TMPDIR and /tmp are shared with other users: the folder is checked, never trusted.
        tmp = os.environ.get("TMPDIR", "")
        if os.path.isabs(tmp):
            folders.append(Path(tmp) / f"{APP_NAME}-{os.getuid()}")
        folders.append(Path("/tmp") / f"{APP_NAME}-{os.getuid()}")
        for folder in folders:
            socket = folder / f"{digest}.sock"
            if len(os.fsencode(socket)) <= _MAX_SOCKET_PATH:
                break
        return socket

    def ensure(self) -> None:
        """Create the folders, private to the user (keys and the socket live there), and
        refuse a socket folder someone else could control. Problems are EngineErrors."""
        sock_dir = self.control_socket.parent
        try:
            for folder in (self.config_dir, self.state_dir, self.log_dir, self.keys_dir):
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            for private in (self.state_dir, self.keys_dir):
                os.chmod(private, 0o700)
            if sock_dir != self.state_dir:
                # Never chmod what exists: as root that would adopt another user's folder.
                with contextlib.suppress(FileExistsError):
                    sock_dir.mkdir(mode=0o700)
        except OSError as exc:
            where = exc.filename or self.label
            raise EngineError(
                "home",
                f"cannot use {where} for this node's files ({exc.strerror or exc}); "
                "give --home (or NUNET_HOME) a folder you can write",
            ) from None
        check_socket_dir(sock_dir)


def private_dir_problem(folder: Path) -> str | None:
    """Why ``folder`` is not a real folder of ours that nobody else can enter, or None
    (lstat: a symbolic link is refused, wherever it points). Raises FileNotFoundError."""
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.geteuid():
        return f"belongs to uid {info.st_uid}, not to you (uid {os.geteuid()})"
    if info.st_mode & 0o077:
        return f"has mode {stat.S_IMODE(info.st_mode):04o}, so other users can get in"
    return None


def _is_private(folder: Path) -> bool:
    try:
        return private_dir_problem(folder) is None
    except OSError:
        return False


def check_socket_dir(folder: Path) -> None:
    """Refuse a control-socket folder another user controls: whoever does can put a socket
    of theirs there and read the keystore passphrase and mnemonic a client sends. Both the
    server (before it binds) and every client (before it connects) call this."""
    problem = private_dir_problem(folder)
    if problem is not None:
        raise EngineError(
            "socket_dir",
            f"refusing the control socket folder {folder}: it {problem}; it must be a folder "
            f"owned by you with mode 0700 (someone else may have made it: remove it and retry)",
        )


def check_socket_file(path: Path) -> None:
    """Refuse a control socket that is not a socket of ours (raises FileNotFoundError)."""
    info = os.lstat(path)
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.geteuid():
        kind = "a socket" if stat.S_ISSOCK(info.st_mode) else "not a socket"
        raise EngineError(
            "socket_dir",
            f"refusing the control socket {path}: it is {kind} owned by uid {info.st_uid}, "
            f"not a socket of yours (uid {os.geteuid()}); remove it and retry",
        )


def _text(most: int, least: int = 0, **extra: Any) -> Any:
    return msgspec.Meta(min_length=least or None, max_length=most, **extra)


Url = Annotated[str, _text(2048)]
Multiaddr = Annotated[str, _text(512)]
ImageRef = Annotated[str, _text(512)]
Seconds = Annotated[float, msgspec.Meta(ge=0, le=7 * 86400)]  # 0 turns the thing off


class NetworkSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # The channel a node that is not onboarded (a consumer) watches; onboarding sets its own.
    channel: Annotated[
        str,
        _text(64, 1, pattern=r"^[a-z0-9._-]+$", description="a-z, 0-9, '.', '_' and '-'"),
    ] = "nunet-test"
    listen: Annotated[list[Multiaddr], msgspec.Meta(max_length=32)] = msgspec.field(
        default_factory=lambda: ["/ip4/0.0.0.0/tcp/9000"]
    )
    bootstrap: Annotated[list[Multiaddr], msgspec.Meta(max_length=256)] = msgspec.field(
        default_factory=list
    )
    # Peers are judged gone after three missed beats; 0 would spin (and divide by zero).
    heartbeat_interval_s: Annotated[float, msgspec.Meta(ge=0.1, le=3600)] = 60.0
    mdns_interfaces: Annotated[list[Annotated[str, _text(64, 1)]], msgspec.Meta(max_length=64)] = (
        msgspec.field(default_factory=list)
    )
    # Inbound connections one address (IPv4, or an IPv6 /64) may have in their handshake at
    # once (engine/network/pending_gate.py); established connections are not counted.
    max_pending_per_ip: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 16
    # Established inbound connections of one address (IPv4, IPv6 /64) and of one subnet
    # (IPv4 /24, IPv6 /56): identities are free, addresses are not. Peers we have a job, an
    # escrow or an accepted chat with are admitted past both (engine/network/pending_gate.py).
    max_inbound_per_ip: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 32
    max_inbound_per_subnet: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 64
    # The DHT records other peers make us keep (values, and provider records, each): at most
    # dht_max_records and dht_max_mb in all, dht_records_per_ip of one address (IPv4, IPv6
    # /64) and dht_records_per_subnet of one subnet (/24, /56); our own records and those of
    # peers we deal with are kept first (engine/network/dht_bounds.py).
    dht_max_records: Annotated[int, msgspec.Meta(ge=64, le=1_000_000)] = 4096
    dht_max_mb: Annotated[float, msgspec.Meta(ge=1, le=4096)] = 8.0
    dht_records_per_ip: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 256
    dht_records_per_subnet: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 512
    # Circuit relay v2 (engine/network/relay.py, docs/network-nat.md). relay_service: this
    # (publicly reachable) node relays for peers behind NAT, within the relay_* bounds below:
    # reservations in all and per address (IPv4, IPv6 /64), circuits in all, per peer and per
    # address, and each circuit's time and data (both directions together).
    relay_service: bool = False
    relay_max_reservations: Annotated[int, msgspec.Meta(ge=1, le=65_536)] = 128
    relay_reservations_per_ip: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 4
    relay_max_circuits: Annotated[int, msgspec.Meta(ge=1, le=65_536)] = 64
    relay_circuits_per_peer: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 4
    relay_circuits_per_ip: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 16
    relay_circuit_s: Annotated[float, msgspec.Meta(ge=1, le=86_400)] = 120.0
    relay_circuit_mb: Annotated[float, msgspec.Meta(ge=0.001, le=65_536)] = 16.0
    # Relays (…/p2p/<peer id>) this node reserves a slot on while it advertises, and whose
    # circuit address (…/p2p/RELAY/p2p-circuit/p2p/SELF) it then advertises; with
    # relay_via_bootstrap, bootstrap peers that offer the relay service are used too.
    relays: Annotated[list[Multiaddr], msgspec.Meta(max_length=16)] = msgspec.field(
        default_factory=list
    )
    relay_via_bootstrap: bool = True
    # Port mapping (engine/network/port_mapping.py): while this node has an offer out, ask the
    # home router (UPnP IGD, else NAT-PMP) to forward its TCP listen port, and advertise the
    # router's address for it. Named for the better-known of the two.
    upnp: bool = True
    # AutoNAT (engine/network/autonat.py): this node dials back peers that ask whether they
    # are reachable (their own address only, bounded and rate-limited), and asks its own
    # bootstrap peers, relays and other direct peers every autonat_interval_s (and when its
    # listen addresses change). A node found publicly reachable holds no relay reservation.
    autonat_service: bool = True
    autonat_interval_s: Annotated[float, msgspec.Meta(ge=10, le=86_400)] = 600.0


class JobSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    slots: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 1
    executors: Annotated[list[Literal["docker", "process"]], msgspec.Meta(max_length=2)] = (
        msgspec.field(default_factory=lambda: ["docker"])
    )
    # Snapshots of a running job's /workspace, for resuming after a restart (0: none).
    checkpoint_interval_s: Seconds = 60.0
    # A running job's live CPU, RAM and GPU use, sampled this often and sent to its consumer
    # with its updates (the job view's sparklines; 0: none). At least 1 s (the executors read
    # their figures about once a second).
    usage_interval_s: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 5.0
    # A consumer's job whose provider stays unreachable (no heartbeat for three intervals)
    # this much longer ends "interrupted", and its escrow's refund is asked for at once.
    provider_grace_s: Seconds = 300.0
    # Provider: an accepted slot of a gang (issue 25 §2) waits this long for its consumer's
    # start, then ends failed, never started (nothing billed).
    gang_start_wait_s: Annotated[float, msgspec.Meta(ge=1, le=3600)] = 600.0
    # NTX per hour of machine time, per resource tier; advertised to consumers.
    prices: Annotated[
        dict[Annotated[str, _text(32, 1)], Annotated[float, msgspec.Meta(ge=0, le=1_000_000)]],
        msgspec.Meta(max_length=16),
    ] = msgspec.field(default_factory=lambda: {"low": 1.0, "moderate": 2.5, "high": 6.0})
    # How long a quote holds for the consumer to confirm; unconfirmed ones are then dropped.
    quote_ttl_s: Seconds = 120.0
    # Networks (CIDRs) a job's script URL or git host may be in besides public addresses:
    # loopback, LAN and link-local ones are refused unless listed (a LAN market, the demo).
    fetch_allow_networks: list[str] = msgspec.field(default_factory=list)
    # Job logs on disk (both roles): one job's is cut at log_job_mb (a line says so); ended
    # jobs' logs are removed after log_keep_days (0: kept), and oldest first while all of them
    # together pass log_total_mb. A removed log keeps one line saying when and why.
    log_job_mb: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)] = 256
    log_total_mb: Annotated[int, msgspec.Meta(ge=1, le=1 << 30)] = 4096
    log_keep_days: Annotated[float, msgspec.Meta(ge=0, le=36500)] = 30.0
    # A `job forward` connection (both ends: provider and consumer) with no byte moving either
    # way this long is closed; a side whose reader stopped (a paused download) waits this long.
    tunnel_idle_s: Annotated[float, msgspec.Meta(ge=1, le=7 * 86400)] = 600.0
    # Files and folders (inodes) one job may hold in its workspace, a git source's checkout
    # included: a clone past it is refused, a job past it stopped ("failed", with the reason).
    # Bytes alone do not bound a disk: empty files fill its inodes.
    max_files: Annotated[int, msgspec.Meta(ge=100, le=100_000_000)] = 100_000
    # A finished job's workspace and checkpoints are removed this long after it ended (its
    # results archive and log stay: results are fetched from the archive); 0: kept for ever.
    workspace_keep_hours: Annotated[float, msgspec.Meta(ge=0, le=876_000)] = 24.0
    # ... a notebook's (its files), this long after it ended, unless `notebook delete` came
    # first; 0: kept until deleted.
    notebook_keep_days: Annotated[float, msgspec.Meta(ge=0, le=36500)] = 30.0
    # `job shell` into a running job by its consumer (every session is noted in the job's log;
    # advertised, so consumers who want one can match on it).
    allow_shell: bool = True
    # The Python that runs process jobs (empty: the daemon's own). Its frameworks are what the
    # process executor offers: a job imports its framework from it.
    process_python: Annotated[str, _text(4096)] = ""
    # ... and into a process-executor job: off unless turned on here (even sandboxed, a shell
    # is a person typing on this machine; docs/security.md says what it can reach).
    allow_process_shell: bool = False
    # The process executor's sandbox (engine/jobs/executors/sandbox.py): "auto" uses it where
    # the host can (bubblewrap and user namespaces) and warns loudly where it cannot;
    # "require" refuses process jobs without it; "off" runs them as this user (trusted
    # networks only).
    process_sandbox: Literal["auto", "require", "off"] = "auto"

    def shells_offered(self) -> bool:
        """Whether `job shell` is offered at all (advertised): a Docker job's, or a process
        job's where those are turned on."""
        return self.allow_shell and ("docker" in self.executors or self.allow_process_shell)

    def price_units(self) -> dict[str, int]:
        """``prices`` in NTX base units: the figures a person typed, read once here (to the
        nearest base unit); everything past the config holds the integers."""
        return {tier: units_of(price) for tier, price in self.prices.items()}


class MachineSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What to believe instead of detection, for VMs and containers whose probes lie.

    Unset fields (None) are detected. Declared values replace the detected ones in every
    capacity view, so the available view never exceeds what was declared.
    """

    hostname: Annotated[str, _text(253, 1)] | None = None
    cpu_model: Annotated[str, _text(256, 1)] | None = None
    cpu_cores: Annotated[int, msgspec.Meta(ge=1, le=65_536)] | None = None
    cpu_mhz_per_core: Annotated[int, msgspec.Meta(ge=1, le=100_000)] | None = None
    memory_mb: Annotated[int, msgspec.Meta(ge=1, le=1 << 30)] | None = None
    disk_mb: Annotated[int, msgspec.Meta(ge=1, le=1 << 40)] | None = None


class MlImagesSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[ml_images]: the framework images onboard-ml pulls (an empty string skips one)."""

    pytorch_cpu: ImageRef = DEFAULT_ML_IMAGES["pytorch_cpu"]
    pytorch_nvidia: ImageRef = DEFAULT_ML_IMAGES["pytorch_nvidia"]
    pytorch_amd: ImageRef = DEFAULT_ML_IMAGES["pytorch_amd"]
    tensorflow_cpu: ImageRef = DEFAULT_ML_IMAGES["tensorflow_cpu"]
    tensorflow_nvidia: ImageRef = DEFAULT_ML_IMAGES["tensorflow_nvidia"]
    tensorflow_amd: ImageRef = DEFAULT_ML_IMAGES["tensorflow_amd"]
    # scikit-learn jobs (CPU only): by default the image scripts/build_test_image.sh builds.
    sklearn_cpu: ImageRef = DEFAULT_ML_IMAGES["scikit-learn_cpu"]

    def as_map(self) -> dict[str, str]:
        """By the executors' keys (``FRAMEWORK_DEVICE``: sklearn_cpu is scikit-learn_cpu)."""
        return {
            _IMAGE_KEYS.get(f.name, f.name): getattr(self, f.name)
            for f in msgspec.structs.fields(self)
        }


_IMAGE_KEYS = {"sklearn_cpu": "scikit-learn_cpu"}


class PaymentsSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[payments]: the wallet's keystore and the chain it reads (engine/payments/)."""

    # none: no chain reads; local: the local ledger at ledger_url; preprod/mainnet: Blockfrost
    # (its project id is kept in the keystore: `nunet-tui wallet blockfrost`).
    backend: Literal["none", "local", "preprod", "mainnet"] = "none"
    ledger_url: Url = ""  # the local ledger's Blockfrost base URL (/v0 is appended)
    # auto: the desktop's Secret Service when usable, else the encrypted file in the keys dir.
    keystore: Literal["auto", "secretservice", "file"] = "auto"
    # Unlocks the encrypted file; must be 0600 (relative: config dir).
    passphrase_file: Annotated[str, _text(4096)] = ""
    ntx_policy_id: Annotated[str, _text(128)] = ""  # hex; empty with "local": the ledger says
    ntx_asset_name: Annotated[str, _text(128)] = ""  # hex
    # The oracle that signs escrow releases; its key (from its /info) is what the datum names.
    oracle_url: Url = ""
    # Provider: run only jobs whose NTX is locked in escrow (when a backend is configured).
    require_payment: bool = True
    # Consumer: the escrow deadline is twice the expected duration plus this margin.
    deadline_margin_s: Annotated[int, msgspec.Meta(ge=60, le=30 * 86400)] = 3600
    # Provider: tell the oracle this often that a paid job is still running (the oracle
    # refunds on the consumer's word only after ~3 of these are missed).
    liveness_interval_s: Annotated[float, msgspec.Meta(ge=0.1, le=300)] = 30.0
    # Both: open escrows (a deadline passed, the oracle back, a claim to confirm) are looked at
    # this often; a receipt or a command wakes the loop at once either way.
    settle_interval_s: Annotated[float, msgspec.Meta(ge=1, le=3600)] = 15.0
    # Consumer: a decided split the provider has not submitted this long after the oracle's
    # decision is submitted by the consumer itself (the script lets either party send it),
    # so its share never waits on a provider that went away.
    split_grace_s: Annotated[float, msgspec.Meta(ge=0, le=30 * 86400)] = 600.0
    # Provider: a consumer that watched a job run for less than our receipt bills offers to
    # sign for what it watched (the start's update may reach it late on a slow link); we sign
    # an offer at most this much (and 2 %) below our receipt, else the escrow is disputed.
    counter_tolerance_s: Annotated[float, msgspec.Meta(ge=0, le=86400)] = 30.0


class MetricsSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[metrics]: the Prometheus endpoint (engine/metrics.py); off unless ``listen`` is set."""

    # HOST:PORT, served only there (a port of 0 takes a free one, logged); "" is off.
    listen: Annotated[
        str,
        _text(
            300,
            pattern=r"^$|^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$",
            description='HOST:PORT such as "127.0.0.1:9464", or "" for off',
        ),
    ] = ""


class ApiSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[api]: the local HTTP API (engine/http_api.py); off unless ``listen`` is set. Every
    request but the OpenAPI document needs the token in ``<home>/state/api-token`` (0600)."""

    # HOST:PORT, served only there; "" is off. Keep it on 127.0.0.1 (an SSH tunnel reaches it
    # from elsewhere): the token is all that guards it.
    listen: Annotated[
        str,
        _text(
            300,
            pattern=r"^$|^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$",
            description='HOST:PORT such as "127.0.0.1:9999", or "" for off',
        ),
    ] = ""


class NotifySettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[notify]: told when a job ends or a reward is paid (engine/notify.py)."""

    # A JSON POST per event; retried with backoff on errors, 5xx and 429. "" is off.
    webhook_url: Annotated[
        str, _text(2048, pattern=r"^$|^https?://", description="an http:// or https:// URL")
    ] = ""
    webhook_timeout_s: Annotated[float, msgspec.Meta(ge=0.1, le=120)] = 10.0
    webhook_retries: Annotated[int, msgspec.Meta(ge=0, le=10)] = 3
    webhook_backoff_s: Annotated[float, msgspec.Meta(ge=0.01, le=300)] = 1.0  # doubles each try
    # A program run per event with the event as JSON on stdin (no shell), killed after
    # command_timeout_s. [] is off.
    command: Annotated[list[Annotated[str, _text(4096, 1)]], msgspec.Meta(max_length=64)] = (
        msgspec.field(default_factory=list)
    )
    command_timeout_s: Annotated[float, msgspec.Meta(ge=0.1, le=600)] = 10.0
    # A desktop notification through notify-send, where it is installed.
    desktop: bool = False


class ProviderSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[provider]: how this node presents itself to consumers in its signed advert."""

    # Shown to consumers next to this node's short peer id (engine/domain/peer_names.py has the
    # rule, checked in load_settings after NFC normalisation). "" advertises no name.
    display_name: Annotated[str, _text(4 * MAX_DISPLAY_NAME)] = ""


class FleetRig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One rig of ``[fleet] rigs``: reached by exactly one of its home (its control socket),
    a control socket (one forwarded with ``ssh -L`` is just a socket) or the URL of its HTTP
    API with the file holding its token. Relative paths are from the config folder."""

    name: Annotated[
        str, _text(32, 1, pattern=r"^[A-Za-z0-9._-]+$", description="A-Z, a-z, 0-9, '.', '_', '-'")
    ]
    home: Annotated[str, _text(4096)] = ""
    socket: Annotated[str, _text(4096)] = ""
    url: Annotated[
        str, _text(2048, pattern=r"^$|^https?://", description="an http:// or https:// URL")
    ] = ""
    token_file: Annotated[str, _text(4096)] = ""


class FleetSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """[fleet]: the rigs ``nunet-tui fleet`` shows side by side (nunet_tui/fleet.py)."""

    rigs: Annotated[list[FleetRig], msgspec.Meta(max_length=64)] = msgspec.field(
        default_factory=list
    )
    # Each rig's poll gives up after this long (the rig is then "unreachable": no answer).
    timeout_s: Annotated[float, msgspec.Meta(ge=0.5, le=60)] = 5.0
    # Every this often the fleet screen polls every rig again.
    refresh_s: Annotated[float, msgspec.Meta(ge=1, le=3600)] = 10.0


def fleet_problem(fleet: FleetSettings, label: str) -> str | None:
    """Why ``[fleet] rigs`` cannot be used as written (one line naming the rig), or None."""
    seen: set[str] = set()
    for index, rig in enumerate(fleet.rigs):
        where = f"fleet.rigs[{index}] ({rig.name!r}, in {label})"
        ways = [way for way in ("home", "socket", "url") if getattr(rig, way)]
        if len(ways) != 1:
            given = " and ".join(ways) if ways else "none of them"
            return (
                f'{where} gives {given}: give exactly one of home = "/path", socket = '
                f'"/path/control.sock" or url = "http://127.0.0.1:9999" (with token_file)'
            )
        if rig.url and not rig.token_file:
            return (
                f"{where} has a url but no token_file: add "
                'token_file = "<its home>/state/api-token"'
            )
        if rig.token_file and not rig.url:
            return f"{where} has a token_file but no url: the token is for the HTTP API only"
        if rig.name in seen:
            return f"{where}: the name {rig.name!r} is used twice; give each rig its own"
        seen.add(rig.name)
    return None


# [keys]: the TUI's key remaps, binding id -> key(s), e.g. "jobs.open" = "space". Only the
# shape is checked here (the engine knows nothing of keys); the TUI checks ids and keys as it
# starts (nunet_tui/keymap.py), and a bad entry there is one line and the default key.
KeyRemaps = Annotated[
    dict[Annotated[str, _text(64, 1)], Annotated[str, _text(64, 1)]], msgspec.Meta(max_length=256)
]


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    log_level: Annotated[str, _text(16)] = "info"
    ml_images: MlImagesSettings = msgspec.field(default_factory=MlImagesSettings)
    machine: MachineSettings = msgspec.field(default_factory=MachineSettings)
    network: NetworkSettings = msgspec.field(default_factory=NetworkSettings)
    jobs: JobSettings = msgspec.field(default_factory=JobSettings)
    payments: PaymentsSettings = msgspec.field(default_factory=PaymentsSettings)
    metrics: MetricsSettings = msgspec.field(default_factory=MetricsSettings)
    api: ApiSettings = msgspec.field(default_factory=ApiSettings)
    notify: NotifySettings = msgspec.field(default_factory=NotifySettings)
    provider: ProviderSettings = msgspec.field(default_factory=ProviderSettings)
    keys: KeyRemaps = msgspec.field(default_factory=dict)
    fleet: FleetSettings = msgspec.field(default_factory=FleetSettings)


_LOG_LEVELS = ("debug", "info", "warning", "error")


def load_settings(
    paths: Paths, environ: dict[str, str] | None = None, *, addresses: bool = True
) -> Settings:
    """Read config.toml, apply NUNET_* overrides, validate; a bad value is a one-line error
    naming the setting, where it was set and what is allowed. ``addresses=False`` leaves the
    multiaddrs unchecked (multiaddr brings netaddr, 30 ms: the TUI's first frame does not
    wait for it; its engine checks them as it opens)."""
    environ = dict(os.environ) if environ is None else environ
    raw = _read_config(paths.config_file)
    where = _apply_env(raw, environ)
    _flatten_keys(raw)
    label = str(paths.config_file)
    if problem := config_check.raw_problem(Settings, raw, where, label):
        raise EngineError("config", problem)
    try:
        settings = msgspec.convert(raw, Settings)
    except msgspec.ValidationError as exc:
        raise EngineError(
            "config", config_check.explain(exc, Settings, raw, where, label)
        ) from None
    if settings.log_level.lower() not in _LOG_LEVELS:
        raise EngineError(
            "config",
            f"log_level must be one of {', '.join(_LOG_LEVELS)}, not {settings.log_level!r}",
        )
    if addresses:
        _check_multiaddrs(settings.network)
    parse_networks(settings.jobs.fetch_allow_networks)
    metrics_address(settings.metrics.listen)
    _check_display_name(settings.provider, where, label)
    if problem := fleet_problem(settings.fleet, label):
        raise EngineError("config", safe(problem))
    return settings


def metrics_address(listen: str) -> tuple[str, int] | None:
    """``[metrics] listen`` as (host, port), None when off; a bad one is a one-line error."""
    if not listen:
        return None
    import ipaddress

    host, _, port_text = listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    port = int(port_text)
    problem = None
    if port > 65535:
        problem = f"port {port} is above 65535"
    elif host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            problem = f"{host!r} is not an IP address (nor localhost)"
    if problem is not None:
        raise EngineError(
            "config",
            f"bad setting metrics.listen = {listen[:60]!r}: {problem}; write it like "
            '"127.0.0.1:9464" (only where it is bound: keep it on loopback unless a '
            'firewall guards it), or "" for off',
        )
    return host, port


def _check_display_name(provider: ProviderSettings, where: dict[str, str], label: str) -> None:
    """``[provider] display_name`` kept in its NFC form, or a one-line error with the rule."""
    name = normalise(provider.display_name)
    if problem := display_name_problem(name):
        key = "provider.display_name"
        source = f"from {where[key]}" if key in where else f"in {label}"
        shown = safe(repr(name if len(name) <= 40 else name[:40] + "…"))
        raise EngineError(
            "config", f"bad setting {key} = {shown} ({source}): it must be {RULE} ({problem})"
        )
    provider.display_name = name


def _flatten_keys(raw: dict[str, Any]) -> None:
    """``[keys]`` with its ids as TOML reads them: ``jobs.open = "space"`` unquoted is a table
    ``jobs`` with ``open`` in it; the id is ``jobs.open`` either way."""
    keys = raw.get("keys")
    if not isinstance(keys, dict):
        return
    flat: dict[str, Any] = {}
    pending: list[tuple[str, dict[str, Any]]] = [("", keys)]
    while pending:
        prefix, table = pending.pop()
        for name, value in table.items():
            if isinstance(value, dict):
                pending.append((f"{prefix}{name}.", value))
            else:
                flat[f"{prefix}{name}"] = value
    raw["keys"] = flat


def _read_config(file: Path) -> dict[str, Any]:
    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise EngineError(
            "config", f"cannot read {file} ({exc.strerror or exc}); fix it or remove it"
        ) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise EngineError("config", f"{file} is over {MAX_CONFIG_BYTES >> 20} MiB: not settings")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise EngineError(
            "config", f"{file} is not valid TOML ({first}); fix or remove it"
        ) from None
    except RecursionError:
        raise EngineError(
            "config", f"{file} is nested too deeply to be settings; fix or remove it"
        ) from None


def _check_multiaddrs(network: NetworkSettings) -> None:
    import multiaddr  # small; py-libp2p itself is only imported when the network starts

    for kind, addrs in (
        ("network.listen", network.listen),
        ("network.bootstrap", network.bootstrap),
        ("network.relays", network.relays),
    ):
        for addr in addrs:
            try:
                parsed = multiaddr.Multiaddr(addr)
            except Exception as exc:
                raise EngineError(
                    "config",
                    f"{kind}: {addr!r} is not a multiaddr ({exc}); "
                    "write it like /ip4/127.0.0.1/tcp/9000",
                ) from exc
            names = [p.name for p in parsed.protocols()]
            if kind == "network.listen" and (len(names) != 2 or names[1] != "tcp"):
                # py-libp2p builds a transport for whatever a listen address names: a
                # /udp/…/quic-v1 one would bring in its QUIC, evaluated and not enabled
                # (docs/network-nat.md, "QUIC: evaluated, not enabled").
                raise EngineError(
                    "config",
                    f"{kind}: {addr!r} is not a TCP address (the node listens on TCP only; "
                    "QUIC is not enabled); write it like /ip4/0.0.0.0/tcp/9000",
                )
            if kind != "network.listen" and "p2p" not in names:
                raise EngineError(
                    "config",
                    f"{kind}: {addr!r} names no peer; end it with /p2p/12D3KooW… "
                    "(`nunet-tui peer self` on that node prints its full addresses)",
                )


def _apply_env(raw: dict[str, Any], environ: dict[str, str]) -> dict[str, str]:
    """NUNET_LOG_LEVEL, NUNET_NETWORK_LISTEN=a,b, NUNET_JOBS_SLOTS=2,
    NUNET_JOBS_PRICES=low=1,high=5 ...: each parsed as its field's type says. Returns which
    variable set which ``section.field``, for the error messages."""
    top, tables = config_check.sections(Settings)
    where: dict[str, str] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX) :].lower()
        if name in top:
            raw[name] = config_check.env_value(top[name], value)
            where[name] = key
            continue
        for section, fields in tables.items():
            field = name.removeprefix(section + "_")
            if field != name and field in fields:
                table = raw.setdefault(section, {})
                if isinstance(table, dict):  # else the schema refuses the section itself
                    table[field] = config_check.env_value(fields[field], value)
                    where[f"{section}.{field}"] = key
    return where
